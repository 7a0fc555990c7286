"""Two-stream relative-position attention of XLNet (Yang et al. 2019, Sec. 2.3; zihangdai/xlnet modeling.py
``two_stream_rel_attn``), built on the relative attention of Transformer-XL (Dai et al. 2019, Sec. 3.3).

Shapes use the suffix convention ``x_BLND``: B batch, L query length, M memory length, K = M + L key length,
R = K + L relative positions, N heads, D head size, H model size, P predictions.

For query i (absolute key index M + i) and key j the score of one head is

    ( (q_i + r_w) . k_j                       content
    + (q_i + r_r) . r_{M+i-j}                 position (relative distance M + i - j)
    + (q_i + r_s) . seg_embed[s_ij] ) / sqrt(D)   segment (s_ij = 1 when i and j are in different segments)

The positional term is computed against all R encodings (distances K .. -L+1) and moved onto the diagonal
by ``rel_shift``. Both streams read the same keys and values, projected from ``[memory; content]``; the
content stream's mask lets a token see itself, the query stream's mask does not (the caller builds both).
The query stream of P targets is scattered onto their L positions with ``target_mapping`` before the
scores and gathered back after, so every target scores from its own position (as the original does).

Everything is one explicit einsum path (no fused kernel): XLA fuses the three score terms, the mask and
the softmax. Scores and softmax run in float32 whatever the compute dtype.
"""
from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import Dropout, dropout
from ptm_jax.models.layers import Dtype, LayerNorm, constrain, partitioned

NEG_INF = 1e30  # subtracted from blocked scores, as the reference does


class RelBiases(NamedTuple):
    """The three per-head score biases (each [N, D]); shared by all layers when ``untie_r`` is off."""

    r_w: jax.Array
    r_r: jax.Array
    r_s: jax.Array


def rel_shift(x_BNIR: jax.Array, klen: int) -> jax.Array:
    """[B, N, I, R] scores against relative encodings ordered from distance R - I down to -I + 1 ->
    [B, N, I, klen] with out[i, j] = x[i, j + I - i] (the encoding of distance klen - I + i - j)."""
    b, n, i, r = x_BNIR.shape
    x = x_BNIR.reshape(b, n, r, i)[:, :, 1:, :]
    return x.reshape(b, n, i, r - 1)[..., :klen]


def relative_encoding(qlen: int, klen: int, d_model: int, clamp_len: int, bi_data: bool = False
                      ) -> jax.Array:
    """Sinusoid encodings concat[sin, cos] of distances klen, klen-1, .., -qlen+1 (XLNet's 'bi' attention):
    [1, R, H], or [2, R, H] with ``bi_data`` (row 0 forward, row 1 the reversed stream's negated distances)."""
    inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, d_model, 2, dtype=jnp.float32) / d_model))
    fwd = jnp.arange(klen, -qlen, -1, dtype=jnp.float32)
    seqs = jnp.stack([fwd, -fwd]) if bi_data else fwd[None]
    if clamp_len > 0:
        seqs = jnp.clip(seqs, -clamp_len, clamp_len)
    angles = seqs[..., None] * inv_freq
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class HeadProjection(nn.Module):
    """One [H, N, D] kernel without bias, XLNet's q/k/v/r/o: ``__call__`` projects into heads, ``back`` (o)
    projects a head-shaped attention vector back to the model size."""

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
                       biases: RelBiases, seg_embed_SND: jax.Array, seg_diff_BLK: jax.Array | None,
                       mask_B1LK: jax.Array | None, *, dropout_rate: float, dropout_rng: jax.Array | None,
                       on_probs=None) -> jax.Array:
    """Relative multi-head attention of one stream -> [B, L, N, D]. ``r_PRND`` has P = 1 (shared by the
    batch) or B rows; ``seg_diff_BLK`` is True where query and key lie in different segments (None: no
    segment term); ``mask_B1LK`` is True where the query may attend (None: everywhere). Attention
    probabilities are dropped out when ``dropout_rng`` is given; ``on_probs`` receives them before that
    ([B, N, L, K] float32: ``ptm attention``)."""
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


