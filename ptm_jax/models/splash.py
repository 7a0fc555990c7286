"""Splash attention on TPU: the Pallas block-sparse flash kernel of
``jax.experimental.pallas.ops.tpu.splash_attention`` (the kernel MaxText runs for long sequences).

The mask is the kernel's static part (``CausalMask`` or ``FullMask``, one per head) and-ed with segment ids:
packed-row segments as they are, padding keys as a segment no query has (-1), so what the einsum reference
computes from an :class:`~ptm_jax.models.attention.AttentionMask` is what the kernel computes. The kernel takes
one example ([N, T, H]); it is vmapped over the batch, and inside a mesh it runs under ``shard_map``: batch over
the mesh axes of the logical 'batch' axis, heads over those of 'act_heads' (the rules of
``parallel/rules.py``), each device on its own rows and heads. Queries are scaled by 1/sqrt(H) before the
kernel (it applies no scale). Block sizes: 512 (or the whole length when shorter), the fused backward kernel.
Lengths must be multiples of 128. On CPU the kernel runs in Pallas' interpreter (``interpret=True``), which
the tests use to check it against the einsum path.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ptm_jax.errors import ConfigError

BLOCK = 512


def _block_sizes(t: int, s: int):
    from jax.experimental.pallas.ops.tpu.splash_attention import BlockSizes

    bq, bkv = min(BLOCK, t), min(BLOCK, s)
    return BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkv, block_q_dkv=bq, block_kv_dkv=bkv,
                      block_kv_dkv_compute=bkv, use_fused_bwd_kernel=True)


@functools.lru_cache(maxsize=32)
def _kernel(heads: int, t: int, s: int, causal: bool, interpret: bool):
    """The kernel, built outside any trace: it holds its mask tables as arrays, and made inside a trace (a
    scanned layer stack's) they would be that trace's tracers, which this cache would hand to the next trace
    (an UnexpectedTracerError). JAX's trace state is per thread, so a fresh thread has none."""
    from concurrent.futures import ThreadPoolExecutor

    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    def build():
        one = sa.CausalMask((t, s)) if causal else sa.FullMask((t, s))
        return sa.make_splash_mha(sa.MultiHeadMask([one] * heads), block_sizes=_block_sizes(t, s), head_shards=1,
                                  q_seq_shards=1, interpret=interpret)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(build).result()


def mesh_axes(logical: str, size: int, mesh) -> tuple[str, ...] | None:
    """Mesh axes of a logical axis under the rules in context, kept only if they divide ``size``."""
    names = nn.logical_to_mesh_axes((logical,))[0] if nn.get_logical_axis_rules() else None
    axes = tuple(a for a in ((names,) if isinstance(names, str) else (names or ())) if mesh.shape.get(a, 1) > 1)
    n = 1
    for a in axes:
        n *= mesh.shape[a]
    return axes if axes and size % n == 0 else None


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask) -> jax.Array:
    """q [B,T,N,H], k/v [B,S,N,H], an ``AttentionMask`` without a dense part -> [B,T,N,H]."""
    b, t, n, h = q.shape
    s = k.shape[1]
    if mask.dense is not None:
        raise ConfigError("model.attention_impl='splash' takes padding, causality and segments, not a dense mask "
                          "(decoding with a KV cache): use 'xla' or 'auto' there")
    if t % 128 or s % 128:
        raise ConfigError(f"model.attention_impl='splash' needs sequence lengths that are multiples of 128, got "
                          f"{t} queries and {s} keys: pad data.max_seq_length, or use attention_impl 'auto' or 'xla'")
    interpret = _platform_is_cpu()
    q_seg = k_seg = None
    if mask.segments is not None:
        q_seg, k_seg = (x.astype(jnp.int32) for x in mask.segments)
    if mask.key_valid is not None:
        q_seg = jnp.zeros((b, t), jnp.int32) if q_seg is None else q_seg
        k_seg = jnp.zeros((b, s), jnp.int32) if k_seg is None else k_seg
        k_seg = jnp.where(mask.key_valid.astype(bool), k_seg, -1)
    q = q * jnp.asarray(h ** -0.5, q.dtype)

    def run(q, k, v, q_seg, k_seg):
        from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

        kernel = _kernel(q.shape[2], t, s, mask.causal, interpret)
        qt, kt, vt = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # [b, N, T, H]
        if q_seg is None:
            out = jax.vmap(kernel)(qt, kt, vt)
        else:
            out = jax.vmap(lambda a, b_, c, qs, ks: kernel(a, b_, c, segment_ids=SegmentIds(qs, ks)))(
                qt, kt, vt, q_seg, k_seg)
        return jnp.swapaxes(out, 1, 2)

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return run(q, k, v, q_seg, k_seg)
    batch_axes = mesh_axes("batch", b, mesh)
    head_axes = mesh_axes("act_heads", n, mesh)
    qkv = P(batch_axes, None, head_axes, None)
    seg = P(batch_axes, None)
    if q_seg is None:
        return jax.shard_map(lambda a, b_, c: run(a, b_, c, None, None), mesh=mesh, in_specs=(qkv, qkv, qkv),
                             out_specs=qkv, check_vma=False)(q, k, v)
    return jax.shard_map(run, mesh=mesh, in_specs=(qkv, qkv, qkv, seg, seg), out_specs=qkv,
                         check_vma=False)(q, k, v, q_seg, k_seg)


def _platform_is_cpu() -> bool:
    from ptm_jax.models.layers import backend_platform

    return backend_platform() == "cpu"
