"""The GloVe co-occurrence matrix X (Pennington et al. 2014 Sec. 3; stanfordnlp/GloVe src/cooccur.c), sharded
over processes and cached as an artifact beside the token cache.

The rules are cooccur.c's: words outside the vocabulary (here the specials ``<pad>``, ``<unk>``, ``<eos>``:
cut words are ``<unk>`` in the token cache) are dropped from the stream before positions are counted; a word
and each of the ``window`` in-vocabulary words before it in the same document (a document of the token cache
plays cooccur.c's line: contexts never cross it) are a pair d = 1..window apart, adding 1/d to X[left, right]
(and to X[right, left] when ``symmetric``).

Exact and the same bytes for any host count: every count is kept as an integer in units of
1 / lcm(1..window) (1/d is ``unit // d`` units exactly), so partial matrices add up associatively. Process p of
P counts the documents d with d % P == p, writes its partial matrix, process 0 adds them and writes the
merged triples (i, j, X_ij) sorted by (i, j); every process then reads that one file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from ptm_jax import fs
from ptm_jax.errors import DataError

FIRST_WORD = 3
"""Ids below this are the word vocabulary's specials (``data/word_vocab.py``): never counted."""
MATRIX_FILE = "cooccurrence.npz"
EMPTY_FILE = "EMPTY"
"""Written by process 0 instead of the matrix when no pair co-occurs, so that every process raises the same error."""
_FLUSH_ENTRIES = 1 << 24


@dataclasses.dataclass(frozen=True)
class Cooccurrence:
    """The nonzero entries of X sorted by (row, col): X[rows[k], cols[k]] = counts[k] / unit."""

    rows: np.ndarray
    cols: np.ndarray
    counts: np.ndarray
    unit: int
    vocab_size: int

    @property
    def nnz(self) -> int:
        return int(self.rows.size)

    @property
    def values(self) -> np.ndarray:
        """X_ij as float64 (exact up to the division)."""
        return self.counts / float(self.unit)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, rows=self.rows, cols=self.cols, counts=self.counts,
                 meta=np.array([self.unit, self.vocab_size], np.int64))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "co-occurrence file") -> "Cooccurrence":
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                unit, vocab = (int(v) for v in z["meta"])
                out = cls(z["rows"], z["cols"], z["counts"], unit, vocab)
        except (OSError, ValueError, KeyError) as e:
            raise DataError(f"{where}: not a GloVe co-occurrence matrix ({e}); delete it to rebuild") from None
        if not (out.rows.shape == out.cols.shape == out.counts.shape):
            raise DataError(f"{where}: rows/cols/counts lengths differ; delete it to rebuild")
        return out


def count_documents(source: Any, doc_indices: np.ndarray, vocab_size: int, window: int, *, unit: int,
                    symmetric: bool = True, distance_weighting: bool = True) -> sp.csr_matrix:
    """X of the documents ``doc_indices`` of ``source`` (a ``DocumentSource``) as an int64 CSR matrix in units of
    1/``unit`` (``unit`` divisible by every distance 1..window when ``distance_weighting``)."""
    shape = (vocab_size, vocab_size)
    total = sp.csr_matrix(shape, dtype=np.int64)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    held = 0
    weights = [unit // d if distance_weighting else unit for d in range(1, window + 1)]

    def flush():
        nonlocal total, pending, held
        if pending:
            r, c, w = (np.concatenate(x) for x in zip(*pending))
            total = total + sp.coo_matrix((w, (r, c)), shape=shape).tocsr()
            pending, held = [], 0

    block_tokens, block_seg = [], []
    block_size = 0

    def count_block():
        nonlocal held, block_tokens, block_seg, block_size
        if not block_tokens:
            return
        tok = np.concatenate(block_tokens)
        seg = np.concatenate(block_seg)
        block_tokens, block_seg, block_size = [], [], 0
        for d in range(1, window + 1):
            same = seg[:-d] == seg[d:]
            left, right = tok[:-d][same], tok[d:][same]
            pending.append((left, right, np.full(left.size, weights[d - 1], np.int64)))
            held += left.size
            if held >= _FLUSH_ENTRIES:
                flush()

    for k, d in enumerate(np.asarray(doc_indices, np.int64)):
        ids = np.asarray(source.doc_tokens(int(d)))
        if ids.size and int(ids.max()) >= vocab_size:
            raise DataError(f"document {int(d)}: token id {int(ids.max())} >= model.vocab_size={vocab_size}; "
                            "the token cache was built with another vocabulary: set model.vocab_size to the "
                            "tokenizer's size or rebuild the cache")
        ids = ids[ids >= FIRST_WORD].astype(np.int32)
        block_tokens.append(ids)
        block_seg.append(np.full(ids.size, k, np.int64))
        block_size += ids.size
        if block_size >= 1 << 21:
            count_block()
    count_block()
    flush()
    if symmetric:
        total = total + total.T.tocsr()
    total.sum_duplicates()
    total.sort_indices()
    return total


def to_triples(matrix: sp.csr_matrix, unit: int) -> Cooccurrence:
    """The nonzero entries of a CSR matrix (sorted indices) in (row, col) order."""
    matrix.sum_duplicates()
    matrix.sort_indices()
    rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int32), np.diff(matrix.indptr))
    keep = matrix.data != 0
    return Cooccurrence(rows[keep], matrix.indices.astype(np.int32)[keep], matrix.data.astype(np.int64)[keep],
                        int(unit), int(matrix.shape[0]))


