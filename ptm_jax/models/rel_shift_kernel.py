"""The relative shift of Transformer-XL / XLNet attention as a Pallas TPU kernel: one strided lane rotation per
(example, head) in place of XLA's reshape-slice-reshape.

``relative_attention.rel_shift`` moves the position scores ``bd`` [B, N, I, R] (query i against relative encoding
r, encodings ordered from distance R - I down to -I + 1) onto the key axis: out[i, j] = x[i, j + I - i] for
j < klen (Dai et al. 2019 Sec. 3.3, "efficient computation"; zihangdai/xlnet ``modeling.py`` ``rel_shift``).
Each row is a rotation of the lane axis by its own amount: on a TPU that is one ``pltpu.roll`` with a row stride
(row i rotated by R - I + i), where XLA lowers the reshape trick into three relayouts of the whole score array
forward and two pads backward (the largest cost of XLNet's train step by the TPU compiler's estimate,
docs/benchmarks.md "The relative shift as a kernel; dropout masks without a relayout").

The shift only moves values, so its transpose is the inverse rotation (row i by I - i) of the gradient padded
with zeros to R lanes. Mosaic rotates with a non-negative row stride only, so the transpose (the ``custom_vjp``
backward) runs on row-reversed arrays: XLA reverses the gradient's rows, the second kernel rotates reversed row
i' by 1 + i', and XLA reverses the result's rows back. Both kernels are exact (no arithmetic). They take float32
scores whose query length is a multiple of 8 and whose R and ``klen`` are multiples of 128 (``kernel_fits``);
anything else keeps XLA's path. Inside a mesh they run under ``shard_map`` (batch over the mesh axes of the
logical 'batch' axis, heads over those of 'act_heads', as ``models/splash.py``); on CPU in Pallas' interpreter,
which the tests use to check them against XLA's path.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

VMEM_BUDGET = 12 * 2**20
"""Bytes of one (example, head) block, input and output, double-buffered, that the kernel may hold in VMEM (under
the 16 MiB default scoped limit of a v5e TensorCore): 9.0 MiB for XLNet at 512 tokens with a 384-token memory;
larger blocks keep XLA's path."""


def kernel_fits(shape: tuple[int, ...], klen: int, dtype) -> bool:
    """Whether the kernels take scores of ``shape`` [B, N, I, R] cut to ``klen`` keys."""
    *_, i, r = shape
    block = 2 * 4 * i * (r + klen)  # float32 in and out, double-buffered
    return (jnp.dtype(dtype) == jnp.float32 and i % 8 == 0 and r % 128 == 0 and klen % 128 == 0
            and klen <= r - i and block <= VMEM_BUDGET)  # every key's score inside the row: no rotation wraps


def _shift_kernel(x_ref, o_ref, *, i: int, r: int, klen: int):
    from jax.experimental.pallas import tpu as pltpu

    y = pltpu.roll(x_ref[0, 0], shift=r - i, axis=1, stride=1, stride_axis=0)  # row t rotated by R - I + t
    o_ref[0, 0] = y[:, :klen]


def _unshift_kernel(g_ref, o_ref, *, i: int, r: int, klen: int):
    """The transpose of ``_shift_kernel`` on row-reversed arrays: row t of the input is row I - 1 - t of the
    gradient; padded with zeros to R lanes and rotated by 1 + t it is row I - 1 - t of the transpose (in row order
    the rotation would need row stride -1, which Mosaic does not take)."""
    from jax.experimental.pallas import tpu as pltpu

    g = jnp.concatenate([g_ref[0, 0], jnp.zeros((i, r - klen), g_ref.dtype)], axis=1)
    o_ref[0, 0] = pltpu.roll(g, shift=1, axis=1, stride=1, stride_axis=0)


def _call(kernel, x: jax.Array, i: int, r: int, klen: int, width_in: int, width_out: int, interpret: bool):
    from jax.experimental import pallas as pl

    b, n = x.shape[:2]
    return pl.pallas_call(
        functools.partial(kernel, i=i, r=r, klen=klen),
        out_shape=jax.ShapeDtypeStruct((b, n, i, width_out), x.dtype),
        grid=(b, n),
        in_specs=[pl.BlockSpec((1, 1, i, width_in), lambda bi, ni: (bi, ni, 0, 0))],
        out_specs=pl.BlockSpec((1, 1, i, width_out), lambda bi, ni: (bi, ni, 0, 0)),
        interpret=interpret,
        name="rel_shift" if kernel is _shift_kernel else "rel_unshift",
    )(x)


def _placement(b: int, n: int):
    """(abstract mesh, PartitionSpec of [B, N, ...]) of the trace in progress: examples over the mesh axes of the
    logical 'batch' axis, heads over those of 'act_heads'; None outside a mesh. Read in the forward trace and
    carried into the backward, which JAX may trace after the forward's mesh and axis-rule contexts have closed."""
    from ptm_jax.models.splash import mesh_axes

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return None
    return mesh, P(mesh_axes("batch", b, mesh), mesh_axes("act_heads", n, mesh), None, None)


def _per_device(fn, x: jax.Array, place) -> jax.Array:
    """``fn`` on each device's examples and heads of ``x`` [B, N, ...] (``place``: from ``_placement``)."""
    if place is None:
        return fn(x)
    mesh, spec = place
    return jax.shard_map(fn, mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False)(x)


def _shift(x: jax.Array, klen: int, interpret: bool, place) -> jax.Array:
    i, r = x.shape[-2:]
    return _per_device(lambda v: _call(_shift_kernel, v, i, r, klen, r, klen, interpret), x, place)


def _unshift_reversed(g_reversed: jax.Array, width: int, interpret: bool, place) -> jax.Array:
    """The transpose of ``_shift`` applied to a gradient whose rows are reversed; the result's rows are reversed
    too."""
    i, klen = g_reversed.shape[-2:]
    return _per_device(lambda v: _call(_unshift_kernel, v, i, width, klen, klen, width, interpret), g_reversed,
                       place)


def rel_shift_kernel(x_BNIR: jax.Array, klen: int, interpret: bool = False) -> jax.Array:
    """``relative_attention.rel_shift`` by the kernels (``kernel_fits`` must hold); under a mesh, each device
    shifts its own examples and heads. ``interpret``: Pallas' interpreter (CPU)."""
    return _shift_with_vjp(x_BNIR, klen, x_BNIR.shape[-1], interpret, _placement(*x_BNIR.shape[:2]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4))
def _shift_with_vjp(x, klen: int, width: int, interpret: bool, place):
    return _shift(x, klen, interpret, place)


def _shift_fwd(x, klen, width, interpret, place):
    return _shift(x, klen, interpret, place), None


def _shift_bwd(klen, width, interpret, place, _, g):
    with jax.named_scope("rel_unshift"):  # the reversals too, so that a profile or the estimate groups them here
        return (jnp.flip(_unshift_reversed(jnp.flip(g, -2), width, interpret, place), -2),)


_shift_with_vjp.defvjp(_shift_fwd, _shift_bwd)
