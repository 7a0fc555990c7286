"""Attention: one entry point over the einsum reference, ``jax.nn.dot_product_attention`` (XLA or cuDNN) and
Pallas splash attention on TPU.

Scaled dot-product attention (Vaswani et al. 2017, Sec. 3.2.1). Which keys a query sees is described by an
:class:`AttentionMask` holding the structure as such, never pre-broadcast to [B, N, T, S]:

- ``key_valid`` [B, S]: padding keys (BERT's ``input_mask``); cuDNN gets it as ``key_value_seq_lengths``, which
  assumes real tokens come first in each row (true of every pipeline here: rows are padded at the end);
- ``causal``: key j visible to query i only if j <= i (``is_causal``; cuDNN and splash skip the upper triangle);
- ``segments`` ([B, T], [B, S]): packed rows, a query sees only keys of its own segment id (padding shares id 0,
  so no softmax row is empty);
- ``dense``: any other boolean mask broadcastable to [B, N, T, S] (decoding against a KV cache).

Implementations (``model.attention_impl``; ``implementation_for`` resolves ``auto``):

- ``einsum``: the reference; float32 logits and probabilities, explicit [B, N, T, S]. It is also the path of
  attention-probability dropout on every backend except an explicit ``cudnn`` (see below);
- ``xla``: ``jax.nn.dot_product_attention(implementation="xla")``;
- ``cudnn``: cuDNN flash attention through ``jax.nn.dot_product_attention``; with attention dropout active it
  calls cuDNN's fused attention with dropout (``jax._src.cudnn.fused_attention_stablehlo``: the public function
  has no dropout argument). Its masks come from a seed fixed when the step is traced plus a counter that XLA
  advances on every execution, not from the run's JAX key: a resumed run draws other masks than an
  uninterrupted one, so ``auto`` never picks it (docs/architecture.md, "Attention paths");
- ``splash``: ``jax.experimental.pallas.ops.tpu.splash_attention`` (``models/splash.py``); TPU only, no
  dropout, no dense mask.

Outputs at query positions whose row the mask leaves empty are unspecified (finite); every caller here
leaves no real query's row empty.
"""
from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from ptm_jax.errors import ConfigError
from ptm_jax.models.dropout import dropout
from ptm_jax.models.layers import backend_platform, partitioned

IMPLEMENTATIONS = ("auto", "einsum", "xla", "cudnn", "splash")
SPLASH_MIN_LENGTH = 1024
"""``auto`` takes splash attention on TPU from this sequence length on (XLA's fused attention is as fast below)."""


@flax.struct.dataclass
class AttentionMask:
    """Which keys each query sees; the fields combine with AND. None everywhere: every key."""

    key_valid: jax.Array | None = None
    """[B, S] bool, False at padding keys."""
    segments: tuple[jax.Array, jax.Array] | None = None
    """(query ids [B, T], key ids [B, S]): a query sees keys of its own id only."""
    dense: jax.Array | None = None
    """bool, broadcastable to [B, N, T, S]."""
    causal: bool = flax.struct.field(pytree_node=False, default=False)

    def dense_mask(self, t: int, s: int) -> jax.Array | None:
        """The whole mask as a boolean array broadcastable to [B, N, T, S] (None: nothing masked)."""
        m = self.dense_mask_without_causal()
        if self.causal:
            tri = jnp.tril(jnp.ones((t, s), dtype=bool), k=s - t)[None, None]
            m = tri if m is None else m & tri
        return m

    def dense_mask_without_causal(self) -> jax.Array | None:
        m = None
        if self.key_valid is not None:
            m = self.key_valid.astype(bool)[:, None, None, :]
        if self.segments is not None:
            q, k = self.segments
            same = (q[:, :, None] == k[:, None, :])[:, None]
            m = same if m is None else m & same
        if self.dense is not None:
            m = self.dense if m is None else m & self.dense
        return m

    def kv_lengths(self) -> jax.Array | None:
        """[B] int32 count of real keys (``key_valid`` holds real tokens first)."""
        if self.key_valid is None:
            return None
        return jnp.sum(self.key_valid.astype(jnp.int32), axis=-1)


def padding_mask(input_mask: jax.Array) -> AttentionMask:
    """[B, S] (1 = real token) -> keys at 0 are invisible."""
    return AttentionMask(key_valid=input_mask.astype(bool))


def segment_mask(segment_ids: jax.Array) -> AttentionMask:
    """Packed rows: [B, S] segment ids (0 = padding) -> a token sees only its own segment (padding sees padding)."""
    return AttentionMask(segments=(segment_ids, segment_ids))


