"""GPT causal-LM stream: packing order, eos between documents, shifted targets, segment/position ids, resume,
process shares, seeds, evaluation padding, and a real token cache (byte BPE over tiny-shakespeare)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data.byte_bpe import train_byte_bpe
from ptm_jax.data.cache import TokenCache, build_cache
from ptm_jax.data.chunks import iter_documents
from ptm_jax.data.pretraining.nsp import doc_permutation
from ptm_jax.data.pretraining.source import ArraySource, SubsetSource
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.data.pretraining.causal_lm import (
    FEATURE_DTYPES,
    causal_lm_dataset,
    doc_token_counts,
)

EOS, PAD, L = 1, 0, 16


@pytest.fixture(scope="module")
def docs() -> list[list[np.ndarray]]:
    """23 documents of 1-4 sentences, 1-40 tokens (some longer than a row); token t of document d is
    1000*(d+1)+t, so every token is unique and tells where it came from."""
    rng = np.random.default_rng(7)
    out = []
    for d in range(23):
        lengths = rng.integers(1, 12, size=rng.integers(1, 5))
        if d == 5:
            lengths = np.array([20, 21])  # 41 tokens: longer than two rows
        ids = 1000 * (d + 1) + np.arange(lengths.sum())
        out.append(np.split(ids, np.cumsum(lengths)[:-1]))
    return out


@pytest.fixture(scope="module")
def source(docs) -> ArraySource:
    return ArraySource(docs)


def reference_stream(docs, seed: int, passes: int, shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and document-start flags of ``passes`` passes, built independently of the module."""
    toks, starts = [], []
    for e in range(passes):
        order = doc_permutation(len(docs), seed, e) if shuffle else range(len(docs))
        for d in order:
            doc = np.concatenate(docs[d]).tolist() + [EOS]
            toks += doc
            starts += [True] + [False] * (len(doc) - 1)
    return np.array(toks), np.array(starts)


def take(ds, n: int | None = None) -> dict[str, np.ndarray]:
    """The first ``n`` batches (all when None) as arrays stacked on a leading batch axis."""
    batches = [{k: v.numpy() for k, v in b.items()} for b in (ds if n is None else ds.take(n))]
    return {k: np.stack([b[k] for b in batches]) for k in batches[0]}


def stream(source, seed=3, start=0, g=4, p=0, n_proc=1, repeat=True, shuffle=True, seq_len=L):
    return causal_lm_dataset(source, EOS, PAD, seq_len, seed=seed, start_index=start, global_batch=g,
                             process_index=p, process_count=n_proc, repeat=repeat, shuffle=shuffle)