class TwoStreamAttention(nn.Module):
    """Relative attention of the content stream h [B, L, H] and (optionally) the query stream g [B, P, H]
    over keys/values from ``[mem; h]``; each stream then gets o-projection -> dropout -> residual ->
    LayerNorm (post-LN), with the projections and the LayerNorm shared by both streams.

    ``biases`` are the layer's r_w/r_r/r_s biases when they are shared by all layers (``untie_r`` off);
    None creates this layer's own. ``seg_embed`` [2, N, D] always belongs to the layer."""

    num_heads: int
    head_dim: int
    init_std: float
    dropout_rate: float
    attention_dropout: float
    layer_norm_eps: float
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, h_BLH: jax.Array, g_BPH: jax.Array | None, mem_BMH: jax.Array, pos_PRH: jax.Array,
                 seg_diff_BLK: jax.Array | None, mask_h: jax.Array | None, mask_g: jax.Array | None,
                 target_mapping_BPL: jax.Array | None, biases: RelBiases | None, deterministic: bool
                 ) -> tuple[jax.Array, jax.Array | None]:
        n, d, dt = self.num_heads, self.head_dim, self.dtype
        d_model = h_BLH.shape[-1]

        def proj(name: str) -> HeadProjection:
            return HeadProjection(d_model, n, d, self.init_std, dt, name=name)

        def bias_param(name: str, shape: tuple[int, ...], axes: tuple[str, ...]) -> jax.Array:
            return self.param(name, partitioned(nn.initializers.normal(self.init_std), axes), shape, jnp.float32)

        if biases is None:
            biases = RelBiases(*(bias_param(f"{x}_bias", (n, d), ("heads", "kv")) for x in ("r_w", "r_r", "r_s")))
        seg_embed = bias_param("seg_embed", (2, n, d), ("types", "heads", "kv"))
        q_proj, o_proj = proj("q"), proj("o")
        norm = LayerNorm(self.layer_norm_eps, dtype=dt, name="layer_norm")
        drop = Dropout(self.dropout_rate)

        cat_BKH = jnp.concatenate([mem_BMH.astype(dt), h_BLH], axis=1)
        k, v = proj("k")(cat_BKH), proj("v")(cat_BKH)
        r = proj("r")(pos_PRH.astype(dt))

        def attend(q_BLND: jax.Array, mask: jax.Array | None, keep: bool = False) -> jax.Array:
            rng = None
            if self.attention_dropout > 0.0 and not deterministic:
                rng = self.make_rng("dropout")
            sow = None  # the content stream's probabilities, when the caller collects 'intermediates'
            if keep and self.is_mutable_collection("intermediates"):
                sow = lambda p: self.sow("intermediates", "attention_probs", p)
            return rel_attention_core(q_BLND, k, v, r, biases, seg_embed, seg_diff_BLK, mask,
                                      dropout_rate=self.attention_dropout, dropout_rng=rng, on_probs=sow)

        def post(x: jax.Array, vec: jax.Array) -> jax.Array:
            out = drop(o_proj.back(vec), deterministic=deterministic)
            return norm(x + out)

        h_out = post(h_BLH, attend(q_proj(h_BLH), mask_h, keep=True))
        if g_BPH is None:
            return h_out, None
        q_g = q_proj(g_BPH)
        if target_mapping_BPL is None:
            return h_out, post(g_BPH, attend(q_g, mask_g))
        tm = target_mapping_BPL.astype(dt)
        vec = attend(jnp.einsum("bpnd,bpl->blnd", q_g, tm), mask_g)  # each target queries from its position
        return h_out, post(g_BPH, jnp.einsum("blnd,bpl->bpnd", vec, tm))
