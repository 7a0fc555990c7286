"""Bengio et al. 2003 (JMLR 3, Sec. 2), "A Neural Probabilistic Language Model", as a Flax Linen module.

    x = (C(w_{t-1}), C(w_{t-2}), ..., C(w_{t-n+1}))        the concatenated features of the n-1 predecessors
    y = b + W x + U tanh(d + H x)                         unnormalised log-probabilities over the vocabulary
    P(w_t = i | context) = softmax(y)_i

Efficient rows: a row holds L + n - 1 consecutive tokens and the model predicts its last L, each from its n-1
predecessors, which are gathered inside the model by shifted slices of the row's features, so the features
of a token are looked up once and shared by the n-1 predictions that use them.

Parameters carry logical axis names (``parallel/rules.py``): C is ('vocab', 'embed'), H is ('embed', 'mlp')
over the concatenation, U is ('mlp', 'vocab'), W is ('embed', 'vocab'). The params tree is
``{'nnlm': {'embeddings', 'hidden'}, 'lm_head': {'output', 'direct'}}``: the trunk (C, H, d) computes the
features x and the hidden layer, the language-model head (U, b, W) the scores.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.nnlm.config import NnlmConfig
from ptm_jax.models.layers import constrain, dtype_of, partitioned, truncated_normal


def context_features(features: jax.Array, context: int) -> jax.Array:
    """[B, L + c, m] features of a row -> [B, L, c * m]: for prediction i (row position c + i) the features of
    positions c + i - 1, c + i - 2, ..., i (most recent first, the paper's order of x)."""
    length = features.shape[1] - context
    return jnp.concatenate([features[:, context - k: context - k + length] for k in range(1, context + 1)],
                           axis=-1)


class NnlmTrunk(nn.Module):
    """C (the shared word features) and the tanh hidden layer: row [B, L + n - 1] -> (x [B, L, (n-1) m],
    tanh(d + H x) [B, L, h] or None when h = 0)."""

    config: NnlmConfig

    @nn.compact
    def __call__(self, window_ids: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        cfg = self.config
        dtype = dtype_of(cfg.dtype)
        table = self.param("embedding", partitioned(truncated_normal(cfg.init_std), ("vocab", "embed")),
                           (cfg.vocab_size, cfg.embed_dim), jnp.float32)
        feats = constrain(jnp.take(table, window_ids, axis=0).astype(dtype), ("batch", "length", "act_embed"))
        x = constrain(context_features(feats, cfg.context), ("batch", "length", "act_embed"))
        if cfg.hidden_dim == 0:
            return x, None
        h = nn.Dense(cfg.hidden_dim, dtype=dtype, param_dtype=jnp.float32,
                     kernel_init=partitioned(truncated_normal(cfg.init_std), ("embed", "mlp")),
                     bias_init=partitioned(nn.initializers.zeros, ("mlp",)), name="hidden")(x)
        return x, jnp.tanh(constrain(h, ("batch", "length", "act_mlp")))


class NnlmHead(nn.Module):
    """The scores y = b + W x + U h: U and b in ``output``, W in ``direct`` (which holds b when h = 0)."""

    config: NnlmConfig

    @nn.compact
    def __call__(self, x: jax.Array, h: jax.Array | None) -> jax.Array:
        cfg = self.config
        dtype = dtype_of(cfg.dtype)
        y = 0.0
        if h is not None:
            y = nn.Dense(cfg.vocab_size, dtype=dtype, param_dtype=jnp.float32,
                         kernel_init=partitioned(truncated_normal(cfg.init_std), ("mlp", "vocab")),
                         bias_init=partitioned(nn.initializers.zeros, ("vocab",)), name="output")(h)
        if cfg.direct:
            y = y + nn.Dense(cfg.vocab_size, use_bias=h is None, dtype=dtype, param_dtype=jnp.float32,
                             kernel_init=partitioned(truncated_normal(cfg.init_std), ("embed", "vocab")),
                             bias_init=partitioned(nn.initializers.zeros, ("vocab",)), name="direct")(x)
        return constrain(y, ("batch", "length", "act_vocab"))


class NnlmLanguageModel(nn.Module):
    """Row [B, L + n - 1] -> scores y [B, L, |V|] for the row's last L tokens."""

    config: NnlmConfig

    @nn.compact
    def __call__(self, window_ids: jax.Array) -> jax.Array:
        x, h = NnlmTrunk(self.config, name="nnlm")(window_ids)
        return NnlmHead(self.config, name="lm_head")(x, h)
