"""Tokenize a corpus once into flat memory-mapped arrays and reuse it across runs and hosts.

One shard directory holds
  tokens.int32.bin             all token ids, sentence after sentence
  sentence_offsets.int64.bin   [num_sentences + 1] token offset of each sentence (first 0, last num_tokens)
  doc_offsets.int64.bin        [num_docs + 1] sentence offset of each document (first 0, last num_sentences)
  doc_keys.int64.bin           [num_docs] the document's source key (``chunks.iter_keyed_documents``)
  meta.json                    counts, tokenizer, sources (paths, sizes, mtimes), format settings
  COMPLETE                     written last
A shard is built in a temporary sibling directory and ``os.replace``d into place, so an interrupted build
never leaves a directory that opens. Sentences that tokenize to nothing and documents left without
sentences are dropped and counted in meta.json.

``build_or_load_cache`` keys the cache directory by a hash of the tokenizer fingerprint, the sources (with
sizes and mtimes) and the format settings, so a changed input or tokenizer rebuilds. The corpus is cut into
fixed chunks of about ``data.cache_chunk_bytes`` bytes at document boundaries (``chunks.ChunkLayout``),
numbered independently of the number of processes: ``chunk-{c:06d}-of-{C:06d}`` is one shard directory.
Process p of P builds the chunks c with c % P == p that are not built yet; after the barrier every process
opens all C chunks as one corpus, in key order (chunk, then position). So a run resumed on another host
count re-tokenizes nothing, and the held-out documents taken from the end are the same. Sources are keyed
by size and mtime: hosts with separate copies of the files must keep those equal (``cp -p``/``rsync -t``).

A ``gs://`` cache directory: each chunk is built in ``fs.scratch_dir()``, uploaded with its COMPLETE marker
last (``fs.upload_tree``), and every process reads all chunks through ``fs.local_copy`` (the arrays are
memory-mapped, so they must be on local disk; the copy is made once per host, several chunks at once:
``local_copies``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from ptm_jax import fs
from ptm_jax.config import DataConfig
from ptm_jax.data.chunks import ChunkLayout
from ptm_jax.data.corpus import READER_VERSION, Document, check_file, check_process, resolve_files
from ptm_jax.data.tokenizers import Tokenizer
from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)
FORMAT_VERSION = 3
TOKENS, SENTENCES, DOCS = "tokens.int32.bin", "sentence_offsets.int64.bin", "doc_offsets.int64.bin"
KEYS = "doc_keys.int64.bin"
_CHUNK_NAME = re.compile(r"chunk-\d{6}-of-(\d{6})")
META, COMPLETE = "meta.json", "COMPLETE"


def _map(path: Path, dtype, count: int) -> np.ndarray:
    expected = count * np.dtype(dtype).itemsize
    size = path.stat().st_size if path.is_file() else -1
    if size != expected:
        raise DataError(f"{path}: {size} bytes where meta.json implies {expected}; the cache is corrupt: "
                        f"delete {path.parent} and it will be rebuilt")
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)


class _Shard:
    """One built shard directory, memory-mapped and checked against its meta.json."""

    def __init__(self, directory: Path):
        self.directory = directory
        if not (directory / COMPLETE).is_file():
            raise DataError(f"{directory}: token cache is incomplete (no {COMPLETE} marker: an interrupted "
                            "build); delete it and it will be rebuilt")
        try:
            self.meta = json.loads((directory / META).read_text(encoding="utf-8"))
            n_doc, n_sent, n_tok = (int(self.meta[k]) for k in ("num_docs", "num_sentences", "num_tokens"))
            version = self.meta["format_version"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{directory / META}: unreadable cache metadata ({e}); delete {directory}") from None
        if version != FORMAT_VERSION:
            raise DataError(f"{directory}: cache format {version}, this code reads {FORMAT_VERSION}; delete it")
        self.tokens = _map(directory / TOKENS, np.int32, n_tok)
        self.sentence_offsets = _map(directory / SENTENCES, np.int64, n_sent + 1)
        self.doc_offsets = _map(directory / DOCS, np.int64, n_doc + 1)
        self.doc_keys = _map(directory / KEYS, np.int64, n_doc)
        ends = (self.sentence_offsets[0], self.sentence_offsets[-1], self.doc_offsets[0], self.doc_offsets[-1])
        if tuple(int(e) for e in ends) != (0, n_tok, 0, n_sent):
            raise DataError(f"{directory}: offsets do not match meta.json counts; the cache is corrupt: "
                            "delete it and it will be rebuilt")
        self.num_docs, self.num_sentences, self.num_tokens = n_doc, n_sent, n_tok


def _ensure_open_files(needed: int, directory) -> None:
    """Each memory-mapped array holds a file descriptor (Python's mmap keeps a duplicate): 4 per chunk. Raises the
    soft RLIMIT_NOFILE up to the hard limit when the chunks need it, and says what to do when even that is short."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 1024  # the rest of the process: sockets, TensorFlow, orbax
    if want <= soft:
        return
    limit = want if hard == resource.RLIM_INFINITY else min(want, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    if limit < want:
        raise DataError(f"{directory}: opening its {needed // 4} chunks needs about {want} open files, but the limit "
                        f"is {hard} (ulimit -Hn); raise it, or rebuild with a larger data.cache_chunk_bytes")


class TokenCache:
    """One or more shards presented as a single corpus of documents of sentences of token ids, in
    source-key order (shard order where keys are already sorted, e.g. a single shard)."""

    def __init__(self, shards: list[_Shard], directory: Path):
        self.directory = directory
        self._shards = shards
        counts = np.array([s.num_docs for s in shards], dtype=np.int64)
        self._doc_base = np.concatenate([[0], np.cumsum(counts)])
        self.num_docs = int(self._doc_base[-1])
        keys = np.concatenate([np.asarray(s.doc_keys) for s in shards]) if shards else np.zeros(0, np.int64)
        self._order = None  # global doc -> shard-order doc; None: identity
        if keys.size and not np.all(keys[1:] > keys[:-1]):
            self._order = np.argsort(keys, kind="stable")
            ordered = keys[self._order]
            if np.any(ordered[1:] == ordered[:-1]):
                raise DataError(f"{directory}: shards hold documents with the same source key; the shards "
                                "come from different builds: delete the directory to rebuild")
        self.num_sentences = sum(s.num_sentences for s in shards)
        self.num_tokens = sum(s.num_tokens for s in shards)
        first = shards[0].meta
        self.meta = {"fingerprint": first.get("fingerprint"), "tokenizer": first.get("tokenizer"),
                     "num_docs": self.num_docs, "num_sentences": self.num_sentences,
                     "num_tokens": self.num_tokens, "shards": [s.meta for s in shards]}

    @classmethod
    def open(cls, directory, num_chunks: int | None = None, fingerprint: str | None = None) -> "TokenCache":
        """A shard directory, or a directory of ``chunk-*-of-C`` (``num_chunks`` picks C when several)."""
        directory = Path(directory)
        if (directory / META).exists() or (directory / COMPLETE).exists():
            return cls.from_dirs([directory], directory, fingerprint)
        names = (_CHUNK_NAME.fullmatch(p.name) for p in directory.glob("chunk-*-of-*"))
        totals = sorted({int(m.group(1)) for m in names if m})
        if num_chunks is None and len(totals) > 1:
            raise DataError(f"{directory}: holds chunks of {totals} layouts; pass num_chunks")
        n = num_chunks if num_chunks is not None else (totals[0] if totals else 0)
        if not n:
            raise DataError(f"{directory}: no token cache here (no {META} and no chunk-*-of-* folders)")
        paths = [directory / chunk_name(c, n) for c in range(n)]
        missing = [p.name for p in paths if not p.is_dir()]
        if missing:
            raise DataError(f"{directory}: missing chunk(s) {', '.join(missing[:4])}"
                            f"{' ...' if len(missing) > 4 else ''}: the processes that build them have not "
                            "finished, or cannot write here (hosts without a shared disk need a gs:// "
                            "data.cache_dir or output_dir)")
        return cls.from_dirs(paths, directory, fingerprint)

    @classmethod
    def from_dirs(cls, paths: list[Path], directory: Path, fingerprint: str | None = None) -> "TokenCache":
        _ensure_open_files(4 * len(paths), directory)
        shards = [_Shard(Path(p)) for p in paths]
        if fingerprint is not None:
            for s in shards:
                if s.meta.get("fingerprint") != fingerprint:
                    raise DataError(f"{s.directory}: built for other inputs or tokenizer; delete it to rebuild")
        return cls(shards, Path(directory))

    def _locate(self, d: int) -> tuple[_Shard, int]:
        if not 0 <= d < self.num_docs:
            raise IndexError(f"document {d} out of range [0, {self.num_docs})")
        if self._order is not None:
            d = int(self._order[d])
        s = int(np.searchsorted(self._doc_base, d, side="right")) - 1
        return self._shards[s], d - int(self._doc_base[s])

    def _sentence_range(self, d: int) -> tuple[_Shard, int, int]:
        shard, local = self._locate(int(d))
        return shard, int(shard.doc_offsets[local]), int(shard.doc_offsets[local + 1])

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        """int32 [num sentences of document d]: token count of each sentence."""
        shard, a, b = self._sentence_range(d)
        return np.diff(shard.sentence_offsets[a: b + 1]).astype(np.int32)

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        """int32 tokens of sentences [first, last) of document d, concatenated (a view of the memmap)."""
        shard, a, b = self._sentence_range(d)
        last = b - a if last_sentence is None else last_sentence
        if not 0 <= first_sentence <= last <= b - a:
            raise IndexError(f"sentences [{first_sentence}, {last}) out of range for document {d} of {b - a}")
        lo, hi = shard.sentence_offsets[a + first_sentence], shard.sentence_offsets[a + last]
        return np.asarray(shard.tokens[lo:hi])

    def document(self, d: int) -> list[np.ndarray]:
        """The sentences of document d as int32 arrays."""
        shard, a, b = self._sentence_range(d)
        offsets = shard.sentence_offsets[a: b + 1]
        tokens = np.asarray(shard.tokens[offsets[0]: offsets[-1]])
        return np.split(tokens, (offsets[1:-1] - offsets[0]).astype(np.int64))

    def doc_num_sentences(self) -> np.ndarray:
        """int64 [num_docs]: sentences per document, in global order."""
        counts = np.concatenate([np.diff(s.doc_offsets) for s in self._shards]).astype(np.int64)
        return counts if self._order is None else counts[self._order]

    def doc_num_tokens(self) -> np.ndarray:
        """int64 [num_docs]: tokens per document, in global order."""
        counts = np.concatenate([np.diff(np.asarray(s.sentence_offsets)[np.asarray(s.doc_offsets)])
                                 for s in self._shards]).astype(np.int64)
        return counts if self._order is None else counts[self._order]

    def doc_keys(self) -> np.ndarray:
        """int64 [num_docs]: each document's source key (``chunks.ChunkLayout.documents``), in global order."""
        keys = np.concatenate([np.asarray(s.doc_keys) for s in self._shards]).astype(np.int64)
        return keys if self._order is None else keys[self._order]


# ----------------------------------------------------------------------------------------------------
# Building


class _ShardWriter:
    """Appends tokenized batches to the three flat files; holds one batch in memory at a time."""

    def __init__(self, directory: Path):
        self._files = {n: open(directory / n, "wb", buffering=1 << 20) for n in (TOKENS, SENTENCES, DOCS, KEYS)}
        self._files[SENTENCES].write(np.zeros(1, np.int64).tobytes())
        self.num_docs = self.num_sentences = self.num_tokens = self.dropped_sentences = 0
        self._last_doc = -1

    def add(self, flat: np.ndarray, lengths: np.ndarray, doc_ids: np.ndarray, doc_keys: np.ndarray) -> None:
        keep = lengths > 0
        self.dropped_sentences += int((~keep).sum())
        lengths, doc_ids, doc_keys = lengths[keep], doc_ids[keep], doc_keys[keep]
        if not len(lengths):
            return
        self._files[TOKENS].write(np.ascontiguousarray(flat, np.int32).tobytes())
        self._files[SENTENCES].write((self.num_tokens + np.cumsum(lengths)).astype(np.int64).tobytes())
        previous = np.concatenate([[self._last_doc], doc_ids[:-1]])
        starts = np.flatnonzero(doc_ids != previous)
        self._files[DOCS].write((self.num_sentences + starts).astype(np.int64).tobytes())
        self._files[KEYS].write(doc_keys[starts].astype(np.int64).tobytes())
        self.num_docs += len(starts)
        self._last_doc = int(doc_ids[-1])
        self.num_sentences += len(lengths)
        self.num_tokens += int(lengths.sum())

    def close(self) -> None:
        self._files[DOCS].write(np.array([self.num_sentences], np.int64).tobytes())
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()


def _sentence_batches(documents: Iterable, keyed: bool, batch_sentences: int,
                      counts: dict) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """(sentences, running document index of each, document key of each) in batches of about
    ``batch_sentences`` sentences; a document may span batches."""
    texts: list[str] = []
    doc_ids: list[int] = []
    keys: list[int] = []
    for d, item in enumerate(documents):
        key, doc = item if keyed else (d, item)
        counts["input_docs"] = d + 1
        texts.extend(doc)
        doc_ids.extend([d] * len(doc))
        keys.extend([key] * len(doc))
        if len(texts) >= batch_sentences:
            yield texts, np.asarray(doc_ids, np.int64), np.asarray(keys, np.int64)
            texts, doc_ids, keys = [], [], []
    if texts:
        yield texts, np.asarray(doc_ids, np.int64), np.asarray(keys, np.int64)


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _background(items: Iterable, depth: int = 4) -> Iterator:
    """Runs the iterator in a thread (reading and sentence splitting overlap the GIL-free tokenizer)."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def run() -> None:
        try:
            for x in items:
                if not put(x):
                    return
            put(done)
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            put(_Failure(e))

    thread = threading.Thread(target=run, daemon=True, name="token-cache-reader")
    thread.start()
    try:
        while (x := q.get()) is not done:
            if isinstance(x, _Failure):
                raise x.exc
            yield x
    finally:
        stop.set()
        thread.join(timeout=5)


def sentence_joiner(tokenizer: Tokenizer) -> str:
    """Text put before every sentence but a document's first when tokenizing. Byte-level BPE (GPT-2) encodes
    the space between words inside the next token ('Ġword'), so sentences tokenized one by one must get it
    back; a character vocabulary reads the space as a character of its own, so it gets it too; WordPiece and
    SentencePiece drop or mark whitespace themselves."""
    return " " if tokenizer.kind in ("byte_bpe", "char") else ""


def build_cache(documents: Callable[[], Iterable[Document]] | Iterable[Document], tokenizer: Tokenizer,
                directory, *, fingerprint: str, meta: dict | None = None, keyed: bool = False,
                batch_sentences: int = 4096, background: bool = True) -> TokenCache:
    """Tokenizes ``documents`` into the shard directory ``directory`` (atomically) and opens it.
    ``keyed``: the iterable yields (int64 source key, document) pairs (``chunks.iter_keyed_documents``);
    otherwise a document's key is its position in the stream."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    counts = {"input_docs": 0}
    start = time.perf_counter()
    try:
        docs = documents() if callable(documents) else documents
        batches = _sentence_batches(docs, keyed, batch_sentences, counts)
        writer = _ShardWriter(tmp)
        joiner = sentence_joiner(tokenizer)
        prev_doc = None
        for texts, doc_ids, keys in (_background(batches) if background else batches):
            if joiner:  # byte-level BPE: the space between sentences is part of the next sentence's first token
                ids = np.asarray(doc_ids)
                first = np.empty(len(ids), bool)
                if len(ids):
                    first[0] = ids[0] != prev_doc
                    first[1:] = ids[1:] != ids[:-1]
                    prev_doc = ids[-1]
                texts = [t if f else joiner + t for t, f in zip(texts, first)]
            flat, lengths = tokenizer.encode_batch_flat(texts)
            writer.add(flat, lengths, doc_ids, keys)
        writer.close()
        info = {"format_version": FORMAT_VERSION, "fingerprint": fingerprint, "num_docs": writer.num_docs,
                "num_sentences": writer.num_sentences, "num_tokens": writer.num_tokens,
                "dropped_sentences": writer.dropped_sentences,
                "dropped_docs": counts["input_docs"] - writer.num_docs,
                "tokenizer": {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size,
                              "fingerprint": tokenizer.fingerprint(), "pad_id": tokenizer.pad_id,
                              "unk_id": tokenizer.unk_id, "cls_id": tokenizer.cls_id,
                              "sep_id": tokenizer.sep_id, "mask_id": tokenizer.mask_id},
                "build_seconds": round(time.perf_counter() - start, 3), **(meta or {})}
        (tmp / META).write_text(json.dumps(info, indent=1), encoding="utf-8")
        (tmp / COMPLETE).write_text("ok\n")
        if directory.exists():  # a stale or corrupt shard: move it aside, then swap in the new one
            trash = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.replace(directory, trash / "old")
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TokenCache.open(directory, fingerprint=fingerprint)


def corpus_sources(cfg: DataConfig) -> list[dict]:
    """What the cache key depends on besides the tokenizer and format settings."""
    spec = cfg.corpus.strip()
    if spec == "embedded":
        return [{"embedded": sys.version, "stdlib": str(Path(os.__file__).parent)}]
    if spec.startswith("tfds:"):
        return [{"tfds": spec}]
    if spec.startswith("hf:"):
        from ptm_jax.data import hf_datasets

        return hf_datasets.sources(spec, cfg.text_field)
    out = []
    for p in resolve_files(spec):
        check_file(p)
        st = p.stat()
        out.append({"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def chunk_name(c: int, num_chunks: int) -> str:
    return f"chunk-{c:06d}-of-{num_chunks:06d}"


def cache_root(cfg: DataConfig, tokenizer: Tokenizer, directory) -> tuple[fs.epath.Path, str, ChunkLayout, dict]:
    """(cache root ``<directory>/<kind>-<key>``, key, chunk layout, format settings) for these inputs.
    Files are validated (exist, non-empty, not binary) before anything is written."""
    sources = corpus_sources(cfg)
    layout = ChunkLayout(cfg)
    settings = {"corpus": cfg.corpus.strip(), "format": cfg.format, "doc_max_sentences": cfg.doc_max_sentences,
                "max_line_bytes": cfg.max_line_bytes, "format_version": FORMAT_VERSION,
                "reader_version": READER_VERSION, "chunk_bytes": layout.chunk_bytes,
                "num_chunks": layout.num_chunks}
    if sentence_joiner(tokenizer):
        settings["sentence_joiner"] = sentence_joiner(tokenizer)
    blob = json.dumps({"tokenizer": tokenizer.fingerprint(), "sources": sources, "settings": settings},
                      sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:20]
    return fs.path(directory) / f"{tokenizer.kind}-{key}", key, layout, settings


def _chunk_built(path, key: str) -> bool:
    if fs.is_remote(path):
        return fs.is_complete(path)
    try:
        return _Shard(Path(path)).meta.get("fingerprint") == key
    except DataError:
        return False


def build_chunks(cfg: DataConfig, tokenizer: Tokenizer, directory, process_index: int = 0,
                 process_count: int = 1) -> tuple[fs.epath.Path, str, ChunkLayout]:
    """Builds the chunks c % process_count == process_index that are not built yet; returns (cache root,
    key, layout). A remote root gets each chunk built locally, then uploaded, COMPLETE last."""
    check_process(process_index, process_count)
    root, key, layout, settings = cache_root(cfg, tokenizer, directory)
    n = layout.num_chunks
    for c in range(process_index, n, process_count):
        target = root / chunk_name(c, n)
        if _chunk_built(target, key):
            continue
        local = Path(fs.scratch_dir()) / f"build-{key}" / target.name if fs.is_remote(root) else Path(target)
        pieces = [dataclasses.asdict(p) for p in layout.pieces(c)] if layout.kind == "files" else []
        start = time.perf_counter()
        build_cache(lambda c=c: layout.documents(c), tokenizer, local, fingerprint=key, keyed=True,
                    meta={"sources": [s for s in corpus_sources_of(cfg, layout, pieces)], "settings": settings,
                          "chunk": c, "num_chunks": n, "pieces": pieces, "built_by_process": process_index})
        if fs.is_remote(root):
            fs.upload_tree(local, target)
            shutil.rmtree(local, ignore_errors=True)
        log.info("token cache: chunk %d of %d (%d bytes) in %.1f s", c, n, layout.chunk_bytes_of(c),
                 time.perf_counter() - start)
    return root, key, layout


def corpus_sources_of(cfg: DataConfig, layout: ChunkLayout, pieces: list[dict]) -> list[dict]:
    """The files a chunk reads (paths), for its meta.json."""
    if layout.kind != "files":
        return [{"corpus": cfg.corpus.strip()}]
    return [{"path": str(layout.files[p["file"]]), "start": p["start"], "end": p["end"]} for p in pieces]


def build_or_load_cache(cfg: DataConfig, tokenizer: Tokenizer, directory, process_index: int = 0,
                        process_count: int = 1, barrier: Callable[..., None] = lambda *a, **k: None) -> TokenCache:
    """``build_chunks`` for this process, then ``barrier(name, timeout_s)`` (a timeout that fits this
    process's share of the corpus), then all chunks opened as one corpus. Reopening with unchanged inputs reads
    nothing but meta.json and maps the arrays, whatever the number of processes."""
    from ptm_jax.parallel.distributed import timeout_for

    root, key, layout = build_chunks(cfg, tokenizer, directory, process_index, process_count)
    n = layout.num_chunks
    share = -(-n // process_count)  # chunks of the busiest process
    work = share * (layout.chunk_bytes if layout.kind == "files" else 0)
    barrier("token_cache", timeout_s=timeout_for(work, TOKENIZE_BYTES_PER_S) + (
        0 if layout.kind == "files" else 1800.0 * share))
    if not fs.is_remote(root):
        return TokenCache.open(Path(root), num_chunks=n, fingerprint=key)
    targets = []
    for c in range(n):
        target = root / chunk_name(c, n)
        if not fs.is_complete(target):
            raise DataError(f"{target}: chunk not built (no {COMPLETE} marker); process {c % process_count} "
                            "builds it: check its log")
        targets.append(target)
    return TokenCache.from_dirs(local_copies(targets), Path(fs.scratch_dir()), fingerprint=key)


DOWNLOAD_THREADS = 8
"""Chunks copied to a host's scratch disk at once (``$PTM_CACHE_DOWNLOAD_THREADS`` overrides): each copy is
a handful of large objects, so a few concurrent downloads fill a TPU VM's network link where one at a time
waits on every request's latency."""


def download_threads() -> int:
    raw = os.environ.get("PTM_CACHE_DOWNLOAD_THREADS", "").strip()
    if not raw:
        return DOWNLOAD_THREADS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"PTM_CACHE_DOWNLOAD_THREADS={raw!r}: must be a whole number >= 1 (chunks downloaded at "
                          f"once; unset it for the default {DOWNLOAD_THREADS})")
    return value


def local_copies(targets: list) -> list[Path]:
    """``fs.local_copy`` of every remote chunk, ``download_threads()`` at a time, in the order given. Each copy
    is still made in a temporary folder and renamed into place with its COMPLETE marker, so a copy cut short
    never opens, and a chunk already copied (same marker token) is not downloaded again."""
    threads = min(download_threads(), len(targets))
    if threads <= 1:
        return [fs.local_copy(t) for t in targets]
    from concurrent.futures import ThreadPoolExecutor

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads,
                            thread_name_prefix="token-cache-copy") as pool:
        paths = list(pool.map(fs.local_copy, targets))
    log.info("token cache: %d chunks on local scratch in %.1f s", len(paths), time.perf_counter() - start)
    return paths


TOKENIZE_BYTES_PER_S = 1 << 20
"""A pessimistic tokenization rate of one process (corpus bytes per second) for the cache barrier's timeout;
the Rust tokenizers reach 10-50 MB/s here."""
