"""ELMo's biLM as Flax modules (Peters et al. 2018 Sec. 3; allenai/bilm-tf ``bilm/model.py``).

* :class:`CharEncoder` (the token representation, bilm-tf ``_build_word_char_embeddings``): character
  embeddings [262, 16] -> one 1-d convolution per (width, count) of the filter bank, max over the 50 positions,
  then the activation -> concatenation (2048) -> ``n_highway`` highway layers
  (g = sigmoid(x W_carry + b_carry), b_carry initialised to -2; y = g * relu(x W_transform + b_transform)
  + (1 - g) * x; bilm-tf's "carry" gate is Srivastava et al.'s transform gate) -> a projection to
  ``projection_dim``.
* :class:`BiLM`: per direction ``n_layers`` LSTMP layers (``models/lstm.py``, cell and projection clip), a
  residual connection around every layer but the first (bilm-tf's ``ResidualWrapper``: the carried state is
  the cell's own, the layer's output adds its input), dropout on each layer's input in training (bilm-tf's
  ``DropoutWrapper(input_keep_prob)`` wraps the ``ResidualWrapper``, so the residual adds the dropped input).
  The backward direction reads the text reversed (bilm-tf feeds it the reversed token ids), so both
  directions scan forward in time; ``features.py`` reverses each sentence within its length.
* :class:`ElmoLanguageModel`: both directions share the token representation and ONE softmax (``softmax``:
  W [vocab, projection_dim], b [vocab]); the loss is ``objective.py``'s.

Params tree: ``{'elmo': {'char_encoder', 'forward_0..', 'backward_0..'}, 'softmax': {'kernel', 'bias'}}``.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.elmo.config import ElmoConfig
from ptm_jax.models.layers import accum_dtype, dtype_of, param_dtype_of, partitioned
from ptm_jax.models.lstm import LSTM, LstmCarry, uniform_init, zero_carry

DIRECTIONS = ("forward", "backward")


class Highway(nn.Module):
    """One highway layer, bilm-tf's ``high(x, W_carry, b_carry, W_transform, b_transform)``."""

    dim: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = partitioned(nn.initializers.normal(stddev=(1.0 / self.dim) ** 0.5), ("embed", "mlp"))
        dense = lambda name, bias: nn.Dense(
            self.dim, dtype=self.dtype, param_dtype=param_dtype_of(self.dtype), kernel_init=init, name=name,
            bias_init=partitioned(nn.initializers.constant(bias), ("mlp",)))
        gate = jax.nn.sigmoid(dense("carry", -2.0)(x))
        transform = jax.nn.relu(dense("transform", 0.0)(x))
        return gate * transform + (1.0 - gate) * x


class CharEncoder(nn.Module):
    """char ids [B, T, C] -> token representation [B, T, projection_dim]."""

    config: ElmoConfig

    @nn.compact
    def __call__(self, chars: jax.Array) -> jax.Array:
        cfg = self.config
        dtype = dtype_of(cfg.dtype)
        pdtype = param_dtype_of(dtype)
        scale = cfg.init_std

        def char_init(key, shape, dtype=jnp.float32):
            return jax.random.uniform(key, shape, dtype, -scale, scale).at[0].set(0.0)  # id 0: the mask

        table = self.param("char_embed", partitioned(char_init, ("vocab", "embed")),
                           (cfg.n_characters, cfg.char_embed_dim), pdtype)
        B, T, C = chars.shape
        x = jnp.take(table, chars.reshape(B * T, C), axis=0).astype(dtype)        # [BT, C, E]
        act = jax.nn.relu if cfg.activation == "relu" else jnp.tanh
        pooled = []
        for i, (width, count) in enumerate(cfg.filters):
            # bilm-tf: relu -> U(-sqrt(1/(w*E)), ..); tanh -> N(0, sqrt(1/(w*E)))
            std = (1.0 / (width * cfg.char_embed_dim)) ** 0.5
            kinit = uniform_init(std) if cfg.activation == "relu" else nn.initializers.normal(std)
            w = self.param(f"cnn_{i}_kernel", partitioned(kinit, (None, "embed", "mlp")),
                           (int(width), cfg.char_embed_dim, int(count)), pdtype)
            b = self.param(f"cnn_{i}_bias", partitioned(nn.initializers.zeros, ("mlp",)), (int(count),), pdtype)
            conv = jax.lax.conv_general_dilated(x, w.astype(dtype), (1,), "VALID",
                                                dimension_numbers=("NWC", "WIO", "NWC")) + b.astype(dtype)
            pooled.append(act(jnp.max(conv, axis=1)))                             # max over time, then act
        h = jnp.concatenate(pooled, axis=-1)
        for k in range(cfg.n_highway):
            h = Highway(cfg.n_filters, dtype, name=f"highway_{k}")(h)
        h = nn.Dense(cfg.projection_dim, dtype=dtype, param_dtype=pdtype, name="projection",
                     kernel_init=partitioned(nn.initializers.normal((1.0 / cfg.n_filters) ** 0.5), ("mlp", "embed")),
                     bias_init=partitioned(nn.initializers.zeros, ("embed",)))(h)
        return h.reshape(B, T, cfg.projection_dim)


