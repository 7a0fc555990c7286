"""The table of Poincare embeddings as a Flax module: ``embedding`` [vocab_size, dim] under the params key
``poincare``, uniform in [-init_range, init_range) (Nickel & Kiela 2017, Sec. 3; word2vec's counter-based
initialiser, the same table on any mesh), logical axes ('vocab', 'embed')."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.poincare.config import PoincareConfig
from ptm_jax.families.word2vec.counter_init import uniform_init
from ptm_jax.models.layers import partitioned

TRUNK = "poincare"


class PoincareTable(nn.Module):
    config: PoincareConfig

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        cfg = self.config
        table = self.param("embedding", partitioned(uniform_init(cfg.init_range), ("vocab", "embed")),
                           (cfg.vocab_size, cfg.dim), jnp.float32)
        return jnp.take(table, ids, axis=0, mode="clip")


class Poincare(nn.Module):
    """A batch's rows: ``u`` [B, d] and ``targets`` [B, 1 + K, d] (the positive v first, then the negatives)."""

    config: PoincareConfig

    @nn.compact
    def __call__(self, batch: dict) -> tuple[jax.Array, jax.Array]:
        table = PoincareTable(self.config, name=TRUNK)
        return table(batch["u"]), table(batch["targets"])
