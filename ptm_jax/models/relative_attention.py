"""Relative-position attention with a segment-level memory (Transformer-XL, Dai et al. 2019 Sec. 3.2-3.3;
kimiyoung/transformer-xl ``mem_transformer.py``), the pieces Transformer-XL and XLNet (Yang et al. 2019 Sec. 2.3,
zihangdai/xlnet ``modeling.py``) share.

Shapes use the suffix convention ``x_BLND``: B batch, L query length, M memory length, K = M + L key length,
R relative positions, N heads, D head size, H model size.

For query i (absolute key index M + i) and key j the score of one head is (Sec. 3.3, terms (a)-(d))

    ( (q_i + u) . k_j                       content, (a) + (c): u = ``r_w``
    + (q_i + v) . r_{M+i-j}                 position, (b) + (d): v = ``r_r``, r = W_R R of the sinusoids R
    [+ (q_i + r_s) . seg_embed[s_ij]]       XLNet's relative segment term (absent for Transformer-XL)
    ) / sqrt(D)

The position term is computed against all R encodings (distances K .. -L+1 for XLNet's bidirectional attention,
K .. 0 for a causal model) and moved onto the diagonal by ``rel_shift``: entries a causal mask keeps are exact,
the others are garbage that the mask removes. Memory (``cache_mem``) is the last ``mem_len`` layer inputs of
[memory; this segment], never differentiated (Sec. 3.2: SG(.)). One explicit einsum path, scores and softmax in
float32 whatever the compute dtype.
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import dropout
from ptm_jax.models.layers import Dtype, constrain, partitioned

NEG_INF = 1e30  # subtracted from blocked scores, as the references do


class RelBiases(NamedTuple):
    """The per-head score biases (each [N, D]): u (``r_w``), v (``r_r``) and XLNet's segment bias (``r_s``, None
    without segments); shared by all layers when the model unties none (``untie_r`` off)."""

    r_w: jax.Array
    r_r: jax.Array
    r_s: jax.Array | None = None


def rel_shift(x_BNIR: jax.Array, klen: int) -> jax.Array:
    """[B, N, I, R] scores against relative encodings ordered from distance R - I down to -I + 1 ->
    [B, N, I, klen] with out[i, j] = x[i, j + I - i] (the encoding of distance klen - I + i - j).

    On a TPU, where the shapes allow (``rel_shift_kernel.kernel_fits``), the shift and its gradient are Pallas
    kernels (``models/rel_shift_kernel.py``: one strided lane rotation per example and head, where XLA relayouts
    the whole score array three times); elsewhere ``rel_shift_xla``. Both are exact."""
    from ptm_jax.models.layers import backend_platform
    from ptm_jax.models.rel_shift_kernel import kernel_fits, rel_shift_kernel

    if backend_platform() == "tpu" and kernel_fits(x_BNIR.shape, klen, x_BNIR.dtype):
        return rel_shift_kernel(x_BNIR, klen)
    return rel_shift_xla(x_BNIR, klen)


def rel_shift_xla(x_BNIR: jax.Array, klen: int) -> jax.Array:
    """``rel_shift`` by reshapes: the [I, R] scores read as [R, I], the first row dropped, read as [I, R - 1]."""
    b, n, i, r = x_BNIR.shape
    x = x_BNIR.reshape(b, n, r, i)[:, :, 1:, :]
    return x.reshape(b, n, i, r - 1)[..., :klen]


def relative_encoding(qlen: int, klen: int, d_model: int, clamp_len: int, bi_data: bool = False,
                      attn_type: Literal["bi", "uni"] = "bi") -> jax.Array:
    """Sinusoid encodings concat[sin, cos] (Vaswani et al. 2017) of the relative distances ``rel_shift`` reads:
    klen, klen-1, .., -qlen+1 for bidirectional attention ('bi', XLNet), klen, .., 0 for causal attention ('uni',
    Transformer-XL); distances clamped to ``clamp_len`` when it is > 0. [1, R, H], or [2, R, H] with ``bi_data``
    (row 0 forward, row 1 the reversed stream's negated distances)."""
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, d_model, 2, dtype=jnp.float32) / d_model))
    end = -qlen if attn_type == "bi" else -1
    fwd = jnp.arange(klen, end, -1, dtype=jnp.float32)
    seqs = jnp.stack([fwd, -fwd]) if bi_data else fwd[None]
    if clamp_len > 0:
        seqs = jnp.clip(seqs, -clamp_len, clamp_len)
    angles = seqs[..., None] * inv_freq
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def cache_mem(h_BLH: jax.Array, mem_BMH: jax.Array, mem_len: int, reuse_len: int = 0) -> jax.Array | None:
    """The memory of the next segment: the last ``mem_len`` of [mem; first ``reuse_len`` (0: all) of this segment's
    layer input], without gradient. None when ``mem_len`` is 0."""
    if mem_len <= 0:
        return None
    cur = h_BLH[:, :reuse_len] if reuse_len > 0 else h_BLH
    return jax.lax.stop_gradient(jnp.concatenate([mem_BMH.astype(cur.dtype), cur], axis=1)[:, -mem_len:])


