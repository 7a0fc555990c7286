"""word2vec's two architectures as a Flax Linen module (Mikolov et al. 2013a, "Efficient Estimation of Word
Representations in Vector Space", Sec. 3; 2013b, Sec. 2; word2vec.c ``TrainModelThread``).

Tables, under the params key ``word2vec`` (logical axes ('vocab', 'embed'), so they shard over the vocabulary
through ``parallel/rules.py``):

* ``input`` [V, dim]: word2vec.c ``syn0``, uniform in [-0.5, 0.5] / dim; the exported word vectors;
* ``output`` [V, dim]: ``syn1neg``, the negative-sampling output vectors, zeros (only with negatives);
* ``hs_output`` [V, dim]: ``syn1``, one row per inner node of the Huffman tree (V - 1 are used), zeros
  (only with hierarchical softmax).

The forward pass is gathers and small contractions: the input of a pair is the context word's input vector
(skip-gram) or the mean of the context's input vectors (CBOW); its scores are dot products with the output
vectors of the target, of the negatives and (hs) of the target's Huffman path. CBOW's mean has word2vec.c's
gradient: each context vector receives the whole error of the mean (word2vec.c adds ``neu1e`` to every
context word's ``syn0`` row, not ``neu1e / cw``); gensim's ``cbow_mean=1`` does the same.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.word2vec import counter_init
from ptm_jax.families.word2vec.config import Word2VecConfig
from ptm_jax.models.layers import partitioned

TRUNK = "word2vec"


def uniform_init(dim: int):
    """word2vec.c ``InitNet``: (random / 65536 - 0.5) / size, i.e. uniform in [-0.5 / dim, 0.5 / dim), from a
    counter-based hash (``counter_init.py``)."""
    return counter_init.uniform_init(0.5 / dim)


def mean_with_sum_gradient(vectors: jax.Array, weights: jax.Array) -> jax.Array:
    """[R, S, d], [R, S] -> [R, d]: the weighted mean of the vectors, whose gradient reaches every vector whole
    (d out / d vector_s = weight_s, not weight_s / count): word2vec.c's CBOW update."""
    total = jnp.einsum("rsd,rs->rd", vectors, weights)
    count = jnp.maximum(jnp.sum(weights, axis=1, keepdims=True), 1.0)
    return total + jax.lax.stop_gradient(total / count - total)


@jax.custom_vjp
def pair_scores(h: jax.Array, targets: jax.Array) -> jax.Array:
    """[R, S, d], [R, T, d] -> [R, S, T]: every input of a row against every target vector of the row.

    The backward pass is written as T (resp. S) fused multiply-adds over [R, S, d] (resp. [R, T, d]) instead of
    the two batched matrix products autodiff gives: with S and T of 1-20, XLA:CPU runs those as many tiny
    matrix products, several times slower than the multiply-adds (docs/benchmarks.md "word2vec")."""
    return jnp.einsum("rsd,rtd->rst", h, targets)


def _pair_scores_fwd(h, targets):
    return pair_scores(h, targets), (h, targets)


def _pair_scores_bwd(res, g):
    h, targets = res
    g = g.astype(h.dtype)
    grad_h = sum(g[:, :, t, None] * targets[:, None, t, :] for t in range(targets.shape[1]))
    grad_targets = sum(g[:, s, :, None] * h[:, s, None, :] for s in range(h.shape[1]))
    return grad_h, grad_targets


pair_scores.defvjp(_pair_scores_fwd, _pair_scores_bwd)


def gather_rows(table: jax.Array, ids: jax.Array, cap: int, updates: jax.Array | None = None) -> jax.Array:
    """``table[ids]``; with ``cap`` > 0 the gradient of a row taking part in n > cap updates is scaled by cap / n,
    n the sum of ``updates`` (same shape as ``ids``: the updates each read sums, 0 for a read that trains
    nothing; one a read when None) over its reads (see :class:`Word2VecTables`)."""
    if not cap:
        return jnp.take(table, ids, axis=0, mode="clip")  # ids come from the vocabulary: in range
    updates = jnp.ones(ids.shape, table.dtype) if updates is None else updates.astype(table.dtype)
    return _gather_capped(table, ids, updates, float(cap))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _gather_capped(table, ids, updates, cap):
    return jnp.take(table, ids, axis=0, mode="clip")


def _gather_capped_fwd(table, ids, updates, cap):
    return _gather_capped(table, ids, updates, cap), (ids, updates, table.shape[0])