def from_triples(c: Cooccurrence) -> sp.csr_matrix:
    return sp.csr_matrix((c.counts, (c.rows, c.cols)), shape=(c.vocab_size, c.vocab_size), dtype=np.int64)


def shard_docs(num_docs: int, process_index: int, process_count: int) -> np.ndarray:
    """The documents process ``process_index`` of ``process_count`` counts: d % P == p."""
    return np.arange(process_index, num_docs, process_count, dtype=np.int64)


def merge(parts: list[Cooccurrence]) -> Cooccurrence:
    """Sum of partial matrices (same unit and vocabulary), as sorted triples: exact, so any split gives the same."""
    if not parts:
        raise ValueError("merge needs at least one partial matrix")
    units = {p.unit for p in parts}
    vocabs = {p.vocab_size for p in parts}
    if len(units) != 1 or len(vocabs) != 1:
        raise DataError(f"partial co-occurrence matrices disagree (units {sorted(units)}, vocabularies "
                        f"{sorted(vocabs)}); delete the artifact directory to rebuild")
    total = from_triples(parts[0])
    for p in parts[1:]:
        total = total + from_triples(p)
    return to_triples(total.tocsr(), parts[0].unit)


def artifact_key(cfg: Any, corpus: Any) -> str:
    """Names the matrix of these documents and settings (the cache's fingerprint, the training documents)."""
    d = cfg.data
    meta = getattr(corpus.cache, "meta", {}) or {}
    docs = np.asarray(getattr(corpus.train, "doc_indices", np.arange(corpus.train.num_docs)), np.int64)
    spec = {"cache": meta.get("fingerprint"), "tokens": int(getattr(corpus.cache, "num_tokens", 0)),
            "docs": hashlib.sha256(docs.tobytes()).hexdigest(), "vocab": int(cfg.model.vocab_size),
            "window": d.window, "symmetric": bool(d.symmetric), "weighting": bool(d.distance_weighting),
            "version": 1}
    return "x-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_cooccurrence(cfg: Any, corpus: Any, directory: Any, *, process_index: int | None = None,
                       process_count: int | None = None, barrier: Callable[[str], None] | None = None
                       ) -> Cooccurrence:
    """The ``Pretraining.artifacts`` builder: X of ``corpus.train`` under ``directory/<key>/``, built once.

    Process p counts its documents into ``partial-p-of-P.npz``; after a barrier process 0 merges them into
    ``cooccurrence.npz`` and marks the folder complete; after a second barrier every process reads it. A
    complete folder is reused (any host count). ``process_index``/``process_count``/``barrier`` default to
    JAX's (tests pass their own to simulate hosts)."""
    import jax

    from ptm_jax.parallel.distributed import barrier as jax_barrier

    pi = jax.process_index() if process_index is None else process_index
    pc = jax.process_count() if process_count is None else process_count
    meet = barrier or jax_barrier
    cfg.data.validate()
    root = fs.path(directory) / artifact_key(cfg, corpus)
    final = root / MATRIX_FILE
    if not fs.is_complete(root):
        unit = cfg.data.weight_unit
        part = count_documents(corpus.train, shard_docs(corpus.train.num_docs, pi, pc), cfg.model.vocab_size,
                               cfg.data.window, unit=unit, symmetric=cfg.data.symmetric,
                               distance_weighting=cfg.data.distance_weighting)
        fs.write_bytes_atomic(root / f"partial-{pi}-of-{pc}.npz", to_triples(part, unit).to_bytes())
        meet("glove_cooccurrence_partials")
        if pi == 0:
            parts = [Cooccurrence.from_bytes(fs.read_bytes(root / f"partial-{p}-of-{pc}.npz"),
                                             f"{root}/partial-{p}-of-{pc}.npz") for p in range(pc)]
            merged = merge(parts)
            for p in range(pc):
                fs.rmtree(root / f"partial-{p}-of-{pc}.npz")
            if merged.nnz == 0:  # every process raises after the barrier below (none is left waiting)
                fs.write_text_atomic(root / EMPTY_FILE, "0\n")
            else:
                if fs.exists(root / EMPTY_FILE):
                    fs.rmtree(root / EMPTY_FILE)
                fs.write_bytes_atomic(final, merged.to_bytes())
                fs.mark_complete(root)
        meet("glove_cooccurrence_merged")
        if not fs.is_complete(root) and fs.exists(root / EMPTY_FILE):
            raise DataError(f"{cfg.data.corpus}: no two vocabulary words occur within data.window="
                            f"{cfg.data.window} of each other in one document, so the co-occurrence matrix "
                            "is empty: add text, lower tokenizer min_count or raise data.window")
    if not fs.exists(final):
        raise DataError(f"{root}: marked complete but {MATRIX_FILE} is missing; delete the folder to rebuild")
    return Cooccurrence.from_bytes(fs.read_bytes(final), str(final))

