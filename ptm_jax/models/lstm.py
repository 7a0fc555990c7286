"""A long short-term memory layer on ``lax.scan``, with optional projection (LSTMP) and clipping.

One step (Hochreiter and Schmidhuber 1997; the forget gate of Gers et al. 2000; the projection of Sak et al. 2014,
"LSTM-based deep RNN architectures for large vocabulary speech recognition", as TensorFlow's ``LSTMCell`` with
``num_proj`` that allenai/bilm-tf uses, ``bilm/model.py``)::

    z = x_t @ kernel + h_{t-1} @ recurrent_kernel + bias            [B, 4H], gate blocks (i, f, g, o)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)               then clip to [-cell_clip, cell_clip]
    m_t = sigmoid(o) * tanh(c_t)
    h_t = m_t @ projection                                          (LSTMP only) then clip to [-proj_clip, proj_clip]
    h_t = m_t                                                       (no projection)

Weight layout (the one place it is written down; importers and weight-drop rely on it):

===================  ==========  ====================  ==================================================
parameter            shape       logical axes          meaning
===================  ==========  ====================  ==================================================
``kernel``           [D, 4H]     ('embed', 'mlp')      input-to-hidden, columns in gate blocks i, f, g, o
``recurrent_kernel`` [P, 4H]     ('embed', 'mlp')      hidden-to-hidden (P = proj_size, or H without one)
``bias``             [4H]        ('mlp',)              one bias (torch's b_ih + b_hh; TF's bias with the
                                                       forget bias added to the f block)
``recurrent_bias``   [4H]        ('mlp',)              ``recurrent_bias=True`` only: torch's b_hh, with
                                                       ``bias`` its b_ih (the gates add both)
``projection``       [H, P]      ('mlp', 'embed')      LSTMP only (torch's ``weight_hr.T``)
===================  ==========  ====================  ==================================================

The gate order is PyTorch's ``nn.LSTM`` order (i, f, g, o), so torch weights load as ``kernel = weight_ih.T``,
``recurrent_kernel = weight_hh.T``, ``bias = bias_ih + bias_hh``, ``projection = weight_hr.T``; with
``recurrent_bias=True`` the two biases stay two parameters (``bias = bias_ih``, ``recurrent_bias = bias_hh``), as
``nn.LSTM`` trains them: the function is the same, but each gets its own gradient step, so an optimizer moves their
sum twice as far as it moves one bias (what a model trained as in PyTorch needs: ULMFiT's AWD-LSTM). TensorFlow's
``LSTMCell`` orders its blocks (i, j, f, o) (j = g) and adds ``forget_bias`` (1.0) to f inside the cell:
importers reorder and fold it into ``bias`` (``families/elmo/weights.py``).

Weight-drop (DropConnect on the hidden-to-hidden matrix, Merity et al. 2018 Sec. 4.1) is applied from outside:
:class:`LSTM` takes ``recurrent_fn`` (called on ``recurrent_kernel`` once per call, before the scan, so one mask
serves every time step as in AWD-LSTM), and :func:`lstm_scan` takes the weights as a plain dict.

Masking: a step whose mask is False leaves the carry unchanged and outputs zeros. With ``reverse=True`` the scan
runs from the last position to the first, so a right-padded row starts its backward pass at its last real token
from the initial carry (the padding before it, in scan order, holds the carry). The final carry is returned so
that state can be carried across batches (``TrainState.carry``, as Transformer-XL's memory).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.errors import ConfigError
from ptm_jax.models.layers import accum_dtype, partitioned

GATES = ("i", "f", "g", "o")
"""Order of the four gate blocks along the 4H axis (PyTorch's)."""


class LstmCarry(NamedTuple):
    """State between steps: the cell ``c`` [B, H] and the (projected) output ``h`` [B, P]."""

    c: jax.Array
    h: jax.Array


def zero_carry(batch: int, hidden_size: int, proj_size: int | None = None, dtype: Any = jnp.float32) -> LstmCarry:
    return LstmCarry(jnp.zeros((batch, hidden_size), dtype), jnp.zeros((batch, proj_size or hidden_size), dtype))


def lstm_scan(weights: dict, inputs: jax.Array, mask: jax.Array | None = None, carry: LstmCarry | None = None, *,
              cell_clip: float | None = None, proj_clip: float | None = None, reverse: bool = False,
              dtype: Any = jnp.float32) -> tuple[jax.Array, LstmCarry]:
    """Runs the LSTM over time. ``weights``: the dict of the layout above; ``inputs`` [B, T, D] batch-major;
    ``mask`` [B, T] (True/1 = a real step; None: all real); ``carry``: the initial state (None: zeros).
    Returns (outputs [B, T, P] with zeros at masked steps, final carry). The gates and the carry stay float32
    (float64 when ``dtype`` is float64: ``layers.accum_dtype``)."""
    kernel, recurrent, bias = weights["kernel"], weights["recurrent_kernel"], weights["bias"]
    if "recurrent_bias" in weights:
        bias = bias + weights["recurrent_bias"]
    projection = weights.get("projection")
    batch = inputs.shape[0]
    hidden = kernel.shape[-1] // 4
    acc = accum_dtype(dtype)
    if carry is None:
        carry = zero_carry(batch, hidden, None if projection is None else projection.shape[-1], acc)
    if mask is None:
        mask = jnp.ones(inputs.shape[:2], bool)
    # the input projection of all steps at once (one large matmul); only h @ recurrent stays inside the scan
    x_proj = (jnp.einsum("btd,dg->btg", inputs.astype(dtype), kernel.astype(dtype))
              + bias.astype(dtype)).astype(acc)
    rec = recurrent.astype(dtype)
    proj = None if projection is None else projection.astype(dtype)

    def step(state: LstmCarry, xs):
        z_x, m = xs
        z = z_x + jnp.dot(state.h.astype(dtype), rec).astype(acc)
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * state.c + jax.nn.sigmoid(i) * jnp.tanh(g)
        if cell_clip is not None:
            c = jnp.clip(c, -cell_clip, cell_clip)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        if proj is not None:
            h = jnp.dot(h.astype(dtype), proj).astype(acc)
            if proj_clip is not None:
                h = jnp.clip(h, -proj_clip, proj_clip)
        m = m[:, None]
        new = LstmCarry(jnp.where(m, c, state.c), jnp.where(m, h, state.h))
        return new, jnp.where(m, h, 0.0)

    xs = (jnp.swapaxes(x_proj, 0, 1), jnp.swapaxes(mask.astype(bool), 0, 1))
    carry = LstmCarry(carry.c.astype(acc), carry.h.astype(acc))
    final, outputs = jax.lax.scan(step, carry, xs, reverse=reverse)
    return jnp.swapaxes(outputs, 0, 1).astype(dtype), final


IMPLEMENTATIONS = ("auto", "scan", "cudnn")


def cudnn_applies(weights: dict, cell_clip: float | None, proj_clip: float | None) -> bool:
    """cuDNN's LSTM has the plain cell only: no projection (LSTMP), no clipping."""
    return weights.get("projection") is None and cell_clip is None and proj_clip is None


def lstm_cudnn(weights: dict, inputs: jax.Array, mask: jax.Array | None = None, carry: LstmCarry | None = None,
               *, reverse: bool = False, core: str = "cudnn") -> tuple[jax.Array, LstmCarry]:
    """:func:`lstm_scan`'s contract (plain cell) through ``jax.experimental.rnn``: cuDNN's fused LSTM on GPU
    (``core='cudnn'``), or the same packing and flipping around jax's pure reference ``lstm_ref``
    (``core='reference'``, which runs on CPU: what the tests compare with the scan).

    Weights go into cuDNN's flat layout (W_ih = kernel.T, W_hh = recurrent_kernel.T, b_ih = bias, b_hh =
    recurrent_bias or 0; gate order i, f, g, o as here). ``mask`` must mark a prefix of each row (real steps
    first: every pipeline here pads on the right) and becomes ``seq_lengths``; ``reverse`` runs cuDNN forward over
    each row's real steps flipped in place (padding stays at the end), then flips the outputs back, so the backward
    pass starts at the last real step from the initial carry, as the scan does. A row with no real step keeps its
    carry. Computes in float32 (cuDNN's LSTM here is float32)."""
    from jax.experimental import rnn

    kernel, recurrent, bias = weights["kernel"], weights["recurrent_kernel"], weights["bias"]
    b, t, d = inputs.shape
    hidden = kernel.shape[-1] // 4
    f32 = jnp.float32
    if carry is None:
        carry = zero_carry(b, hidden)
    if mask is None:
        mask = jnp.ones((b, t), bool)
    mask = mask.astype(bool)
    lengths = jnp.sum(mask.astype(jnp.int32), axis=1)
    run_lengths = jnp.maximum(lengths, 1)
    x = inputs.astype(f32)
    flip = jax.vmap(lambda seq, n: jnp.roll(seq, t - n, axis=0)[::-1])  # real steps reversed, padding after
    if reverse:
        x = flip(x, run_lengths)
    b_hh = weights.get("recurrent_bias", jnp.zeros((4 * hidden,), f32))
    flat = jnp.concatenate([kernel.T.astype(f32).ravel(), recurrent.T.astype(f32).ravel(), bias.astype(f32),
                            b_hh.astype(f32)])
    h0, c0 = carry.h.astype(f32)[None], carry.c.astype(f32)[None]
    if core == "cudnn":
        y, h_n, c_n = rnn.lstm(x, h0, c0, flat, run_lengths, input_size=d, hidden_size=hidden, num_layers=1,
                               dropout=0.0, bidirectional=False)
    else:
        w_ih, w_hh, b_ih, b_hh = rnn.unpack_lstm_weights(flat, d, hidden, 1, False)
        y, h_n, c_n = rnn.lstm_ref(x, h0, c0, w_ih, w_hh, b_ih, b_hh, run_lengths, d, hidden, 1, 0.0, False)
    if reverse:
        y = flip(y, run_lengths)
    empty = (lengths == 0)[:, None]
    final = LstmCarry(jnp.where(empty, carry.c.astype(f32), c_n[0]), jnp.where(empty, carry.h.astype(f32), h_n[0]))
    return jnp.where(mask[..., None], y, 0.0).astype(inputs.dtype), final


def uniform_init(scale: float) -> Callable:
    """U(-scale, scale), PyTorch's ``nn.LSTM`` default with scale = 1/sqrt(H)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -scale, scale)

    return init


class LSTMWeights(nn.Module):
    """The parameters of one LSTM(P) layer in the layout above, without running it: ``(in_dim) -> weights``.
    A caller that runs several layers at once (ELMo's two directions, ``jax.vmap`` of :func:`lstm_scan` over
    their stacked weights) declares each layer's weights with it; :class:`LSTM` declares them the same way.

    ``forget_bias`` initialises the f block of ``bias`` (TensorFlow's LSTMCell adds 1.0 there; PyTorch 0).
    ``init_scale`` None: U(-1/sqrt(H), 1/sqrt(H)) as PyTorch. ``recurrent_bias``: a second bias, PyTorch's b_hh
    (module doc), initialised as ``bias``."""

    hidden_size: int
    proj_size: int | None = None
    cell_clip: float | None = None
    proj_clip: float | None = None
    reverse: bool = False
    forget_bias: float = 0.0
    init_scale: float | None = None
    recurrent_bias: bool = False
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def make_weights(self, in_dim: int) -> dict:
        hid, out = self.hidden_size, self.proj_size or self.hidden_size
        init = uniform_init(self.init_scale if self.init_scale is not None else hid ** -0.5)

        def bias_init(key, shape, dtype=jnp.float32):
            b = init(key, shape, dtype)
            return b.at[hid:2 * hid].add(self.forget_bias)

        def param(name, fn, axes, shape):
            return self.param(name, partitioned(fn, axes), shape, self.param_dtype)

        weights = {
            "kernel": param("kernel", init, ("embed", "mlp"), (in_dim, 4 * hid)),
            "recurrent_kernel": param("recurrent_kernel", init, ("embed", "mlp"), (out, 4 * hid)),
            "bias": param("bias", bias_init, ("mlp",), (4 * hid,)),
        }
        if self.recurrent_bias:
            weights["recurrent_bias"] = param("recurrent_bias", init, ("mlp",), (4 * hid,))
        if self.proj_size:
            weights["projection"] = param("projection", init, ("mlp", "embed"), (hid, out))
        return weights

    @nn.compact
    def __call__(self, in_dim: int) -> dict:
        return self.make_weights(in_dim)


class LSTM(LSTMWeights):
    """One LSTM(P) layer (one direction): ``(inputs [B, T, D], mask [B, T], carry) -> (outputs [B, T, P], carry)``
    (fields: :class:`LSTMWeights`). ``implementation``: 'scan' (``lstm_scan``), 'cudnn' (``lstm_cudnn``: GPU,
    plain cell, right-padded masks) or 'auto' (cuDNN on GPU where the cell is plain, the scan otherwise)."""

    implementation: str = "scan"

    @nn.compact
    def __call__(self, inputs: jax.Array, mask: jax.Array | None = None, carry: LstmCarry | None = None,
                 recurrent_fn: Callable[[jax.Array], jax.Array] | None = None) -> tuple[jax.Array, LstmCarry]:
        weights = self.make_weights(inputs.shape[-1])
        if recurrent_fn is not None:
            weights["recurrent_kernel"] = recurrent_fn(weights["recurrent_kernel"])
        impl = self.implementation
        if impl == "auto":
            from ptm_jax.models.layers import backend_platform

            plain = cudnn_applies(weights, self.cell_clip, self.proj_clip)
            impl = "cudnn" if plain and backend_platform() == "gpu" else "scan"
        if impl == "cudnn":
            if not cudnn_applies(weights, self.cell_clip, self.proj_clip):
                raise ConfigError("the cuDNN LSTM has no projection or clipping: use the scan implementation")
            return lstm_cudnn(weights, inputs, mask, carry, reverse=self.reverse)
        return lstm_scan(weights, inputs, mask, carry, cell_clip=self.cell_clip, proj_clip=self.proj_clip,
                         reverse=self.reverse, dtype=self.dtype)
