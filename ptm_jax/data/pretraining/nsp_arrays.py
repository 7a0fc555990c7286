"""Next-sentence-prediction planning vectorised over documents: ``nsp.plan_document`` for many documents at once.

The same instances as ``nsp.plan_document`` (google-research/bert create_pretraining_data.py
``create_instances_from_document``), bit for bit: every document's uniforms are the same Philox stream
(``nsp._generator(seed, epoch, DOC_STREAM, d)``), drawn up front, and the documents advance in lockstep, one
chunk of each per numpy step: the chunk end is a ``searchsorted`` over the corpus's cumulative sentence lengths,
each draw ``lo + int(u * (hi - lo + 1))`` is the same float product as Python's. A document that would use more
draws than were drawn for it (only when many "random other document" redraws hit itself) is planned again by
``plan_document``.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.data.pretraining import nsp
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import DataError

STORE_DTYPE = np.dtype([("doc", "<i4"), ("a_first", "<i4"), ("a_last", "<i4"), ("b_doc", "<i4"),
                        ("b_first", "<i4"), ("b_last", "<i4"), ("is_random_next", "i1")])
"""A stored instance (25 bytes): ``nsp.PLAN_DTYPE`` less what its position gives (index, epoch) and the
diagnostics (chunk_sentences, target_length)."""


class SentenceTable:
    """Sentence boundaries of a whole source as two flat arrays: ``doc_sentence[d]`` (first sentence of
    document d, with ``num_docs + 1`` entries) and ``cum[s]`` (tokens before sentence s, ``num_sentences + 1``)."""

    def __init__(self, source: DocumentSource):
        lengths = [np.asarray(source.doc_sentence_lengths(d), np.int64) for d in range(source.num_docs)]
        counts = np.fromiter((x.size for x in lengths), np.int64, len(lengths))
        if counts.size and counts.min() == 0:
            d = int(np.argmin(counts))
            raise DataError(f"document {d} has no sentences: the source must drop empty documents")
        self.num_docs = source.num_docs
        self.doc_sentence = np.concatenate([[0], np.cumsum(counts)])
        flat = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self.cum = np.concatenate([[0], np.cumsum(flat)])


def _draw(u: np.ndarray, lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
    """``nsp._Uniforms.randint`` on arrays: lo + int(u * (hi - lo + 1))."""
    return lo + (u * (np.asarray(hi) - lo + 1)).astype(np.int64)


def plan_documents(source: DocumentSource, table: SentenceTable, docs: np.ndarray, *, epoch: int, seed: int,
                   max_num_tokens: int, short_seq_prob: float) -> np.ndarray:
    """Instances of documents ``docs`` in pass ``epoch`` as ``STORE_DTYPE`` records, document after document (in
    the order of ``docs``), each document's in ``plan_document`` order."""
    docs = np.asarray(docs, np.int64)
    if docs.size == 0:
        return np.zeros(0, STORE_DTYPE)
    sb = table.doc_sentence[docs]
    n = table.doc_sentence[docs + 1] - sb
    budget = 12 + 3 * n  # draws: 2 for the target, <= 3 per chunk (+ rare redraws); a chunk takes >= 1 sentence
    ubase = np.concatenate([[0], np.cumsum(budget)])
    U = np.concatenate([nsp._generator(seed, epoch, nsp._DOC_STREAM, int(d)).random(int(m))
                        for d, m in zip(docs.tolist(), budget.tolist())])
    last = U.size - 1
    cum, dsent, num_docs = table.cum, table.doc_sentence, table.num_docs

    def take(p: np.ndarray) -> np.ndarray:
        return U[np.minimum(p, last)]

    ptr = ubase[:-1].copy()
    short = take(ptr) < short_seq_prob
    ptr += 1
    target = np.full(docs.size, max_num_tokens, np.int64)
    target[short] = _draw(take(ptr[short]), 2, max_num_tokens)
    ptr += short
    start = np.zeros(docs.size, np.int64)
    out, order = [], []
    step = 0
    act = np.arange(docs.size)
    while act.size:
        s, b, t = start[act], sb[act], target[act]
        end = np.minimum(np.searchsorted(cum, cum[b + s] + t, side="left") - b, n[act])
        size = end - s
        multi = size > 1
        p = ptr[act]
        a_last = s + 1
        a_last[multi] = s[multi] + _draw(take(p[multi]), 1, size[multi] - 1)
        p += multi
        rand = ~multi
        rand[multi] = take(p[multi]) < 0.5
        p += multi
        d = docs[act]
        rec = np.zeros(act.size, STORE_DTYPE)
        rec["doc"], rec["a_first"], rec["a_last"] = d, s, a_last
        rec["b_doc"], rec["b_first"], rec["b_last"] = d, a_last, end
        ri = np.flatnonzero(rand)
        if ri.size:
            target_b = t[ri] - (cum[b[ri] + a_last[ri]] - cum[b[ri] + s[ri]])
            rd = np.empty(ri.size, np.int64)
            need, tries = np.ones(ri.size, bool), 0
            while need.any() and tries < 10:  # up to 10 draws to differ from this document
                q = np.flatnonzero(need)
                rd[q] = _draw(take(p[ri[q]]), 0, num_docs - 1)
                p[ri[q]] += 1
                tries += 1
                need[q] = rd[q] == d[ri[q]]
            rbase = dsent[rd]
            rs = _draw(take(p[ri]), 0, dsent[rd + 1] - rbase - 1)
            p[ri] += 1
            window = np.minimum(dsent[rd + 1] - rbase - rs, np.maximum(target_b, 1))
            k = np.searchsorted(cum, cum[rbase + rs] + target_b, side="left") - (rbase + rs) - 1
            k = np.clip(k, 0, window - 1)
            rec["b_doc"][ri], rec["b_first"][ri], rec["b_last"][ri] = rd, rs, rs + k + 1
            rec["is_random_next"][ri] = 1
        ptr[act] = p
        start[act] = np.where(rand, a_last, end)
        out.append(rec)
        order.append(np.stack([act, np.full(act.size, step)], 1))
        step += 1
        act = act[start[act] < n[act]]
    rec = np.concatenate(out)
    key = np.concatenate(order)
    order = np.lexsort((key[:, 1], key[:, 0]))
    rec = rec[order]
    over = np.flatnonzero(ptr > ubase[1:])
    if over.size:  # ran past its drawn uniforms: plan those documents one by one
        rec = _replan(source, rec, key[order, 0], docs, over, epoch=epoch, seed=seed,
                      max_num_tokens=max_num_tokens, short_seq_prob=short_seq_prob)
    return rec


def _replan(source, rec, local, docs, over, **kw) -> np.ndarray:
    parts = []
    bad = set(over.tolist())
    for i in range(docs.size):
        if i in bad:
            rows = nsp.plan_document(source, int(docs[i]), **kw)
            r = np.zeros(len(rows), STORE_DTYPE)
            if rows:
                cols = np.asarray(rows, np.int64)
                for j, name in enumerate(STORE_DTYPE.names):
                    r[name] = cols[:, j]
            parts.append(r)
        else:
            parts.append(rec[local == i])
    return np.concatenate(parts)