def as_mask(mask: AttentionMask | jax.Array | None) -> AttentionMask:
    """A boolean array (broadcastable to [B, N, T, S]) or None -> :class:`AttentionMask`."""
    if isinstance(mask, AttentionMask):
        return mask
    return AttentionMask(dense=None if mask is None else mask.astype(bool))


def attention_probs(q: jax.Array, k: jax.Array, mask: AttentionMask | jax.Array | None) -> jax.Array:
    """q [B,T,N,H], k [B,S,N,H] -> float32 softmax(q k^T / sqrt(H)) [B,N,T,S], blocked keys at probability 0."""
    dense = as_mask(mask).dense_mask(q.shape[1], k.shape[1])
    logits = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32) * q.shape[-1] ** -0.5
    if dense is not None:
        logits = jnp.where(dense, logits, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(logits, axis=-1)


def sow_probs(module: nn.Module, q: jax.Array, k: jax.Array, mask: AttentionMask | jax.Array | None) -> None:
    """Keeps the attention probabilities in the 'intermediates' collection as ``attention_probs`` when the caller
    made it mutable (``ptm attention``: ``evaluate/attention_maps.py``); a no-op otherwise."""
    if module.is_mutable_collection("intermediates"):
        module.sow("intermediates", "attention_probs", attention_probs(q, k, mask))


def cudnn_supports(q: jax.Array, k: jax.Array, mask: AttentionMask) -> bool:
    """The configurations cuDNN flash attention takes (jax's ``check_layout`` / ``check_is_flash_attention``):
    bf16/fp16, head dim a multiple of 8 up to 128 (256 from Hopper on: not checked here), a full-length mask
    only with even lengths."""
    h = q.shape[-1]
    if q.dtype not in (jnp.bfloat16, jnp.float16) or h % 8 or h > 128:
        return False
    has_bias = mask.segments is not None or mask.dense is not None
    return not (has_bias and (q.shape[1] % 2 or k.shape[1] % 2))


def implementation_for(requested: str, q: jax.Array, k: jax.Array, mask: AttentionMask,
                       dropout_active: bool, platform: str | None = None) -> str:
    """The path that runs: ``requested`` unless it is 'auto'. Auto: einsum under attention dropout (the one
    path with masks drawn from the run's key on every backend); else cuDNN on GPU where it supports the
    shapes, splash on TPU from ``SPLASH_MIN_LENGTH`` (lengths a multiple of 128, no dense mask), XLA else.
    ``platform`` None: ``backend_platform()``."""
    if requested not in IMPLEMENTATIONS:
        raise ConfigError(f"model.attention_impl={requested!r}: expected one of {', '.join(IMPLEMENTATIONS)}")
    if requested != "auto":
        return requested
    if dropout_active:
        return "einsum"
    platform = platform or backend_platform()
    if platform == "gpu" and cudnn_supports(q, k, mask):
        return "cudnn"
    if (platform == "tpu" and mask.dense is None and q.shape[1] >= SPLASH_MIN_LENGTH
            and q.shape[1] % 128 == 0 and k.shape[1] % 128 == 0):
        return "splash"
    return "xla"


def _einsum_attention(q, k, v, mask: AttentionMask, rate: float, rng: jax.Array | None) -> jax.Array:
    probs = attention_probs(q, k, mask)
    if rng is not None and rate > 0.0:
        probs = dropout(probs, rate, rng)
    return jnp.einsum("bnts,bsnh->btnh", probs.astype(v.dtype), v)


def _cudnn_with_dropout(q, k, v, mask: AttentionMask, rate: float, seed: int) -> jax.Array:
    """cuDNN's fused attention with dropout on the probabilities (the function behind
    ``jax.nn.dot_product_attention(implementation='cudnn')``, which does not expose ``dropout_rate``)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa

    b, t, s = q.shape[0], q.shape[1], k.shape[1]
    kv_len = mask.kv_lengths()
    mask_type = fa.MaskType.CAUSAL if mask.causal else fa.MaskType.NO_MASK
    q_len = None
    if kv_len is not None:
        q_len = jnp.full((b,), t, jnp.int32)
        mask_type = fa.MaskType.PADDING_CAUSAL if mask.causal else fa.MaskType.PADDING
    bias_mask = AttentionMask(segments=mask.segments, dense=mask.dense).dense_mask_without_causal()
    if bias_mask is not None:
        bias_mask = jnp.broadcast_to(bias_mask, (bias_mask.shape[0], bias_mask.shape[1], t, s))
    return fa.dot_product_attention(q, k, v, None, bias_mask, q_len, kv_len, scale=q.shape[-1] ** -0.5,
                                    mask_type=mask_type, seed=seed, dropout_rate=rate, qkv_layout="BTNH")


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: AttentionMask | jax.Array | None,
    *,
    dropout_rate: float,
    deterministic: bool,
    dropout_rng: jax.Array | None,
    implementation: str = "auto",
    cudnn_seed: int = 0,
) -> jax.Array:
    """q [B,T,N,H], k/v [B,S,N,H] -> [B,T,N,H]. ``mask``: an :class:`AttentionMask` (or a boolean array
    broadcastable to [B,N,T,S]). ``cudnn_seed``: the static seed of cuDNN's fused dropout (one per call site)."""
    mask = as_mask(mask)
    active = dropout_rate > 0.0 and not deterministic
    impl = implementation_for(implementation, q, k, mask, active)
    if impl == "einsum":
        return _einsum_attention(q, k, v, mask, dropout_rate if active else 0.0, dropout_rng)
    if impl == "cudnn" and active:
        return _cudnn_with_dropout(q, k, v, mask, dropout_rate, cudnn_seed)
    if active:
        raise ConfigError(f"model.attention_impl={impl!r} has no attention-probability dropout: set "
                          "model.attention_dropout=0.0, or attention_impl 'auto', 'einsum' or 'cudnn'")
    if impl == "splash":
        from ptm_jax.models.splash import splash_attention

        return splash_attention(q, k, v, mask)
    if impl == "xla":
        return jax.nn.dot_product_attention(q, k, v, mask=mask.dense_mask_without_causal(), is_causal=mask.causal,
                                            implementation="xla")
    # cudnn: padding as lengths, packed segments / a dense mask as a bias of [B|1, 1, T, S]
    bias_mask = AttentionMask(segments=mask.segments, dense=mask.dense).dense_mask_without_causal()
    if bias_mask is not None:
        bias_mask = jnp.broadcast_to(bias_mask, (bias_mask.shape[0], bias_mask.shape[1], q.shape[1], k.shape[1]))
    return jax.nn.dot_product_attention(q, k, v, mask=bias_mask, is_causal=mask.causal,
                                        key_value_seq_lengths=mask.kv_lengths(), implementation="cudnn")


def call_site_seed(module: nn.Module) -> int:
    """A static seed per module path for cuDNN's fused dropout (so two layers never share a mask stream)."""
    import zlib

    return zlib.crc32("/".join(module.scope.path).encode()) & 0x7FFFFFFF


class SelfAttention(nn.Module):
    """Multi-head self-attention with q/k/v/o projections named ('embed', 'heads', 'kv')."""

    num_heads: int
    head_dim: int
    dropout_rate: float
    init_std: float
    dtype: jnp.dtype = jnp.float32
    implementation: str = "auto"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, mask: AttentionMask | jax.Array | None, deterministic: bool) -> jax.Array:
        def proj(name: str) -> jax.Array:
            return nn.DenseGeneral(
                (self.num_heads, self.head_dim),
                use_bias=self.use_bias,
                dtype=self.dtype,
                param_dtype=jnp.float32,
                kernel_init=partitioned(nn.initializers.truncated_normal(self.init_std), ("embed", "heads", "kv")),
                bias_init=partitioned(nn.initializers.zeros, ("heads", "kv")),
                name=name,
            )(x)

        q, k, v = proj("query"), proj("key"), proj("value")
        q = nn.with_logical_constraint(q, ("batch", "length", "act_heads", "act_kv"))
        sow_probs(self, q, k, mask)
        rng = None
        if self.dropout_rate > 0.0 and not deterministic:
            rng = self.make_rng("dropout")
        out = dot_product_attention(q, k, v, mask, dropout_rate=self.dropout_rate, deterministic=deterministic,
                                    dropout_rng=rng, implementation=self.implementation,
                                    cudnn_seed=call_site_seed(self))
        return nn.DenseGeneral(
            x.shape[-1],
            axis=(-2, -1),
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=jnp.float32,
            kernel_init=partitioned(nn.initializers.truncated_normal(self.init_std), ("heads", "kv", "embed")),
            bias_init=partitioned(nn.initializers.zeros, ("embed",)),
            name="output",
        )(out)