def _gather_capped_bwd(cap, res, g):
    ids, updates, rows = res
    flat = ids.reshape(-1)
    total = jax.ops.segment_sum(g.reshape(flat.shape[0], -1), flat, num_segments=rows)
    count = jax.ops.segment_sum(updates.reshape(-1), flat, num_segments=rows)
    return total * jnp.minimum(1.0, cap / jnp.maximum(count, 1.0))[:, None], None, None


_gather_capped.defvjp(_gather_capped_fwd, _gather_capped_bwd)


class Word2VecTables(nn.Module):
    """The tables; ``__call__(ids, table, live)`` gathers rows of one of them.

    A row that occurs n times among a step's live reads (a frequent word as a context, a target or a negative
    of many pairs; a read is live when its weight is nonzero) gets the sum of its n updates while n <=
    ``config.duplicate_cap``, and that sum scaled by cap / n beyond. word2vec.c applies the n updates one after
    another, each to the row the previous one left, which keeps them small once the row fits; a batch applies
    them all to the same stale row, and for the commonest words (over a thousand occurrences as negatives in
    4096 running words) the summed step exceeds the stable step size. Skip-gram on Gutenberg at dim 100, batch
    4096, alpha 0.025, one epoch (benchmarks/word2vec_vs_gensim.py): the plain sum (cap 0) gave a non-finite loss
    at step 167; the mean (cap 1) slowed the frequent words so much that the epoch learnt nothing (analogy
    0.0%); cap 4: 0.04%, cap 16: 1.3%, cap 64: 2.4% (gensim: 1.6%). Rows with at most ``cap`` live reads get
    exactly word2vec.c's steps."""

    config: Word2VecConfig
    negative: bool
    hs: bool

    @nn.compact
    def __call__(self, ids: jax.Array, table: str, live: jax.Array | None = None) -> jax.Array:
        cfg = self.config
        shape = (cfg.vocab_size, cfg.dim)
        tables = {"input": self.param("input", partitioned(uniform_init(cfg.dim), ("vocab", "embed")), shape,
                                      jnp.float32)}
        if self.negative:
            tables["output"] = self.param("output", partitioned(nn.initializers.zeros, ("vocab", "embed")), shape,
                                          jnp.float32)
        if self.hs:
            tables["hs_output"] = self.param("hs_output", partitioned(nn.initializers.zeros, ("vocab", "embed")),
                                             shape, jnp.float32)
        return gather_rows(tables[table], ids, self.config.duplicate_cap, None if live is None else live > 0)


def row_ids(batch: dict, negative: bool, hs: bool) -> dict[str, tuple[jax.Array, jax.Array]]:
    """Table name -> (ids of the rows one batch reads, their weights: a read with weight 0 trains nothing and
    is not counted by the duplicate cap), one gather per table: ``input`` the pairs' context words [R, c];
    ``output`` each center then its negatives [R, 1 + K] (or [R, 1 + c x K], a draw per pair); ``hs_output``
    the center's Huffman path [R, D]."""
    ids = {"input": (batch["pair_input"], batch["pair_weight"])}
    if negative:
        neg, nw = batch["negatives"], batch["negative_weight"]
        r = neg.shape[0]
        ids["output"] = (jnp.concatenate([batch["center"][:, None], neg.reshape(r, -1)], axis=1),
                         jnp.concatenate([batch["center_weight"][:, None], nw.reshape(r, -1)], axis=1))
    if hs:
        ids["hs_output"] = (batch["path"], batch["path_weight"])
    return ids


