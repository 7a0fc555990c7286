"""Token cache: exact round trip against direct encoding, reuse without retokenizing, atomic builds, corrupt
caches, and chunked builds: 2 processes build, 1 and 3 processes reopen the same corpus without rebuilding."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data.cache import TokenCache, build_cache, build_chunks, build_or_load_cache
from ptm_jax.data.chunks import ChunkLayout
from ptm_jax.data.chunks import iter_documents
from ptm_jax.data.corpus import read_documents
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
    """Reopening tokenizes nothing and writes nothing: every file of the cache keeps its mtime and no file or
    directory is added (how fast a reopen is, is measured by benchmarks/bench_tokenizers.py, not here)."""
    first = build_or_load_cache(corpus, tok, tmp_path / "cache")
    (root,) = (tmp_path / "cache").iterdir()
    files = lambda: {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*")}  # noqa: E731
    before = files()
    assert root / "chunk-000000-of-000001" / "tokens.int32.bin" in before and len(before) >= 4
    calls = []
    tok.encode_batch_flat = lambda texts: calls.append(len(texts))  # any retokenization would record a call
    try:
        again = build_or_load_cache(corpus, tok, tmp_path / "cache")
    finally:
        del tok.encode_batch_flat
    assert calls == [] and files() == before
    assert _docs_as_tuples(again) == _docs_as_tuples(first)
    # a changed input file changes the key: a new cache directory is built
    book = Path(corpus.corpus) / "book0.txt"
    book.write_bytes(book.read_bytes() + b"\n\nA brand new closing paragraph.\n")
    changed = build_or_load_cache(corpus, tok, tmp_path / "cache")
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert changed.num_sentences == first.num_sentences + 1


def test_chunks_built_by_2_processes_reopen_on_1_and_3_without_rebuilding(corpus, tok, tmp_path):
    """Chunks of ~12 KB over six files: 2 processes build them (run one after the other here; the barrier is
    the caller's), then 1 and 3 processes open the same documents in the same order and tokenize nothing."""
    small = dataclasses.replace(corpus, cache_chunk_bytes=12_000)
    single = build_or_load_cache(corpus, tok, tmp_path / "one")  # one chunk: the whole corpus
    assert len(single.meta["shards"]) == 1
    # process 0 alone cannot open the corpus before process 1 has built its chunks
    with pytest.raises(DataError, match="missing chunk.*chunk-000001-of-0000"):
        build_or_load_cache(small, tok, tmp_path / "two", process_index=0, process_count=2)
    host1 = build_or_load_cache(small, tok, tmp_path / "two", 1, 2)
    host0 = build_or_load_cache(small, tok, tmp_path / "two", 0, 2)
    chunks = host0.meta["shards"]
    n = len(chunks)
    assert n == ChunkLayout(small).num_chunks >= 15
    assert [c["built_by_process"] for c in chunks] == [c % 2 for c in range(n)]
    assert _docs_as_tuples(host0) == _docs_as_tuples(host1)
    # the same sentences as the one-chunk corpus; a document is cut only where a chunk starts mid-file
    flat = lambda cache: [s for d in _docs_as_tuples(cache) for s in d]  # noqa: E731
    assert flat(host0) == flat(single) and host0.num_tokens == single.num_tokens
    assert single.num_docs <= host0.num_docs <= single.num_docs + n
    calls = []
    tok.encode_batch_flat = lambda texts: calls.append(len(texts))  # any retokenization would record a call
    try:
        reopened = {count: [build_or_load_cache(small, tok, tmp_path / "two", i, count) for i in range(count)]
                    for count in (1, 3)}
    finally:
        del tok.encode_batch_flat
    assert calls == []
    for caches in reopened.values():
        for cache in caches:
            assert _docs_as_tuples(cache) == _docs_as_tuples(host0)
    held_out = lambda cache: _docs_as_tuples(cache)[-4:]  # noqa: E731  (data.eval_documents from the end)
    assert held_out(reopened[3][2]) == held_out(host0)


def test_one_big_file_is_split_across_processes_by_bytes(shared_data, tok, tmp_path):
    """tinyshakespeare (1.1 MB, one file) in 100 KB chunks: each of 2 processes tokenizes about half of its
    bytes, and the chunked documents equal the whole file's (its chunks end at blank lines, where its
    documents end)."""
    cfg = DataConfig(corpus=str(shared_data / "corpus/tinyshakespeare/input.txt"), format="lines",
                     cache_chunk_bytes=100_000)
    layout = ChunkLayout(cfg)
    assert layout.num_chunks == 12
    for p in (0, 1):
        build_chunks(cfg, tok, tmp_path / "c", p, 2)
    cache = build_or_load_cache(cfg, tok, tmp_path / "c", 0, 2)
    per_process = [sum(c["pieces"][0]["end"] - c["pieces"][0]["start"] for c in cache.meta["shards"]
                       if c["built_by_process"] == p) for p in (0, 1)]
    assert sum(per_process) == layout.total_bytes and all(0.4 < b / layout.total_bytes < 0.6 for b in per_process)
    whole = [tuple(tuple(i) for i in tok.encode_batch(d) if i) for d in read_documents(layout.files[0], "lines")]
    assert _docs_as_tuples(cache) == [d for d in whole if d]


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
    shard = next((tmp_path / "cache").iterdir()) / "chunk-000000-of-000001"
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


_MANY_CHUNKS = """
import resource, sys
from ptm_jax.config import DataConfig
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.tokenizers import train_wordpiece
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
cfg = DataConfig(corpus=sys.argv[1], format="lines", cache_chunk_bytes=10_000)
tok = train_wordpiece(["To be, or not to be: that is the question."] * 50, 200, sys.argv[2] + "/tok")
cache = build_or_load_cache(cfg, tok, sys.argv[2] + "/cache")
print(len(cache.meta["shards"]), cache.num_docs, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_a_cache_of_more_chunks_than_the_open_file_limit_allows_still_opens(shared_data, tmp_path):
    """112 chunks hold 448 memory maps, each with a file descriptor, under a soft limit of 256: the soft limit
    is raised (up to the hard limit) instead of failing with 'Too many open files'."""
    import subprocess
    import sys

    corpus = shared_data / "corpus/tinyshakespeare/input.txt"
    done = subprocess.run([sys.executable, "-c", _MANY_CHUNKS, str(corpus), str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr[-2000:]
    chunks, docs, soft = map(int, done.stdout.split())
    assert chunks == 112 and docs > 7000 and soft >= 4 * chunks
