"""Next-sentence-prediction instance planning on sentence lengths (no tokens are touched here).

Follows ``create_instances_from_document`` of google-research/bert create_pretraining_data.py:

* ``max_num_tokens = max_seq_length - 3``; one ``target_seq_length`` per document per pass: ``max_num_tokens``,
  or with probability ``short_seq_prob`` a draw ``randint(2, max_num_tokens)`` (inclusive on both ends, like
  Python's ``random.randint``).
* Sentences accumulate into a chunk until the document's last sentence or until the chunk holds
  ``>= target_seq_length`` tokens. ``a_end = randint(1, len(chunk) - 1)`` sentences form A (1 if the chunk has one).
* "Random next" when the chunk has one sentence or a uniform draw is ``< 0.5``: a random other document (up to 10
  draws to differ from this one), B starts at a random sentence of it and takes sentences until B holds
  ``>= target_seq_length - len(A)`` tokens (at least one sentence); the chunk's unused sentences are put back
  (the next chunk starts right after A). Otherwise B is the rest of the chunk.

``PLAN_PASSES`` distinct passes repeat in a cycle (the reference writes ``dupe_factor`` passes once and training
reads them over and over). The reference draws from one ``random.Random`` for the whole corpus; here every
(seed, pass, document) has its own counter-based stream (numpy Philox), so any document of any pass can be planned
alone, in any order, on any host (``nsp_arrays`` plans many at once, vectorised, with the same draws).
A pass ("epoch" here, one of BERT's ``dupe_factor`` passes) visits documents in a permutation keyed on
(seed, epoch). The reference finally shuffles all instances; we shuffle instances within consecutive blocks of
``SHUFFLE_BLOCK`` (keyed on (seed, epoch, block)), which keeps batches from holding runs of one document while
still allowing a cheap fast-forward. The global example stream is pass 0, pass 1, ... concatenated; an
instance's ``index`` in that stream keys its masking randomness downstream.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

import numpy as np

from ptm_jax.config import DataConfig
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import ConfigError, DataError

PLAN_PASSES = 10
"""Distinct passes of the stream (the reference's ``dupe_factor``, 10 by default): pass e is planned as pass
``e % PLAN_PASSES``, so the pairing plan is finite (``plan_store``) and any example is found without planning
what comes before it; masking is keyed on the example's global index, so repeated pairs get fresh masks."""
SHUFFLE_BLOCK = 1 << 14
"""Instances per shuffled block of a pass (the reference shuffles a whole pass; this bounds memory)."""

PLAN_DTYPE = np.dtype([
    ("index", "<i8"),            # position in the global example stream
    ("epoch", "<i4"),            # pass number (BERT dupe_factor pass)
    ("doc", "<i4"),              # A = sentences [a_first, a_last) of document doc
    ("a_first", "<i4"),
    ("a_last", "<i4"),
    ("b_doc", "<i4"),            # B = sentences [b_first, b_last) of document b_doc
    ("b_first", "<i4"),
    ("b_last", "<i4"),
    ("is_random_next", "<i1"),   # NSP label: 1 = B from a random document, 0 = actual next
    ("chunk_sentences", "<i4"),  # sentences in the chunk A was cut from (diagnostics and tests)
    ("target_length", "<i4"),    # the document's target_seq_length for this pass
])
_DOC_FIELDS = PLAN_DTYPE.names[2:]

# Philox stream tags (bits 64..127 of the 256-bit counter); epoch sits in bits 192..255, the document or block
# number in bits 128..191, and the low 64 bits count draws, so no two streams can overlap.
_DOC_STREAM, _PERMUTATION_STREAM, _BLOCK_STREAM = 0, 1, 2


def _generator(seed: int, epoch: int, stream: int, item: int) -> np.random.Generator:
    counter = (epoch << 192) | (item << 128) | (stream << 64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


def check_seed(seed: int) -> int:
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 1 << 63:
        raise ConfigError(f"data seed must be an integer in [0, 2^63), got {seed!r}")
    return int(seed)


class _Uniforms:
    """Sequential uniform draws in [0, 1) from a generator, pre-drawn in blocks (one numpy call per block)."""

    def __init__(self, gen: np.random.Generator, block: int = 32):
        self._gen, self._block = gen, block
        self._buf: list[float] = []
        self._pos = 0

    def next(self) -> float:
        if self._pos == len(self._buf):
            self._buf, self._pos = self._gen.random(self._block).tolist(), 0
            self._block = min(self._block * 2, 4096)
        self._pos += 1
        return self._buf[self._pos - 1]

    def randint(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi], both ends included (Python ``random.randint`` semantics)."""
        return lo + int(self.next() * (hi - lo + 1))


def doc_permutation(num_docs: int, seed: int, epoch: int) -> np.ndarray:
    """Order in which pass ``epoch`` visits the documents."""
    return _generator(seed, epoch, _PERMUTATION_STREAM, 0).permutation(num_docs)


def plan_document(source: DocumentSource, d: int, *, epoch: int, seed: int, max_num_tokens: int,
                  short_seq_prob: float) -> list[tuple[int, ...]]:
    """Instances of document ``d`` in pass ``epoch``, as tuples in ``PLAN_DTYPE`` order from ``doc`` on.

    Works per chunk on cumulative sentence lengths (bisection), never per token.
    """
    lengths = source.doc_sentence_lengths(d)
    n = len(lengths)
    if n == 0:
        raise DataError(f"document {d} has no sentences: the source must drop empty documents")
    u = _Uniforms(_generator(seed, epoch, _DOC_STREAM, d))
    target = max_num_tokens
    if u.next() < short_seq_prob:
        target = u.randint(2, max_num_tokens)
    cum = list(accumulate(lengths.tolist(), initial=0))
    num_docs = source.num_docs
    out: list[tuple[int, ...]] = []
    start = 0
    while start < n:
        # The chunk ends at the first sentence where its length reaches the target, or at the document end.
        end = min(bisect_left(cum, cum[start] + target, start + 1), n)
        size = end - start
        a_last = start + (1 if size == 1 else u.randint(1, size - 1))
        if size == 1 or u.next() < 0.5:
            target_b = target - (cum[a_last] - cum[start])
            for _ in range(10):
                rd = u.randint(0, num_docs - 1)
                if rd != d:
                    break
            r_lengths = source.doc_sentence_lengths(rd)
            if len(r_lengths) == 0:
                raise DataError(f"document {rd} has no sentences: the source must drop empty documents")
            rs = u.randint(0, len(r_lengths) - 1)
            # Each sentence has >= 1 token, so at most max(target_b, 1) sentences are ever needed.
            window = np.cumsum(r_lengths[rs:rs + max(target_b, 1)])
            k = min(int(np.searchsorted(window, target_b, side="left")), len(window) - 1)
            out.append((d, start, a_last, rd, rs, rs + k + 1, 1, size, target))
            start = a_last  # the chunk's unused sentences are put back
        else:
            out.append((d, start, a_last, d, a_last, end, 0, size, target))
            start = end
    return out


def _records(rows: list[tuple[int, ...]], epoch: int, first_index: int) -> np.ndarray:
    rec = np.zeros(len(rows), PLAN_DTYPE)
    if rows:
        cols = np.asarray(rows, dtype=np.int64)
        for j, name in enumerate(_DOC_FIELDS):
            rec[name] = cols[:, j]
    rec["epoch"] = epoch
    rec["index"] = first_index + np.arange(len(rows))
    return rec


def _epoch_blocks(source: DocumentSource, cfg: DataConfig, seed: int, epoch: int,
                  block: int) -> Iterator[tuple[int, list[tuple[int, ...]]]]:
    """Unshuffled blocks of ``block`` instances of one pass (the last may be shorter), in document order."""
    max_num_tokens = cfg.max_seq_length - 3
    pending: list[tuple[int, ...]] = []
    block_id = 0
    for d in doc_permutation(source.num_docs, seed, epoch).tolist():
        pending.extend(plan_document(source, d, epoch=epoch, seed=seed, max_num_tokens=max_num_tokens,
                                     short_seq_prob=cfg.short_seq_prob))
        while len(pending) >= block:
            yield block_id, pending[:block]
            pending = pending[block:]
            block_id += 1
    if pending:
        yield block_id, pending


def _shuffled(rows: list[tuple[int, ...]], seed: int, epoch: int, block_id: int, first_index: int) -> np.ndarray:
    order = _generator(seed, epoch, _BLOCK_STREAM, block_id).permutation(len(rows))
    rec = _records(rows, epoch, first_index)
    shuffled = rec[order]
    shuffled["index"] = rec["index"]
    return shuffled


def _check(source: DocumentSource, cfg: DataConfig, seed: int, shuffle_block: int) -> int:
    if source.num_docs <= 0:
        raise DataError("the pretraining corpus has no documents; check data.corpus and data.eval_documents")
    if cfg.max_seq_length < 8:
        raise ConfigError(f"data.max_seq_length={cfg.max_seq_length} is too short (minimum 8)")
    if shuffle_block < 1:
        raise ConfigError(f"shuffle_block must be positive, got {shuffle_block}")
    return check_seed(seed)


def plan_epoch(source: DocumentSource, cfg: DataConfig, seed: int, epoch: int, *, first_index: int = 0,
               shuffle_block: int = SHUFFLE_BLOCK) -> np.ndarray:
    """Every instance of pass ``epoch`` in stream order; ``index`` counts from ``first_index``."""
    seed = _check(source, cfg, seed, shuffle_block)
    parts = [_shuffled(rows, seed, epoch, b, first_index + b * shuffle_block)
             for b, rows in _epoch_blocks(source, cfg, seed, epoch, shuffle_block)]
    return np.concatenate(parts)


def iter_plan(source: DocumentSource, cfg: DataConfig, seed: int, start_index: int = 0, *,
              epochs: int | None = None, shuffle_block: int = SHUFFLE_BLOCK) -> Iterator[np.ndarray]:
    """The global example stream from ``start_index`` on, as ``PLAN_DTYPE`` record arrays (one per block): the
definition that ``plan_store.PairingPlan.records`` reads by example id without replaying it.

    Fast-forwarding plans the skipped passes on sentence lengths only (no tokens, no shuffles); cost is
    proportional to the number of chunks skipped. ``epochs=None`` streams forever; otherwise stops after
    passes ``0 .. epochs-1``.
    """
    seed = _check(source, cfg, seed, shuffle_block)
    if start_index < 0:
        raise ConfigError(f"start_index must be >= 0, got {start_index}")
    offset, epoch = 0, 0
    while epochs is None or epoch < epochs:
        last_block_end = offset
        planned = epoch % PLAN_PASSES
        for block_id, rows in _epoch_blocks(source, cfg, seed, planned, shuffle_block):
            first = offset + block_id * shuffle_block
            if first + len(rows) > start_index:
                rec = _shuffled(rows, seed, planned, block_id, first)
                rec["epoch"] = epoch
                yield rec[max(0, start_index - first):]
            last_block_end = first + len(rows)
        offset = last_block_end
        epoch += 1
