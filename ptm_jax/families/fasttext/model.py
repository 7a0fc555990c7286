"""fastText's subword model for word vectors as a Flax Linen module (Bojanowski et al. 2017, Sec. 3;
facebookresearch/fastText ``src/model.cc`` ``computeHidden``/``update``, ``src/fasttext.cc`` ``skipgram``,
``cbow``).

Tables, under the params key ``fasttext`` (logical axes ('vocab', 'embed'): both shard over the vocabulary and
bucket axis through ``parallel/rules.py``):

* ``input`` [vocab_size + bucket, dim]: fastText's input matrix, uniform in [-1/dim, 1/dim] (``Matrix::uniform``
  with ``1 / dim``); rows 0..V-1 the words, then one row per n-gram hash bucket;
* ``output`` [vocab_size, dim]: the output vectors of negative sampling, zeros.

The hidden vector of an example is the MEAN of its input units' rows (``computeHidden``: the sum times
1 / count) and, outside supervised mode, every unit's row receives the whole gradient of the hidden vector
(``Model::update`` adds ``grad`` to each input row undivided): word2vec's ``mean_with_sum_gradient``. A word's
vector is likewise the mean of its own row and its n-gram rows (``FastText::getWordVector``), see ``hooks.py``.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.fasttext.config import FastTextConfig
from ptm_jax.families.word2vec import counter_init
from ptm_jax.families.word2vec.model import gather_rows, pair_scores, per_center_sum, per_pair
from ptm_jax.models.layers import partitioned

TRUNK = "fasttext"


def uniform_init(dim: int):
    """fastText ``input_->uniform(1.0 / args_->dim)``: uniform in [-1/dim, 1/dim), from a counter-based hash
    (word2vec's ``counter_init.py``: threefry took 5.5 s over the 2M-bucket table on this CPU)."""
    return counter_init.uniform_init(1.0 / dim)


class FastTextTables(nn.Module):
    """The two tables; ``__call__(ids, table, updates)`` gathers rows of one (with word2vec's
    ``duplicate_cap`` counting the pair updates of the reads, ``row_ids``)."""

    config: FastTextConfig

    @nn.compact
    def __call__(self, ids: jax.Array, table: str, updates: jax.Array | None = None) -> jax.Array:
        cfg = self.config
        tables = {
            "input": self.param("input", partitioned(uniform_init(cfg.dim), ("vocab", "embed")),
                                (cfg.input_rows, cfg.dim), jnp.float32),
            "output": self.param("output", partitioned(nn.initializers.zeros, ("vocab", "embed")),
                                 (cfg.vocab_size, cfg.dim), jnp.float32),
        }
        return gather_rows(tables[table], ids, cfg.duplicate_cap, updates)


def row_ids(batch: dict, cbow: bool, block: int) -> dict[str, tuple[jax.Array, jax.Array]]:
    """Table -> (ids of the rows a step reads, the pair updates each read sums, for the duplicate cap; 0 for a
    read that trains nothing): ``input`` the packed units [R, u] (CBOW: one update each; skip-gram: one per pair
    of the unit's center, whose error is the sum of its pairs'); ``output`` the pairs' context words then each
    center's negatives [R, c + K] (skip-gram; a negative sums the updates of the pairs it serves, its weight), or
    [R, c + c x K] with negatives drawn per pair (one update each), or each center then its negatives [R, 1 + K]
    (CBOW)."""
    live = (batch["unit_weight"] > 0).astype(jnp.float32)
    if cbow:
        first, first_n = batch["center"][:, None], batch["center_weight"][:, None]
        unit_n = live
    else:
        first, first_n = batch["pair_input"], batch["pair_weight"]
        pairs = per_center_sum(batch["pair_weight"], batch["pair_row"], block)                 # [R]
        unit_n = live * per_pair(pairs, batch["unit_row"], block)
    rows = batch["negatives"].shape[0]
    negatives = batch["negatives"].reshape(rows, -1)                       # [R, K] or per pair [R, c x K]
    return {"input": (batch["units"], unit_n),
            "output": (jnp.concatenate([first, negatives], axis=1),
                       jnp.concatenate([first_n, batch["negative_weight"].reshape(rows, -1)], axis=1))}


def hidden(inputs: jax.Array, batch: dict, block: int) -> jax.Array:
    """[R, u, d] unit rows -> [R, d]: each center's mean of its units (``unit_row``), the whole gradient to each
    unit (fastText's ``computeHidden`` / ``Model::update``)."""
    w = batch["unit_weight"]
    total = per_center_sum(inputs * w[..., None], batch["unit_row"], block)
    count = jnp.maximum(per_center_sum(w, batch["unit_row"], block), 1.0)[:, None]
    return total + jax.lax.stop_gradient(total / count - total)


def scores_from_rows(inputs: jax.Array, targets: jax.Array, batch: dict, cbow: bool, block: int
                     ) -> dict[str, jax.Array]:
    """The rows of ``row_ids`` -> ``positive`` [R, c] (skip-gram: each pair slot's context word against its
    center's hidden vector) or [R, 1] (CBOW: the center), and ``negative`` [R, K] (or [R, c, K]: per pair, each
    against its center's hidden vector)."""
    h = hidden(inputs, batch, block)                                               # [R, d]
    neg = batch["negatives"]
    k = math.prod(neg.shape[1:])
    p = targets.shape[1] - k
    if neg.ndim == 3:
        per = targets[:, p:].reshape(neg.shape + targets.shape[-1:])              # [R, c, K, d]
        out = {"negative": jnp.einsum("rpd,rpkd->rpk", per_pair(h, batch["pair_row"], block), per)}
    else:
        out = {"negative": pair_scores(h[:, None, :], targets[:, p:])[:, 0, :]}
    if cbow:
        out["positive"] = jnp.einsum("rd,rd->r", h, targets[:, 0])[:, None]
    else:
        out["positive"] = jnp.einsum("rpd,rpd->rp", per_pair(h, batch["pair_row"], block), targets[:, :p])
    return out


class FastText(nn.Module):
    """A batch of ``data.py`` features -> the scores of ``scores_from_rows``."""

    config: FastTextConfig
    cbow: bool
    block: int = 1

    @nn.compact
    def __call__(self, batch: dict) -> dict[str, jax.Array]:
        tables = FastTextTables(self.config, name=TRUNK)
        rows = {name: tables(ids, name, n) for name, (ids, n) in row_ids(batch, self.cbow, self.block).items()}
        return scores_from_rows(rows["input"], rows["output"], batch, self.cbow, self.block)
