"""The MT-LSTM of CoVe as Flax modules (McCann et al. 2017 Sec. 3; salesforce/cove ``cove/encoder.py``).

Encoder (``MTLSTM``, the part CoVe keeps): ``encoder_layers`` bidirectional LSTM layers over the fixed input
vectors GloVe(w) [B, S, D], each layer one forward and one backward LSTM (``models/lstm.py``: PyTorch's gate order,
``recurrent_bias`` so that torch's ``bias_ih`` and ``bias_hh`` are two parameters), the next layer reading the
[forward; backward] outputs: CoVe(w) = MT-LSTM(GloVe(w)) is the top layer's [B, S, 2H]. salesforce/cove's
``MTLSTM`` is exactly this with two layers (``rnn1``, ``rnn2``: ``nn.LSTM(bidirectional=True)`` each, over
``pack_padded_sequence``): a right-padded row's backward pass starts at its last word, as the masked scan's does.

Decoder (Sec. 3, Luong et al. 2015's global attention with input feeding, as OpenNMT-py's which the paper
trains): ``decoder_layers`` stacked LSTM cells read [z_{t-1}; h~_{t-1}] (the previous target word's embedding
and the previous context-adjusted state), then

    alpha_t = softmax(H (W1 h_t^dec + b1))            over the source words (H: the top encoder states)
    h~_t    = tanh(W2 [H^T alpha_t; h_t^dec] + b2)
    p(y_t | X, y_<t) = softmax(W_out h~_t + b_out)

``decoder_init = 'encoder'`` starts decoder layer l from encoder layer l's final [forward; backward] (c, h) (OpenNMT's
bridge for a bidirectional encoder: ``decoder_size`` = 2 x ``hidden_size``); 'zeros' from zeros. Dropout (training
only): on the input vectors and between encoder layers, on the target embeddings, and on h~ before the softmax.

Params tree: ``{'cove': {'encoder': {'lstm_<i>': {'forward', 'backward'}}, 'decoder': {'embedding',
'lstm_<l>', 'attention', 'context', 'output'}}}``; torch's ``weight_ih_l0.T`` / ``weight_hh_l0.T`` / ``bias_ih_l0``
/ ``bias_hh_l0`` (``_reverse`` for backward) are each LSTM's ``kernel`` / ``recurrent_kernel`` / ``bias`` /
``recurrent_bias``, an ``nn.Linear``'s ``weight.T`` / ``bias`` a Dense's ``kernel`` / ``bias``.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.cove.config import CoveConfig
from ptm_jax.models.layers import dtype_of, partitioned
from ptm_jax.models.lstm import LSTM, LSTMWeights, LstmCarry

TRUNK = "cove"


class MTLSTMLayer(nn.Module):
    """One bidirectional layer: (x [B, S, D], mask [B, S]) -> ([B, S, 2H], (forward carry, backward carry))."""

    hidden_size: int
    implementation: str = "scan"
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x, mask):
        dt = dtype_of(self.dtype)
        f, cf = LSTM(self.hidden_size, recurrent_bias=True, implementation=self.implementation, dtype=dt,
                     name="forward")(x, mask)
        b, cb = LSTM(self.hidden_size, reverse=True, recurrent_bias=True, implementation=self.implementation,
                     dtype=dt, name="backward")(x, mask)
        return jnp.concatenate([f, b], axis=-1), (cf, cb)


class MTLSTM(nn.Module):
    """The encoder: (vectors [B, S, D], mask [B, S]) -> (every layer's outputs [[B, S, 2H]], final carries per
    layer)."""

    config: CoveConfig

    @nn.compact
    def __call__(self, vectors, mask, train: bool = False):
        cfg = self.config
        drop = nn.Dropout(cfg.dropout, deterministic=not train)
        x = vectors.astype(dtype_of(cfg.dtype))
        layers, finals = [], []
        for i in range(cfg.encoder_layers):
            x, carries = MTLSTMLayer(cfg.hidden_size, cfg.lstm_impl, cfg.dtype, name=f"lstm_{i}")(drop(x), mask)
            layers.append(x)
            finals.append(carries)
        return layers, finals


def _cell(weights: dict, x, state: LstmCarry) -> LstmCarry:
    """One LSTM step in ``models/lstm.py``'s layout (gates i, f, g, o)."""
    z = x @ weights["kernel"] + state.h @ weights["recurrent_kernel"] + weights["bias"] + weights["recurrent_bias"]
    i, f, g, o = jnp.split(z, 4, axis=-1)
    c = jax.nn.sigmoid(f) * state.c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return LstmCarry(c, jax.nn.sigmoid(o) * jnp.tanh(c))


