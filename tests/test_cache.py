"""Token cache: exact round trip against direct encoding, reuse without retokenizing, atomic builds, corrupt
caches, and a two-process build (run sequentially) that presents the same corpus as one process."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data.cache import TokenCache, build_cache, build_or_load_cache, build_shard
from ptm_jax.data.corpus import iter_documents
from ptm_jax.data.tokenizers import WordPieceTokenizer, train_wordpiece
from ptm_jax.errors import DataError


@pytest.fixture(scope="module")
def tok(tmp_path_factory, shared_data) -> WordPieceTokenizer:
    with open(shared_data / "corpus/tinyshakespeare/input.txt", encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip()][:8000]
    return train_wordpiece(lines, 2000, tmp_path_factory.mktemp("tok"))


@pytest.fixture()
def corpus(tmp_path, shared_data) -> DataConfig:
    """Five small real files (40 KB slices of Gutenberg books) plus one BERT-style lines file."""
    books = sorted((shared_data / "corpus/gutenberg").glob("*-0.txt"))[:5]
    for i, book in enumerate(books):
        raw = book.read_bytes().replace(b"\r\n", b"\n")[20_000:60_000]
        raw = raw[raw.index(b"\n\n") + 2: raw.rindex(b"\n\n")]  # whole paragraphs, whole UTF-8 characters
        (tmp_path / "corpus").mkdir(exist_ok=True)
        (tmp_path / "corpus" / f"book{i}.txt").write_bytes(raw)
    (tmp_path / "corpus" / "lines.txt").write_text(
        "First sentence here.\nSecond sentence.\n\n\x07\x7f\n\u200b\n\nOnly one. Doc three.\n\x07\n", encoding="utf-8")
    return DataConfig(corpus=str(tmp_path / "corpus"), doc_max_sentences=64)


def _docs_as_tuples(cache: TokenCache) -> list[tuple[tuple[int, ...], ...]]:
    return [tuple(tuple(s.tolist()) for s in cache.document(d)) for d in range(cache.num_docs)]


def test_cache_round_trip_equals_direct_encoding(corpus, tok, tmp_path):
    cache = build_or_load_cache(corpus, tok, tmp_path / "cache")
    expected = []
    for doc in iter_documents(corpus):
        sentences = [tuple(ids) for ids in tok.encode_batch(doc) if ids]
        if sentences:
            expected.append(tuple(sentences))
    assert _docs_as_tuples(cache) == expected
    assert cache.num_docs == len(expected) > 20
    assert cache.num_sentences == sum(map(len, expected)) and cache.num_tokens == sum(len(s) for d in expected for s in d)
    d = 7
    lengths = cache.doc_sentence_lengths(d)
    assert lengths.dtype == np.int32 and lengths.tolist() == [len(s) for s in expected[d]]
    assert cache.doc_tokens(d).dtype == np.int32
    assert cache.doc_tokens(d, 2, 5).tolist() == [t for s in expected[d][2:5] for t in s]
    assert cache.doc_tokens(d, 3, 3).size == 0
    assert cache.doc_num_sentences().tolist() == [len(x) for x in expected]
    with pytest.raises(IndexError):
        cache.doc_tokens(cache.num_docs)
    with pytest.raises(IndexError):
        cache.doc_tokens(d, 0, len(expected[d]) + 1)
    shard = cache.meta["shards"][0]
    # lines.txt: the control-character sentences tokenize to nothing; its second document has no other sentence
    assert shard["dropped_sentences"] == 3 and shard["dropped_docs"] == 1
    assert cache.meta["tokenizer"]["fingerprint"] == tok.fingerprint()
    assert [s["path"].rsplit("/", 1)[1] for s in shard["sources"]][-1] == "lines.txt"


def test_reopen_does_not_retokenize(corpus, tok, tmp_path):
    first = build_or_load_cache(corpus, tok, tmp_path / "cache")
    (root,) = (tmp_path / "cache").iterdir()
    bin_file = root / "shard-00000-of-00001" / "tokens.int32.bin"
    mtime = bin_file.stat().st_mtime_ns
    calls = []
    tok.encode_batch_flat = lambda texts: calls.append(len(texts))  # any retokenization would record a call
    try:
        start = time.perf_counter()
        again = build_or_load_cache(corpus, tok, tmp_path / "cache")
        seconds = time.perf_counter() - start
    finally:
        del tok.encode_batch_flat
    assert calls == [] and seconds < 0.5 and bin_file.stat().st_mtime_ns == mtime
    assert _docs_as_tuples(again) == _docs_as_tuples(first)
    # a changed input file changes the key: a new cache directory is built
    book = Path(corpus.corpus) / "book0.txt"
    book.write_bytes(book.read_bytes() + b"\n\nA brand new closing paragraph.\n")
    changed = build_or_load_cache(corpus, tok, tmp_path / "cache")
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert changed.num_sentences == first.num_sentences + 1


def test_two_hosts_build_the_same_global_corpus(corpus, tok, tmp_path):
    single = build_or_load_cache(corpus, tok, tmp_path / "one")
    # process 0 alone cannot open the corpus before process 1 has built its shard
    with pytest.raises(DataError, match="missing shard.*shard-00001-of-00002"):
        build_or_load_cache(corpus, tok, tmp_path / "two", process_index=0, process_count=2, barrier=lambda: None)
    host1 = build_or_load_cache(corpus, tok, tmp_path / "two", 1, 2)
    host0 = build_or_load_cache(corpus, tok, tmp_path / "two", 0, 2)
    shard_docs = [s["num_docs"] for s in host0.meta["shards"]]
    assert len(shard_docs) == 2 and sum(shard_docs) == host0.num_docs and min(shard_docs) > 5
    # shard 0 holds files 0, 2, 4 and shard 1 files 1, 3, 5; the global order is still file order
    assert _docs_as_tuples(host0) == _docs_as_tuples(host1) == _docs_as_tuples(single)
    assert host0.doc_num_sentences().tolist() == single.doc_num_sentences().tolist()
    assert host0.num_tokens == single.num_tokens and host0.num_docs == single.num_docs
    # the same directory also serves a later run on 3 processes (new shards, same corpus)
    for i in (2, 0):
        build_shard(corpus, tok, tmp_path / "two", i, 3)
    three = build_or_load_cache(corpus, tok, tmp_path / "two", 1, 3)
    assert len(three.meta["shards"]) == 3
    assert _docs_as_tuples(three) == _docs_as_tuples(single)


def test_failed_build_leaves_nothing_that_opens(corpus, tok, tmp_path):
    bad = Path(corpus.corpus) / "zz_bad.txt"
    bad.write_bytes(b"Good line.\n" * 50 + b"bad \xff byte\n")
    with pytest.raises(DataError, match=r"zz_bad.txt:51: not valid UTF-8"):
        build_or_load_cache(corpus, tok, tmp_path / "cache")
    (root,) = (tmp_path / "cache").iterdir()
    assert list(root.iterdir()) == []  # no shard, no temporary directory
    with pytest.raises(DataError, match="no token cache here"):
        TokenCache.open(root)
    empty = Path(corpus.corpus) / "zz_bad.txt"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="zz_bad.txt: file is empty"):
        build_or_load_cache(corpus, tok, tmp_path / "cache2")
    assert not (tmp_path / "cache2").exists()  # validated before anything was written


def test_corrupt_or_incomplete_cache_is_refused_then_rebuilt(corpus, tok, tmp_path):
    cache = build_or_load_cache(corpus, tok, tmp_path / "cache")
    shard = next((tmp_path / "cache").iterdir()) / "shard-00000-of-00001"
    n_tokens = cache.num_tokens
    del cache
    with open(shard / "tokens.int32.bin", "r+b") as f:
        f.truncate(n_tokens * 4 - 8)
    with pytest.raises(DataError, match="tokens.int32.bin: .* bytes where meta.json implies .*corrupt"):
        TokenCache.open(shard)
    rebuilt = build_or_load_cache(corpus, tok, tmp_path / "cache")
    assert rebuilt.num_tokens == n_tokens
    os.remove(shard / "COMPLETE")
    with pytest.raises(DataError, match="incomplete .*no COMPLETE marker"):
        TokenCache.open(shard)


def test_build_cache_from_a_document_stream(tok, tmp_path):
    docs = [["Hello there.", "", "General Kenobi!"], ["\x07"], ["One more document."]]
    cache = build_cache(lambda: iter(docs), tok, tmp_path / "c", fingerprint="abc", batch_sentences=2)
    assert cache.num_docs == 2 and cache.meta["shards"][0]["dropped_docs"] == 1
    assert [s.tolist() for s in cache.document(0)] == [tok.encode("Hello there."), tok.encode("General Kenobi!")]
    assert cache.document(1)[0].tolist() == tok.encode("One more document.")
    with pytest.raises(DataError, match="built for other inputs"):
        TokenCache.open(tmp_path / "c", fingerprint="xyz")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_byte_bpe_cache_keeps_the_space_between_sentences_and_documents_decode_to_their_text(tmp_path):
    from ptm_jax.data.byte_bpe import train_byte_bpe

    texts = ["Hello there.", "General Kenobi!", "One more document.", "It has two sentences."] * 50
    bpe = train_byte_bpe(texts, 300, tmp_path / "bpe")
    docs = [["Hello there.", "General Kenobi!"], ["One more document.", "It has two sentences."]]
    # batch_sentences=3: a document's second sentence in the next batch still gets its space
    cache = build_cache(lambda: iter(docs), bpe, tmp_path / "c", fingerprint="abc", batch_sentences=3)
    decoded = [bpe.decode(np.concatenate(cache.document(d)).tolist()) for d in range(2)]
    assert decoded == ["Hello there. General Kenobi!", "One more document. It has two sentences."]
    assert cache.document(1)[1].tolist() == bpe.encode(" It has two sentences.")