def blocks(x: jax.Array, block: int) -> jax.Array:
    """[R, ...] -> [R / block, block, ...]: the packing blocks of ``data.py`` (a batch shard holds whole ones)."""
    return x.reshape((x.shape[0] // block, block) + x.shape[1:])


def per_pair(rows: jax.Array, pair_row: jax.Array, block: int) -> jax.Array:
    """[R, ...] values of the centers -> [R, c, ...] the value of each pair slot's center (``pair_row`` [R, c]:
    the center's row within the block), a gather within each block."""
    r, c = pair_row.shape
    vb = blocks(rows, block)                                                        # [nb, B, ...]
    idx = blocks(pair_row, block).reshape(vb.shape[0], block * c)                   # [nb, B c]
    out = jax.vmap(lambda v, i: jnp.take(v, i, axis=0))(vb, idx)                    # [nb, B c, ...]
    return out.reshape((r, c) + rows.shape[1:])


def per_center_sum(values: jax.Array, pair_row: jax.Array, block: int) -> jax.Array:
    """[R, c, ...] values of the pair slots -> [R, ...] their sum per center, within each block."""
    r, c = pair_row.shape
    nb = r // block
    v = values.reshape((nb, block * c) + values.shape[2:])
    idx = pair_row.reshape(nb, block * c)
    out = jax.vmap(lambda x, i: jax.ops.segment_sum(x, i, num_segments=block))(v, idx)   # [nb, B, ...]
    return out.reshape((r,) + values.shape[2:])


def to_center_slots(values: jax.Array, batch: dict, block: int, slots: int) -> jax.Array:
    """[R, c, ...] values of the pair slots (zero where empty) -> [R, S, ...]: each at its center's row and its
    context slot (``pair_slot``), zeros elsewhere; within each block."""
    r, c = values.shape[:2]
    nb = r // block
    v = values.reshape((nb, block * c) + values.shape[2:])
    row = batch["pair_row"].reshape(nb, block * c)
    slot = batch["pair_slot"].reshape(nb, block * c)
    out = jax.vmap(lambda x, i, j: jnp.zeros((block, slots) + x.shape[1:], x.dtype).at[i, j].add(x))(v, row, slot)
    return out.reshape((r, slots) + values.shape[2:])


def from_center_slots(values: jax.Array, batch: dict, block: int) -> jax.Array:
    """[R, S, ...] values of the centers' context slots -> [R, c, ...] each pair slot's."""
    r, c = batch["pair_row"].shape
    nb = r // block
    v = values.reshape((nb, block) + values.shape[1:])
    row = batch["pair_row"].reshape(nb, block * c)
    slot = batch["pair_slot"].reshape(nb, block * c)
    out = jax.vmap(lambda x, i, j: x[i, j])(v, row, slot)
    return out.reshape((r, c) + values.shape[2:])


def scores_from_rows(rows: dict[str, jax.Array], batch: dict, cbow: bool, block: int, window: int
                     ) -> dict[str, jax.Array]:
    """The gathered rows of ``row_ids`` -> scores: ``positive`` [R, P] (the center), ``negative`` [R, P, K],
    ``hs`` [R, P, D], P = c pair slots (skip-gram: the context word's input vector is the pair's input) or 1
    (CBOW: the mean of a center's context vectors, each receiving the whole error)."""
    vin = rows["input"]                                                              # [R, c, d]
    pair_row = batch["pair_row"]
    if cbow:
        w = batch["pair_weight"]
        total = per_center_sum(vin * w[..., None], pair_row, block)                  # [R, d]
        count = jnp.maximum(per_center_sum(w, pair_row, block), 1.0)[:, None]
        h = (total + jax.lax.stop_gradient(total / count - total))[:, None, :]      # [R, 1, d]

    else:
        h = vin                                                                      # [R, c, d]
        # a center's targets are shared by its pairs: score them in the centers' 2 x window context slots
        # ([R, S, d] x [R, T, d], pair_scores) and read each pair's scores back; on XLA:CPU this is 3x cheaper
        # than gathering every pair's [T, d] target rows (docs/benchmarks.md "word2vec")
        h_slots = to_center_slots(h * batch["pair_weight"][..., None], batch, block, 2 * window)

        def scored(t):                                                               # [R, T, d] -> [R, c, T]
            return from_center_slots(pair_scores(h_slots, t), batch, block)
    out = {}
    if "output" in rows:
        o = rows["output"]
        if batch["negatives"].ndim == 2:                                             # one draw per center
            scores = pair_scores(h, o) if cbow else scored(o)
            out["positive"], out["negative"] = scores[..., 0], scores[..., 1:]
        else:                                                                        # skip-gram, a draw per pair
            r, c, k = batch["negatives"].shape
            out["positive"] = scored(o[:, :1])[..., 0]
            out["negative"] = jnp.einsum("rpd,rpkd->rpk", h, o[:, 1:].reshape(r, c, k, -1))
    if "hs_output" in rows:
        out["hs"] = pair_scores(h, rows["hs_output"]) if cbow else scored(rows["hs_output"])
    return out


class Word2Vec(nn.Module):
    """A batch of ``data.py`` features -> scores (``scores_from_rows``), the rows gathered from the tables with
    the duplicate cap on their gradient (the dense path: autodiff through the tables)."""

    config: Word2VecConfig
    cbow: bool
    negative: bool = True
    hs: bool = False
    block: int = 1
    window: int = 5
    trunk: str = TRUNK
    """The tables' params key (a family training through this model keeps its own: node2vec's)."""

    @nn.compact
    def __call__(self, batch: dict) -> dict[str, jax.Array]:
        tables = Word2VecTables(self.config, self.negative, self.hs, name=self.trunk)
        rows = {name: tables(ids, name, live) for name, (ids, live) in row_ids(batch, self.negative, self.hs).items()}
        return scores_from_rows(rows, batch, self.cbow, self.block, self.window)