class DenseWeights(nn.Module):
    """The parameters of one affine map ``x @ kernel + bias`` (torch ``nn.Linear``: ``kernel = weight.T``), declared
    without running it (the decoder uses them inside its scan)."""

    d_in: int
    d_out: int

    @nn.compact
    def __call__(self) -> dict:
        return {"kernel": self.param("kernel", partitioned(nn.initializers.lecun_normal(), ("embed", "mlp")),
                                     (self.d_in, self.d_out)),
                "bias": self.param("bias", partitioned(nn.initializers.zeros, ("mlp",)), (self.d_out,))}


class AttentionDecoder(nn.Module):
    """(previous target ids [B, T], encoder states [B, S, 2H], source mask [B, S], initial carries) -> logits
    [B, T, V] (teacher forcing: the gold previous word at every step)."""

    config: CoveConfig

    @nn.compact
    def __call__(self, prev_ids, states, src_mask, init: list | None, train: bool = False):
        cfg = self.config
        dd, enc = cfg.decoder_size, 2 * cfg.hidden_size
        drop = nn.Dropout(cfg.dropout, deterministic=not train)
        table = self.param("embedding", partitioned(nn.initializers.normal(0.1), ("vocab", "embed")),
                           (cfg.vocab_size, cfg.target_embed_dim))
        z = drop(jnp.take(table, prev_ids, axis=0))                                          # [B, T, E]
        cells = [LSTMWeights(dd, recurrent_bias=True, name=f"lstm_{l}")(
            (cfg.target_embed_dim + dd) if l == 0 else dd) for l in range(cfg.decoder_layers)]
        attn_w = DenseWeights(dd, enc, name="attention")()
        ctx_w = DenseWeights(enc + dd, dd, name="context")()
        b = prev_ids.shape[0]
        if init is None:
            init = [LstmCarry(jnp.zeros((b, dd), jnp.float32), jnp.zeros((b, dd), jnp.float32))
                    for _ in range(cfg.decoder_layers)]
        neg = jnp.asarray(-1e9, jnp.float32)
        valid = src_mask.astype(bool)

        def step(carry, z_t):
            layers, h_tilde = carry
            x = jnp.concatenate([z_t, h_tilde], axis=-1)
            new = []
            for l, w in enumerate(cells):
                s = _cell(w, x, layers[l])
                new.append(s)
                x = s.h
            q = x @ attn_w["kernel"] + attn_w["bias"]                                       # [B, 2H]
            scores = jnp.einsum("bsd,bd->bs", states, q)
            alpha = jax.nn.softmax(jnp.where(valid, scores, neg), axis=-1)
            ctx = jnp.einsum("bs,bsd->bd", alpha, states)
            h_tilde = jnp.tanh(jnp.concatenate([ctx, x], axis=-1) @ ctx_w["kernel"] + ctx_w["bias"])
            return (new, h_tilde), h_tilde

        start = (list(init), jnp.zeros((b, dd), jnp.float32))
        _, outs = jax.lax.scan(step, start, jnp.swapaxes(z, 0, 1).astype(jnp.float32))
        h = drop(jnp.swapaxes(outs, 0, 1))                                                  # [B, T, Dd]
        out = DenseWeights(dd, cfg.vocab_size, name="output")()
        return (h @ out["kernel"] + out["bias"]).astype(jnp.float32)


def bridge(cfg: CoveConfig, finals: list) -> list | None:
    """Decoder layer l's initial (c, h): encoder layer l's final [forward; backward] ('encoder'), or None."""
    if cfg.decoder_init != "encoder":
        return None
    out = []
    for l in range(cfg.decoder_layers):
        f, b = finals[l]
        out.append(LstmCarry(jnp.concatenate([f.c, b.c], -1), jnp.concatenate([f.h, b.h], -1)))
    return out


class Cove(nn.Module):
    """The encoder-decoder under its params key: (source vectors, source mask, previous target ids) -> logits."""

    config: CoveConfig

    def setup(self):
        self.encoder = MTLSTM(self.config)
        self.decoder = AttentionDecoder(self.config)

    def __call__(self, vectors, src_mask, prev_ids, train: bool = False):
        layers, finals = self.encoder(vectors, src_mask, train)
        return self.decoder(prev_ids, layers[-1].astype(jnp.float32), src_mask, bridge(self.config, finals), train)

    def encode(self, vectors, src_mask):
        return self.encoder(vectors, src_mask, False)[0]


class CoveTranslator(nn.Module):
    """``{'cove': Cove}``: the params tree of a run and of a params directory."""

    config: CoveConfig

    @nn.compact
    def __call__(self, vectors, src_mask, prev_ids, train: bool = False):
        return Cove(self.config, name=TRUNK)(vectors, src_mask, prev_ids, train)
