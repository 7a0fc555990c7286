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

from ptm_jax.families.word2vec.config import Word2VecConfig
from ptm_jax.models.layers import partitioned

TRUNK = "word2vec"


def uniform_init(dim: int):
    """word2vec.c ``InitNet``: (random / 65536 - 0.5) / size, i.e. uniform in [-0.5 / dim, 0.5 / dim)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -0.5 / dim, 0.5 / dim)

    return init


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


def gather_rows(table: jax.Array, ids: jax.Array, cap: int) -> jax.Array:
    """``table[ids]``; with ``cap`` > 0 the gradient of a row occurring n > cap times in ``ids`` is scaled by
    cap / n (see :class:`Word2VecTables`)."""
    if not cap:
        return jnp.take(table, ids, axis=0, mode="clip")  # ids come from the vocabulary: in range
    return _gather_capped(table, ids, float(cap))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _gather_capped(table, ids, cap):
    return jnp.take(table, ids, axis=0, mode="clip")


def _gather_capped_fwd(table, ids, cap):
    return _gather_capped(table, ids, cap), (ids, table.shape[0])


def _gather_capped_bwd(cap, res, g):
    ids, rows = res
    flat = ids.reshape(-1)
    total = jax.ops.segment_sum(g.reshape(flat.shape[0], -1), flat, num_segments=rows)
    count = jax.ops.segment_sum(jnp.ones(flat.shape, g.dtype), flat, num_segments=rows)
    return total * jnp.minimum(1.0, cap / jnp.maximum(count, 1.0))[:, None], None


_gather_capped.defvjp(_gather_capped_fwd, _gather_capped_bwd)


class Word2VecTables(nn.Module):
    """The tables; ``__call__(ids, table)`` gathers rows of one of them.

    A row that occurs n times in a step's gathers (a frequent word as a context, a target or a negative of
    many pairs) gets the sum of its n pair updates while n <= ``config.duplicate_cap``, and that sum scaled by
    cap / n beyond. word2vec.c applies the n updates one after another, each to the row the previous one
    left, which keeps them small once the row fits; a batch applies them all to the same stale row, and for
    the commonest words (over a thousand occurrences as negatives in 4096 running words) the summed step
    exceeds the stable step size. Skip-gram on Gutenberg at dim 100, batch 4096, alpha 0.025, one epoch
    (benchmarks/word2vec_vs_gensim.py): the plain sum (cap 0) gave a non-finite loss at step 167; the mean
    (cap 1) slowed the frequent words so much that the epoch learnt nothing (analogy 0.0%); cap 4: 0.04%,
    cap 16: 1.3%, cap 64: 2.4% (gensim: 1.6%). Rows with at most ``cap`` occurrences get exactly word2vec.c's
    steps."""

    config: Word2VecConfig
    negative: bool
    hs: bool

    @nn.compact
    def __call__(self, ids: jax.Array, table: str) -> jax.Array:
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
        return gather_rows(tables[table], ids, self.config.duplicate_cap)


def row_ids(batch: dict, negative: bool, hs: bool) -> dict[str, jax.Array]:
    """Table name -> the ids of its rows one batch reads, one gather per table: ``input`` the context [R, S];
    ``output`` the target then the negatives [R, 1 + K] (or [R, 1 + S x K], a draw per pair); ``hs_output`` the
    target's Huffman path [R, D]."""
    ids = {"input": batch["context"]}
    if negative:
        neg = batch["negatives"]
        ids["output"] = jnp.concatenate([batch["center"][:, None], neg.reshape(neg.shape[0], -1)], axis=1)
    if hs:
        ids["hs_output"] = batch["path"]
    return ids


def scores_from_rows(rows: dict[str, jax.Array], batch: dict, cbow: bool) -> dict[str, jax.Array]:
    """The gathered rows of ``row_ids`` -> scores: ``positive`` [R, S'] (the target), ``negative`` [R, S', K],
    ``hs`` [R, S', D], S' = 2 x window pairs per center (skip-gram) or 1 (CBOW)."""
    vin = rows["input"]                                                              # [R, S, d]
    if cbow:
        h = mean_with_sum_gradient(vin, batch["context_weight"])[:, None, :]        # [R, 1, d]
    else:
        h = vin
    out = {}
    if "output" in rows:
        if batch["negatives"].ndim == 2:                                             # one draw per center
            scores = pair_scores(h, rows["output"])                                  # [R, S', 1 + K]
            out["positive"], out["negative"] = scores[..., 0], scores[..., 1:]
        else:                                                                        # a draw per pair
            r, s, k = batch["negatives"].shape
            out_rows = rows["output"]
            out["positive"] = jnp.einsum("rsd,rd->rs", h, out_rows[:, 0])
            out["negative"] = jnp.einsum("rsd,rskd->rsk", h, out_rows[:, 1:].reshape(r, s, k, -1))
    if "hs_output" in rows:
        out["hs"] = pair_scores(h, rows["hs_output"])                                # [R, S', D]
    return out


class Word2Vec(nn.Module):
    """A batch of ``data.py`` features -> scores (``scores_from_rows``), the rows gathered from the tables with
    the duplicate cap on their gradient (the dense path: autodiff through the tables)."""

    config: Word2VecConfig
    cbow: bool
    negative: bool = True
    hs: bool = False

    @nn.compact
    def __call__(self, batch: dict) -> dict[str, jax.Array]:
        tables = Word2VecTables(self.config, self.negative, self.hs, name=TRUNK)
        rows = {name: tables(ids, name) for name, ids in row_ids(batch, self.negative, self.hs).items()}
        return scores_from_rows(rows, batch, self.cbow)