def test_rows_tile_two_passes_in_permutation_order_with_eos_and_shifted_targets(source, docs):
    ref, _ = reference_stream(docs, seed=3, passes=3)
    pass_tokens = sum(int(np.concatenate(d).size) + 1 for d in docs)
    n_batches = -(-2 * pass_tokens // (4 * L)) + 1  # past the end of pass 1
    out = take(stream(source), n_batches)
    assert {k: v.dtype for k, v in out.items()} == {k: np.dtype(v) for k, v in FEATURE_DTYPES.items()}
    assert out["input_ids"].shape == (n_batches, 4, L)
    inputs, targets = out["input_ids"].reshape(-1), out["target_ids"].reshape(-1)
    n = inputs.size
    np.testing.assert_array_equal(inputs, ref[:n])
    np.testing.assert_array_equal(targets, ref[1:n + 1])
    assert out["target_weights"].min() == 1.0
    np.testing.assert_array_equal(out["example_id"].reshape(-1), np.arange(n_batches * 4))
    first_pass = inputs[:pass_tokens]  # every token of every document exactly once, eos once per document
    body = np.concatenate([np.concatenate(d) for d in docs])
    assert np.array_equal(np.sort(first_pass[first_pass != EOS]), np.sort(body))
    assert int((first_pass == EOS).sum()) == len(docs)
    assert not np.array_equal(ref[:pass_tokens], ref[pass_tokens:2 * pass_tokens])  # pass 1 reshuffled


def test_segment_and_position_ids_restart_at_each_document_start(source, docs):
    ref, starts = reference_stream(docs, seed=3, passes=2)
    out = take(stream(source), 12)
    seg, pos = out["segment_ids"].reshape(-1, L), out["position_ids"].reshape(-1, L)
    for r in range(seg.shape[0]):  # plain per-token reference
        s, p = 0, 0
        for c in range(L):
            if c == 0 or starts[r * L + c]:
                s, p = s + 1, 0
            assert (seg[r, c], pos[r, c]) == (s, p), (r, c)
            p += 1
    assert pos.max() < L and seg.min() == 1
    long_rows = np.flatnonzero((out["input_ids"].reshape(-1, L) // 1000 == 6).all(axis=1))
    assert long_rows.size >= 1  # a row wholly inside the 41-token document: one segment, positions 0..L-1
    np.testing.assert_array_equal(pos[long_rows[0]], np.arange(L))
    # an eos input closes its own document's segment; the next token opens a new one
    rows_in = out["input_ids"].reshape(-1, L)
    r, c = np.argwhere(rows_in[:, :-1] == EOS)[0]
    assert seg[r, c + 1] == seg[r, c] + 1 and pos[r, c + 1] == 0


@pytest.mark.parametrize("start_batch", [3, 11])  # 11 starts past the end of pass 0
def test_resume_at_k_gives_the_tail_of_the_uninterrupted_stream(source, start_batch):
    full = take(stream(source), 16)
    resumed = take(stream(source, start=start_batch * 4), 16 - start_batch)
    for k in full:
        np.testing.assert_array_equal(resumed[k], full[k][start_batch:])


@pytest.mark.parametrize("n_proc", [2, 4])
def test_process_shares_reassemble_the_one_process_batches(source, n_proc):
    g = 8
    full = take(stream(source, g=g, start=2 * g), 6)
    shares = [take(stream(source, g=g, start=2 * g, p=p, n_proc=n_proc), 6) for p in range(n_proc)]
    for k in full:
        assert shares[0][k].shape[1] == g // n_proc
        np.testing.assert_array_equal(np.concatenate([s[k] for s in shares], axis=1), full[k])


def test_same_seed_same_stream_other_seed_other_order(source):
    a, b, c = (take(stream(source, seed=s), 5)["input_ids"] for s in (3, 3, 4))
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.5
    plain = take(stream(source, shuffle=False), 2)["input_ids"].reshape(-1)
    assert plain[0] == 1000 and np.all(np.diff(plain[plain != EOS][:10]) > 0)


def test_eval_covers_each_token_once_and_pads_with_weight_zero(source, docs):
    ref, _ = reference_stream(docs, seed=0, passes=1, shuffle=False)
    g, n_proc = 4, 2
    shares = [take(stream(source, g=g, p=p, n_proc=n_proc, repeat=False, shuffle=False)) for p in range(2)]
    out = {k: np.concatenate([s[k] for s in shares], axis=1) for k in shares[0]}
    n_rows = -(-(ref.size - 1) // L)
    assert out["input_ids"].shape == (-(-n_rows // g), g, L)  # the final global batch is padded with rows
    w = out["target_weights"].reshape(-1)
    assert w.sum() == ref.size - 1 and np.all(w[: ref.size - 1] == 1) and np.all(w[ref.size - 1:] == 0)
    np.testing.assert_array_equal(out["input_ids"].reshape(-1)[: ref.size - 1], ref[:-1])
    np.testing.assert_array_equal(out["target_ids"].reshape(-1)[: ref.size - 1], ref[1:])
    for k, fill in (("input_ids", PAD), ("target_ids", PAD), ("segment_ids", 0), ("position_ids", 0)):
        assert np.all(out[k].reshape(-1)[ref.size - 1:] == fill), k
    assert out["target_ids"].reshape(-1)[ref.size - 2] == EOS  # the last document's eos is predicted
    resumed = take(stream(source, g=g, start=g, p=1, n_proc=n_proc, repeat=False, shuffle=False))
    np.testing.assert_array_equal(resumed["input_ids"], shares[1]["input_ids"][1:])


def test_bad_arguments_raise_clear_errors(source):
    with pytest.raises(ConfigError, match="sequence length 1 must be an integer >= 2"):
        stream(source, seq_len=1)
    with pytest.raises(DataError, match="corpus has no documents"):
        stream(SubsetSource(source, []))
    with pytest.raises(ConfigError, match="start_index=6 must be a non-negative multiple of the global batch 4"):
        stream(source, start=6)
    with pytest.raises(ConfigError, match="global batch 6 must be a positive multiple of the process count 4"):
        stream(source, g=6, n_proc=4)
    with pytest.raises(ConfigError, match=r"process_index=2 must be in \[0, process_count=2\)"):
        stream(source, p=2, n_proc=2)
    with pytest.raises(ConfigError, match="eos_id=-1 must be a non-negative token id"):
        causal_lm_dataset(source, -1, 0, 8, seed=0, start_index=0, global_batch=1)
    with pytest.raises(ConfigError, match="data seed must be an integer"):
        stream(source, seed=-1)


class ListSource:
    """A plain DocumentSource over Python lists (no flat token array): read document by document."""

    def __init__(self, docs):
        self.docs = [[np.asarray(s, np.int32) for s in d] for d in docs]
        self.num_docs = len(self.docs)

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        return np.array([s.size for s in self.docs[d]], np.int32)

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        return np.concatenate(self.docs[d][first_sentence:last_sentence])


def test_document_by_document_sources_give_the_same_stream(source, docs):
    plain = ListSource(docs)
    np.testing.assert_array_equal(doc_token_counts(plain), doc_token_counts(source))
    for repeat in (True, False):
        a = take(stream(plain, repeat=repeat), 10)
        b = take(stream(source, repeat=repeat), 10)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_sharded_token_cache_of_byte_bpe_text_packs_like_its_documents(shared_data, tmp_path):
    cfg = DataConfig(corpus=str(shared_data / "corpus/tinyshakespeare/input.txt"), format="lines")
    documents = list(itertools.islice(iter_documents(cfg), 300))
    tok = train_byte_bpe((s for d in documents for s in d), 1000, tmp_path / "tok")
    for shard in range(2):  # documents interleaved between two shards by source key, as two hosts build them
        build_cache([(k, documents[k]) for k in range(shard, 300, 2)], tok,
                    tmp_path / f"cache/chunk-{shard:06d}-of-000002", fingerprint="test", keyed=True,
                    background=False)
    cache = TokenCache.open(tmp_path / "cache", fingerprint="test")
    assert cache.num_docs == 300 and cache._order is not None
    counts = doc_token_counts(cache)
    slow = [int(cache.doc_sentence_lengths(d).sum()) for d in range(cache.num_docs)]
    assert counts.tolist() == slow
    subset = SubsetSource(cache, np.arange(10, 200, 3))
    assert doc_token_counts(subset).tolist() == [slow[d] for d in subset.doc_indices]
    out = take(causal_lm_dataset(cache, tok.eos_id, tok.pad_id, 128, seed=1, start_index=0, global_batch=2,
                                 shuffle=False), 8)
    expected = np.concatenate([np.append(cache.doc_tokens(d), tok.eos_id) for d in range(cache.num_docs)])
    np.testing.assert_array_equal(out["input_ids"].reshape(-1), expected[: 8 * 2 * 128])
    assert tok.decode(out["input_ids"][0, 0]).startswith("First Citizen:")
    shuffled = take(causal_lm_dataset(subset, tok.eos_id, tok.pad_id, 64, seed=5, start_index=0, global_batch=3,
                                      repeat=False, shuffle=True))
    order = doc_permutation(subset.num_docs, 5, 0)
    expected = np.concatenate([np.append(subset.doc_tokens(d), tok.eos_id) for d in order])
    w = shuffled["target_weights"].reshape(-1)
    assert w.sum() == expected.size - 1
    np.testing.assert_array_equal(shuffled["target_ids"].reshape(-1)[w > 0], expected[1:])
