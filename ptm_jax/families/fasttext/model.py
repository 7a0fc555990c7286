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

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.fasttext.config import FastTextConfig
from ptm_jax.families.word2vec.model import gather_rows, mean_with_sum_gradient, pair_scores
from ptm_jax.models.layers import partitioned

TRUNK = "fasttext"


def uniform_init(dim: int):
    """fastText ``input_->uniform(1.0 / args_->dim)``: uniform in [-1/dim, 1/dim]."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -1.0 / dim, 1.0 / dim)

    return init


class FastTextTables(nn.Module):
    """The two tables; ``__call__(ids, table)`` gathers rows of one (with word2vec's ``duplicate_cap``)."""

    config: FastTextConfig

    @nn.compact
    def __call__(self, ids: jax.Array, table: str) -> jax.Array:
        cfg = self.config
        tables = {
            "input": self.param("input", partitioned(uniform_init(cfg.dim), ("vocab", "embed")),
                                (cfg.input_rows, cfg.dim), jnp.float32),
            "output": self.param("output", partitioned(nn.initializers.zeros, ("vocab", "embed")),
                                 (cfg.vocab_size, cfg.dim), jnp.float32),
        }
        return gather_rows(tables[table], ids, cfg.duplicate_cap)


def row_ids(batch: dict, cbow: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(input unit ids [R, M], their weights [R, M], output target ids [R, T]) of a batch: the rows a step
    reads from each table (M = N units, or 2 window x N for CBOW's context; T as :class:`FastText`)."""
    units, weight = batch["subwords"], batch["subword_weight"]
    if cbow:                                                       # the context's units together
        r = units.shape[0]
        units, weight = units.reshape(r, -1), weight.reshape(r, -1)
    first = batch["center"][:, None] if cbow else batch["context"]
    return units, weight, jnp.concatenate([first, batch["negatives"]], axis=1)


def scores_from_rows(inputs: jax.Array, weight: jax.Array, targets: jax.Array) -> jax.Array:
    """[R, M, d] input unit rows, [R, M] weights, [R, T, d] target rows -> [R, T]: the mean of the units (the
    whole gradient to each) against every target."""
    h = mean_with_sum_gradient(inputs, weight)                                     # [R, d]
    return pair_scores(h[:, None, :], targets)[:, 0, :]


class FastText(nn.Module):
    """A batch of ``data.py`` features -> ``scores`` [R, T]: the hidden vector of each row against its targets,
    the context words then the negatives (skip-gram, T = 2 window + K) or the center then the negatives (CBOW,
    T = 1 + K)."""

    config: FastTextConfig
    cbow: bool

    @nn.compact
    def __call__(self, batch: dict) -> jax.Array:
        tables = FastTextTables(self.config, name=TRUNK)
        units, weight, targets = row_ids(batch, self.cbow)
        return scores_from_rows(tables(units, "input"), weight, tables(targets, "output"))