def init_carry(cfg: ElmoConfig, batch: int) -> dict:
    """Zero state of every layer of both directions: {'forward': [LstmCarry] * n_layers, 'backward': [...]}."""
    acc = accum_dtype(dtype_of(cfg.dtype))
    return {d: [zero_carry(batch, cfg.lstm_dim, cfg.projection_dim, acc) for _ in range(cfg.n_layers)]
            for d in DIRECTIONS}


class BiLM(nn.Module):
    """Token representations of the forward text and of the reversed text -> per-layer outputs of each
    direction, and the carries after the window."""

    config: ElmoConfig

    @nn.compact
    def __call__(self, tokens: dict, mask: dict, carry: dict | None, train: bool) -> tuple[dict, dict]:
        cfg = self.config
        outputs, new_carry = {}, {}
        for d in DIRECTIONS:
            x, layers, carries = tokens[d], [], []
            for i in range(cfg.n_layers):
                inp = nn.Dropout(cfg.dropout, deterministic=not train)(x)
                y, c = LSTM(cfg.lstm_dim, cfg.projection_dim, cell_clip=cfg.cell_clip, proj_clip=cfg.proj_clip,
                            forget_bias=1.0, init_scale=None, dtype=dtype_of(cfg.dtype),
                            param_dtype=param_dtype_of(dtype_of(cfg.dtype)),
                            name=f"{d}_{i}")(inp, mask[d], None if carry is None else carry[d][i])
                if cfg.use_skip_connections and i > 0:
                    y = y + inp  # bilm-tf: ResidualWrapper inside DropoutWrapper adds the dropped input
                layers.append(y)
                carries.append(c)
                x = y
            outputs[d], new_carry[d] = layers, carries
        return outputs, new_carry


class Elmo(nn.Module):
    """The trunk: shared CharEncoder, then the BiLM. ``chars``: {'forward': [B, T, C], 'backward': [B, T, C]}."""

    config: ElmoConfig

    @nn.compact
    def __call__(self, chars: dict, mask: dict, carry: dict | None = None, train: bool = False):
        both = CharEncoder(self.config, name="char_encoder")(jnp.concatenate([chars[d] for d in DIRECTIONS]))
        tokens = dict(zip(DIRECTIONS, jnp.split(both, len(DIRECTIONS))))   # one char-CNN call for both
        layers, new_carry = BiLM(self.config, name="bilm")(tokens, mask, carry, train)
        return tokens, layers, new_carry


class Softmax(nn.Module):
    """The one softmax both directions share: (W [vocab, P], b [vocab]) as bilm-tf's softmax_W / softmax_b."""

    config: ElmoConfig

    @nn.compact
    def __call__(self) -> tuple[jax.Array, jax.Array]:
        cfg = self.config
        pdtype = param_dtype_of(dtype_of(cfg.dtype))
        w = self.param("kernel", partitioned(nn.initializers.normal(1.0 / cfg.projection_dim ** 0.5),
                                             ("vocab", "embed")), (cfg.vocab_size, cfg.projection_dim), pdtype)
        b = self.param("bias", partitioned(nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), pdtype)
        return w, b


class ElmoLanguageModel(nn.Module):
    """-> (top output per direction [B, T, P] after dropout, softmax (W, b), new carry)."""

    config: ElmoConfig

    @nn.compact
    def __call__(self, chars: dict, mask: dict, carry: dict | None = None, train: bool = False):
        _, layers, new_carry = Elmo(self.config, name="elmo")(chars, mask, carry, train)
        drop = nn.Dropout(self.config.dropout, deterministic=not train)
        top = {d: drop(layers[d][-1]) for d in DIRECTIONS}
        return top, Softmax(self.config, name="softmax")(), new_carry


__all__ = ["BiLM", "CharEncoder", "Elmo", "ElmoLanguageModel", "Highway", "LstmCarry", "init_carry"]
