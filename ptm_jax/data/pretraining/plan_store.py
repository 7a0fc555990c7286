"""The NSP pairing plan of every training pass, built once, stored beside the token cache and read by example id.

``nsp.iter_plan`` defines the global example stream (google-research/bert create_pretraining_data.py, made
streaming): pass e visits the documents in the permutation of (seed, e), plans each one
(``nsp.plan_document``) and shuffles blocks of ``nsp.SHUFFLE_BLOCK`` instances; ``nsp.PLAN_PASSES`` distinct
passes (the reference's ``dupe_factor``) repeat in a cycle. This module holds those passes so that the record of
any global example id is found without planning anything before it:

* **Build** (``build_plan`` / ``build_or_open``): the training documents are cut into chunks of
  ``CHUNK_DOCS`` consecutive documents, numbered independently of the number of processes; process p of P
  plans chunks c with c % P == p, all passes at once, vectorised over the chunk's documents
  (``nsp_arrays.plan_documents``), and publishes ``chunk-{c:06d}-of-{C:06d}/`` (``records.bin``: the chunk's
  instances, pass after pass, document after document, as ``nsp_arrays.STORE_DTYPE``; ``counts.bin``:
  int32 [passes, documents of the chunk]; ``meta.json``; ``COMPLETE`` last, ``fs.mark_complete``) the way the
  token cache publishes its chunks (a sibling temporary directory renamed into place, or ``fs.upload_tree``
  for gs://). A chunk's bytes depend only on the inputs, so any process count builds the same files.
* **Open** (``PairingPlan``): every process reads the counts (4 bytes per document and pass), and keeps per pass
  the document permutation, the start of each document's instances in the unshuffled pass and their offset in
  the chunk: 16 bytes per document and pass, O(documents x passes) time, nothing that grows with the step or
  the host count. The records stay memory-mapped.
* **Read** (``PairingPlan.records``): example id -> (cycle, pass, position) by the pass lengths, position ->
  unshuffled position through the block's permutation (drawn once per block and kept: the recent 64), ->
  document by ``searchsorted`` over the pass's document starts, -> the record's offset in its chunk. Cost:
  O(ids asked), plus one permutation of ``nsp.SHUFFLE_BLOCK`` positions per block of the stream a process
  reaches (about 1 ms for 16,384; a process's rows reach every block, so this one piece is O(global batch)
  per step: about 0.1 us per global example).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np

from ptm_jax import fs
from ptm_jax.config import DataConfig
from ptm_jax.data.pretraining import nsp, nsp_arrays
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import DataError

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
CHUNK_DOCS = 1024
"""Training documents per plan chunk (the unit of work split between processes)."""
RECORDS, COUNTS, META = "records.bin", "counts.bin", "meta.json"
RECORD_DTYPE = np.dtype([("index", "<i8"), ("epoch", "<i4")] + nsp_arrays.STORE_DTYPE.descr)
"""What ``PairingPlan.records`` returns: the stored fields with the example id and the stream's pass number."""
DOC_PASSES_PER_S = 100
"""A pessimistic planning rate of one process (documents x passes per second) for the build barrier's timeout."""


def chunk_name(c: int, num_chunks: int) -> str:
    return f"chunk-{c:06d}-of-{num_chunks:06d}"