class HeadProjection(nn.Module):
    """One [H, N, D] kernel without bias (the q/k/v/r/o projections): ``__call__`` projects into heads, ``back``
    (o) projects a head-shaped attention vector back to the model size."""

    d_model: int
    num_heads: int
    head_dim: int
    init_std: float
    dtype: Dtype = jnp.float32

    def setup(self) -> None:
        init = partitioned(nn.initializers.normal(self.init_std), ("embed", "heads", "kv"))
        self.kernel = self.param("kernel", init, (self.d_model, self.num_heads, self.head_dim), jnp.float32)

    def __call__(self, x_BLH: jax.Array) -> jax.Array:
        x = jnp.einsum("blh,hnd->blnd", x_BLH, self.kernel.astype(self.dtype))
        return constrain(x, ("batch", "length", "act_heads", "act_kv"))

    def back(self, x_BLND: jax.Array) -> jax.Array:
        return jnp.einsum("blnd,hnd->blh", x_BLND, self.kernel.astype(self.dtype))


def rel_attention_core(q_BLND: jax.Array, k_BKND: jax.Array, v_BKND: jax.Array, r_PRND: jax.Array,
                       biases: RelBiases, seg_embed_SND: jax.Array | None, seg_diff_BLK: jax.Array | None,
                       mask_B1LK: jax.Array | None, *, dropout_rate: float, dropout_rng: jax.Array | None,
                       on_probs=None) -> jax.Array:
    """Relative multi-head attention of one query stream -> [B, L, N, D]. ``r_PRND`` has P = 1 (shared by the
    batch) or B rows; ``seg_diff_BLK`` is True where query and key lie in different segments (None: no segment
    term); ``mask_B1LK`` is True where the query may attend (None: everywhere). Attention probabilities are
    dropped out when ``dropout_rng`` is given; ``on_probs`` receives them before that ([B, N, L, K] float32:
    ``ptm attention``)."""
    f32, dt = jnp.float32, v_BKND.dtype
    scale = q_BLND.shape[-1] ** -0.5
    klen = k_BKND.shape[1]
    ac = jnp.einsum("blnd,bknd->bnlk", q_BLND + biases.r_w.astype(dt), k_BKND, preferred_element_type=f32)
    q_r = q_BLND + biases.r_r.astype(dt)
    if r_PRND.shape[0] == 1:
        bd = jnp.einsum("blnd,rnd->bnlr", q_r, r_PRND[0], preferred_element_type=f32)
    else:
        bd = jnp.einsum("blnd,brnd->bnlr", q_r, r_PRND, preferred_element_type=f32)
    score = ac + rel_shift(bd, klen)
    if seg_diff_BLK is not None:
        ef = jnp.einsum("blnd,snd->bnls", q_BLND + biases.r_s.astype(dt), seg_embed_SND.astype(dt),
                        preferred_element_type=f32)
        score = score + jnp.where(seg_diff_BLK[:, None], ef[..., 1:], ef[..., :1])
    score = score * scale
    if mask_B1LK is not None:
        score = score - NEG_INF * (1.0 - mask_B1LK.astype(f32))
    probs = jax.nn.softmax(score, axis=-1)
    if on_probs is not None:
        on_probs(probs)
    if dropout_rng is not None and dropout_rate > 0.0:
        probs = dropout(probs, dropout_rate, dropout_rng)
    return jnp.einsum("bnlk,bknd->blnd", probs.astype(dt), v_BKND)
