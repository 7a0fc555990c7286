"""Two-stream relative-position attention of XLNet (Yang et al. 2019, Sec. 2.3; zihangdai/xlnet modeling.py
``two_stream_rel_attn``), built on the relative attention of Transformer-XL (Dai et al. 2019, Sec. 3.3).

Shapes use the suffix convention ``x_BLND``: B batch, L query length, M memory length, K = M + L key length,
R = K + L relative positions, N heads, D head size, H model size, P predictions.

For query i (absolute key index M + i) and key j the score of one head is

    ( (q_i + r_w) . k_j                       content
    + (q_i + r_r) . r_{M+i-j}                 position (relative distance M + i - j)
    + (q_i + r_s) . seg_embed[s_ij] ) / sqrt(D)   segment (s_ij = 1 when i and j are in different segments)

The positional term is computed against all R encodings (distances K .. -L+1) and moved onto the diagonal
by ``rel_shift``; the relative attention itself (``rel_attention_core``, the projections, the encodings) is
Transformer-XL's, shared in ``ptm_jax/models/relative_attention.py``. Both streams read the same keys and values,
projected from ``[memory; content]``; the content stream's mask lets a token see itself, the query stream's mask
does not (the caller builds both). The query stream of P targets is scattered onto their L positions with ``target_mapping`` before the
scores and gathered back after, so every target scores from its own position (as the original does).

Everything is one explicit einsum path (no fused kernel): XLA fuses the three score terms, the mask and
the softmax. Scores and softmax run in float32 whatever the compute dtype.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import Dtype, LayerNorm, partitioned
from ptm_jax.models.relative_attention import HeadProjection, RelBiases, rel_attention_core


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