def num_chunks(num_docs: int, chunk_docs: int = CHUNK_DOCS) -> int:
    return max(1, -(-num_docs // chunk_docs))


def plan_chunk(source: DocumentSource, table: nsp_arrays.SentenceTable, cfg: DataConfig, seed: int, c: int, *,
               passes: int = nsp.PLAN_PASSES, chunk_docs: int = CHUNK_DOCS) -> tuple[np.ndarray, np.ndarray]:
    """(records, counts) of chunk ``c``: every pass's instances of its documents, and int32 [passes, documents]
    instances per document and pass."""
    docs = np.arange(c * chunk_docs, min((c + 1) * chunk_docs, source.num_docs))
    parts, counts = [], np.zeros((passes, docs.size), np.int32)
    for e in range(passes):
        rec = nsp_arrays.plan_documents(source, table, docs, epoch=e, seed=seed,
                                        max_num_tokens=cfg.max_seq_length - 3,
                                        short_seq_prob=getattr(cfg, "short_seq_prob", 0.1))
        counts[e] = np.bincount(rec["doc"] - docs[0], minlength=docs.size) if docs.size else 0
        parts.append(rec)
    return np.concatenate(parts), counts


class PairingPlan:
    """The plan's passes: ``counts`` int [passes, num_docs]; ``chunks[c]`` the records of chunk c (memory-mapped
    or in memory), laid out as ``plan_chunk`` writes them."""

    def __init__(self, counts: np.ndarray, chunks: list[np.ndarray], *, seed: int, chunk_docs: int = CHUNK_DOCS,
                 shuffle_block: int = nsp.SHUFFLE_BLOCK):
        counts = np.asarray(counts, np.int64)
        self.passes, self.num_docs = counts.shape
        self.seed, self.chunk_docs, self.block = seed, chunk_docs, shuffle_block
        self.chunks = chunks
        self._perm = np.stack([nsp.doc_permutation(self.num_docs, seed, e) for e in range(self.passes)]).astype(
            np.int32)
        in_order = np.take_along_axis(counts, self._perm, 1)
        self._doc_start = np.concatenate([np.zeros((self.passes, 1), np.int64), np.cumsum(in_order, 1)], 1)
        self.pass_lengths = self._doc_start[:, -1].copy()
        if self.num_docs and self.pass_lengths.min() <= 0:
            raise DataError("a pass of the pairing plan has no instances; the corpus is empty")
        self.pass_starts = np.concatenate([[0], np.cumsum(self.pass_lengths)])
        self.cycle = int(self.pass_starts[-1])
        # offset of (pass, document)'s first record in its chunk: chunk pass bases + cumsum within the chunk
        self._offset = np.zeros((self.passes, self.num_docs), np.int32)  # 16 bytes per document and pass in all
        for c in range(len(chunks)):
            lo, hi = c * chunk_docs, min((c + 1) * chunk_docs, self.num_docs)
            block = counts[:, lo:hi]
            pass_base = np.concatenate([[0], np.cumsum(block.sum(1))])[:-1]
            self._offset[:, lo:hi] = pass_base[:, None] + np.cumsum(block, 1) - block
            if len(chunks[c]) != block.sum():
                raise DataError(f"pairing plan chunk {c}: {len(chunks[c])} records where its counts say "
                                f"{int(block.sum())}; the plan is corrupt: delete it and it will be rebuilt")
        self._orders: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def length(self, epochs: int | None) -> int | None:
        """Examples in passes 0..epochs-1 of the stream (None: endless)."""
        if epochs is None:
            return None
        full, rest = divmod(epochs, self.passes)
        return full * self.cycle + int(self.pass_starts[rest])

    def _order(self, e: int, b: int) -> np.ndarray:
        key = (e, b)
        if key not in self._orders:
            size = min(self.block, int(self.pass_lengths[e]) - b * self.block)
            self._orders[key] = nsp._generator(self.seed, e, nsp._BLOCK_STREAM, b).permutation(size)
            while len(self._orders) > 64:
                self._orders.popitem(last=False)
        return self._orders[key]

    def records(self, ids: np.ndarray) -> np.ndarray:
        """``RECORD_DTYPE`` records of the global example ids ``ids`` (any order, any count)."""
        ids = np.asarray(ids, np.int64)
        cycle, r = np.divmod(ids, self.cycle)
        e = np.searchsorted(self.pass_starts, r, side="right") - 1
        pos = r - self.pass_starts[e]
        b, q = np.divmod(pos, self.block)
        u = np.empty_like(pos)
        for key in set(zip(e.tolist(), b.tolist())):
            m = (e == key[0]) & (b == key[1])
            u[m] = key[1] * self.block + self._order(*key)[q[m]]
        j = np.empty_like(u)
        for k in np.unique(e).tolist():
            m = e == k
            j[m] = np.searchsorted(self._doc_start[k], u[m], side="right") - 1
        docs = self._perm[e, j]
        offset = self._offset[e, docs].astype(np.int64) + (u - self._doc_start[e, j])
        chunk = docs // self.chunk_docs
        out = np.zeros(ids.size, RECORD_DTYPE)
        out["index"], out["epoch"] = ids, cycle * self.passes + e
        for c in np.unique(chunk).tolist():
            m = chunk == c
            got = self.chunks[c][offset[m]]
            for name in nsp_arrays.STORE_DTYPE.names:
                out[name][m] = got[name]
        return out


def memory_plan(source: DocumentSource, cfg: DataConfig, seed: int, *, passes: int = nsp.PLAN_PASSES,
                chunk_docs: int = CHUNK_DOCS, shuffle_block: int = nsp.SHUFFLE_BLOCK) -> PairingPlan:
    """The plan built in this process, in memory (small sources: held-out documents, tests)."""
    seed = nsp.check_seed(seed)
    if source.num_docs <= 0:
        raise DataError("the pretraining corpus has no documents; check data.corpus and data.eval_documents")
    table = nsp_arrays.SentenceTable(source)
    built = [plan_chunk(source, table, cfg, seed, c, passes=passes, chunk_docs=chunk_docs)
             for c in range(num_chunks(source.num_docs, chunk_docs))]
    return PairingPlan(np.concatenate([cnt for _, cnt in built], 1), [rec for rec, _ in built], seed=seed,
                       chunk_docs=chunk_docs, shuffle_block=shuffle_block)


def plan_key(source_key: str, num_docs: int, cfg: DataConfig, seed: int, passes: int, chunk_docs: int) -> str:
    """What a stored plan depends on: the source (its token cache's key and document count), the planning
    fields of ``cfg``, the seed and the layout."""
    blob = json.dumps({"source": source_key, "num_docs": num_docs, "max_seq_length": cfg.max_seq_length,
                       "short_seq_prob": getattr(cfg, "short_seq_prob", 0.1), "seed": seed, "passes": passes,
                       "chunk_docs": chunk_docs, "shuffle_block": nsp.SHUFFLE_BLOCK, "format": FORMAT_VERSION},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _publish(local: Path, target) -> None:
    """``local`` (complete, marker written) becomes ``target``: renamed into place, or uploaded (marker last)."""
    if fs.is_remote(target):
        fs.upload_tree(local, target)
        shutil.rmtree(local, ignore_errors=True)
        return
    target = Path(os.fspath(target))
    if target.exists():  # a stale or broken chunk: move it aside, then swap in the new one
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(local, target)


def build_plan(source: DocumentSource, cfg: DataConfig, seed: int, directory, key: str, process_index: int = 0,
               process_count: int = 1, *, passes: int = nsp.PLAN_PASSES, chunk_docs: int = CHUNK_DOCS) -> int:
    """Builds the chunks c % process_count == process_index of the plan under ``directory`` (local or gs://)
    that are not complete yet; returns how many it built."""
    seed = nsp.check_seed(seed)
    root = fs.path(directory)
    n = num_chunks(source.num_docs, chunk_docs)
    todo = [c for c in range(process_index, n, process_count) if not fs.is_complete(root / chunk_name(c, n))]
    if not todo:
        return 0
    table = nsp_arrays.SentenceTable(source)
    scratch = Path(fs.scratch_dir()) if fs.is_remote(root) else Path(os.fspath(root))
    scratch.mkdir(parents=True, exist_ok=True)
    for c in todo:
        start = time.perf_counter()
        records, counts = plan_chunk(source, table, cfg, seed, c, passes=passes, chunk_docs=chunk_docs)
        tmp = Path(tempfile.mkdtemp(prefix=f".{chunk_name(c, n)}.tmp-", dir=scratch))
        try:
            records.tofile(tmp / RECORDS)
            counts.tofile(tmp / COUNTS)
            (tmp / META).write_text(json.dumps({"key": key, "chunk": c, "num_chunks": n, "passes": passes,
                                                "documents": int(counts.shape[1]), "records": int(len(records)),
                                                "format_version": FORMAT_VERSION}, indent=1), encoding="utf-8")
            fs.mark_complete(tmp)
            _publish(tmp, root / chunk_name(c, n))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("pairing plan: chunk %d of %d (%d records) in %.1f s", c, n, len(records),
                 time.perf_counter() - start)
    return len(todo)


def open_plan(directory, num_docs: int, seed: int, key: str, *, passes: int = nsp.PLAN_PASSES,
              chunk_docs: int = CHUNK_DOCS) -> PairingPlan:
    """Every chunk of a built plan, memory-mapped (gs://: through a local copy made once per host)."""
    root = fs.path(directory)
    n = num_chunks(num_docs, chunk_docs)
    counts, chunks = [], []
    for c in range(n):
        target = root / chunk_name(c, n)
        if not fs.is_complete(target):
            raise DataError(f"{target}: pairing plan chunk not built (no {fs.MARKER} marker); process c % P "
                            "builds it: check its log")
        local = fs.local_copy(target)
        try:
            meta = json.loads((local / META).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(f"{local / META}: unreadable ({e}); delete {target} and it will be rebuilt") from None
        docs = min((c + 1) * chunk_docs, num_docs) - c * chunk_docs
        if meta.get("key") != key or meta.get("documents") != docs or meta.get("passes") != passes:
            raise DataError(f"{target}: built for other inputs (meta.json {meta}); delete it and it will be "
                            "rebuilt")
        cnt = np.fromfile(local / COUNTS, np.int32)
        if cnt.size != passes * docs:
            raise DataError(f"{local / COUNTS}: {cnt.size} counts where {passes * docs} were expected; delete "
                            f"{target} and it will be rebuilt")
        counts.append(cnt.reshape(passes, docs))
        size = (local / RECORDS).stat().st_size
        if size != meta["records"] * nsp_arrays.STORE_DTYPE.itemsize:
            raise DataError(f"{local / RECORDS}: {size} bytes where meta.json implies "
                            f"{meta['records'] * nsp_arrays.STORE_DTYPE.itemsize}; delete {target}")
        chunks.append(np.memmap(local / RECORDS, nsp_arrays.STORE_DTYPE, mode="r") if size else
                      np.zeros(0, nsp_arrays.STORE_DTYPE))
    return PairingPlan(np.concatenate(counts, 1), chunks, seed=seed, chunk_docs=chunk_docs)


def build_or_open(source: DocumentSource, cfg: DataConfig, seed: int, directory, source_key: str,
                  process_index: int = 0, process_count: int = 1,
                  barrier: Callable[..., None] = lambda *a, **k: None, *, passes: int = nsp.PLAN_PASSES,
                  chunk_docs: int = CHUNK_DOCS) -> PairingPlan:
    """``build_plan`` for this process under ``<directory>/<key>``, then ``barrier(name, timeout_s)``, then
    the whole plan opened. A plan already built is only opened, whatever the number of processes."""
    from ptm_jax.parallel.distributed import timeout_for

    seed = nsp.check_seed(seed)
    key = plan_key(source_key, source.num_docs, cfg, seed, passes, chunk_docs)
    root = fs.path(directory) / key
    build_plan(source, cfg, seed, root, key, process_index, process_count, passes=passes, chunk_docs=chunk_docs)
    share = -(-num_chunks(source.num_docs, chunk_docs) // process_count)
    barrier("pairing_plan", timeout_s=timeout_for(share * chunk_docs * passes, DOC_PASSES_PER_S))
    return open_plan(root, source.num_docs, seed, key, passes=passes, chunk_docs=chunk_docs)


def run_artifact(cfg, corpus, directory) -> PairingPlan:
    """``Pretraining.artifacts["pairing_plan"]`` of the families whose stream is BERT's (``train/stages.py``
    ``prepare_corpus``, so ``ptm data`` and the first run build it): the plan of the training documents, under
    ``<cache_dir>/artifacts/pairing_plan``, keyed by the token cache's key."""
    import jax

    from ptm_jax.parallel.distributed import barrier

    return build_or_open(corpus.train, cfg.data, cfg.data.seed, directory, str(corpus.cache.meta["fingerprint"]),
                         jax.process_index(), jax.process_count(), barrier)
