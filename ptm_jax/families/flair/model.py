"""Flair's character language models as Flax modules (Akbik et al. 2018 Sec. 2.1; flairNLP/flair
``LanguageModel.forward``): per direction, character embeddings [V, E] -> dropout -> ``lstm_layers`` LSTM layers
(``models/lstm.py``, PyTorch's gate order and init, dropout between layers) -> dropout -> a linear decoder to the
characters. The backward LM reads the text reversed (the rows are built reversed: ``data`` lanes, ``features.py``),
so both directions scan forward in time.

Params tree: ``{'flair': {'forward': {'embedding', 'lstm_0', .., 'decoder'}, 'backward': {...}}}``; flair's
``encoder.weight`` is ``embedding``, ``rnn.weight_ih_l0.T`` / ``weight_hh_l0.T`` / ``bias_ih_l0 + bias_hh_l0``
are ``lstm_0``'s ``kernel`` / ``recurrent_kernel`` / ``bias``, ``decoder.weight.T`` / ``decoder.bias`` the decoder.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.flair.config import FlairConfig
from ptm_jax.models.layers import dtype_of, partitioned
from ptm_jax.models.lstm import LSTM, LstmCarry, zero_carry

DIRECTIONS = ("forward", "backward")


def _uniform(scale: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -scale, scale)

    return init


class CharLanguageModel(nn.Module):
    """One direction: ids [B, T], mask [B, T], carry (a list of ``LstmCarry`` per layer, or None: zeros) ->
    (top LSTM output [B, T, H] before the output dropout, logits [B, T, V] after it (None unless ``decode``),
    new carries)."""

    config: FlairConfig

    @nn.compact
    def __call__(self, ids: jax.Array, mask: jax.Array, carry: list | None = None, train: bool = False,
                 decode: bool = True):
        cfg = self.config
        dtype = dtype_of(cfg.dtype)
        table = self.param("embedding", partitioned(_uniform(0.1), ("vocab", "embed")),
                           (cfg.vocab_size, cfg.embed_dim))  # flair: uniform(-0.1, 0.1)
        drop = nn.Dropout(cfg.dropout, deterministic=not train)
        x = drop(jnp.take(table, ids, axis=0).astype(dtype))
        carries = []
        for i in range(cfg.lstm_layers):
            if i:
                x = drop(x)  # torch nn.LSTM's dropout between layers
            x, c = LSTM(cfg.hidden_size, implementation=cfg.lstm_impl, dtype=dtype, name=f"lstm_{i}")(
                x, mask, None if carry is None else carry[i])
            carries.append(c)
        if not decode:
            return x, None, carries
        logits = nn.Dense(cfg.vocab_size, dtype=dtype, param_dtype=jnp.float32, name="decoder",
                          kernel_init=partitioned(_uniform(0.1), ("embed", "vocab")),
                          bias_init=partitioned(nn.initializers.zeros, ("vocab",)))(drop(x))
        return x, logits.astype(jnp.float32), carries


class Flair(nn.Module):
    """The trunk under its params key, both directions: {'forward': ids, 'backward': ids of the reversed text} ->
    {direction: (hidden, logits or None, carries)}."""

    config: FlairConfig

    @nn.compact
    def __call__(self, ids: dict, mask: dict, carry: dict | None = None, train: bool = False, decode: bool = True):
        return {d: CharLanguageModel(self.config, name=d)(ids[d], mask[d], None if carry is None else carry[d],
                                                          train, decode) for d in DIRECTIONS}


class FlairLanguageModels(nn.Module):
    """``{'flair': Flair}``: the params tree of a run and of a params directory."""

    config: FlairConfig

    @nn.compact
    def __call__(self, ids: dict, mask: dict, carry: dict | None = None, train: bool = False, decode: bool = True):
        return Flair(self.config, name="flair")(ids, mask, carry, train, decode)


def init_carry(cfg: FlairConfig, batch: int) -> dict:
    """Zero state of every layer of both directions: {'forward': [LstmCarry] * lstm_layers, 'backward': [...]}."""
    return {d: [zero_carry(batch, cfg.hidden_size) for _ in range(cfg.lstm_layers)] for d in DIRECTIONS}


__all__ = ["CharLanguageModel", "DIRECTIONS", "Flair", "FlairLanguageModels", "LstmCarry", "init_carry"]
