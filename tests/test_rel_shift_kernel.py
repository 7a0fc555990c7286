"""The relative shift as a Pallas TPU kernel (ptm_jax/models/rel_shift_kernel.py), run here in Pallas'
interpreter: its output and its gradient equal XLA's reshape path (relative_attention.rel_shift_xla) bit for bit,
alone and under shard_map on a (2, 2, 2) mesh; which shapes the kernels take; and that rel_shift keeps XLA's path
off a TPU. The kernels compiled by the TPU compiler, and their modelled cost: tests/test_cost_model.py."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from ptm_jax.config import MeshConfig
from ptm_jax.models.rel_shift_kernel import kernel_fits, rel_shift_kernel
from ptm_jax.models.relative_attention import rel_shift, rel_shift_xla
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.parallel.rules import LOGICAL_RULES


def _pair(b, n, i, klen, seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(k1, (b, n, i, klen + i), jnp.float32),
            jax.random.normal(k2, (b, n, i, klen), jnp.float32))


@pytest.mark.parametrize("b,n,i,mem", [(2, 3, 8, 0), (1, 2, 16, 8), (2, 1, 8, 120), (1, 1, 128, 0)])
def test_kernel_and_its_gradient_equal_xla_reshape_path_bit_for_bit(b, n, i, mem):
    klen = mem + i
    x, g = _pair(b, n, i, klen)
    np.testing.assert_array_equal(np.asarray(rel_shift_kernel(x, klen, interpret=True)),
                                  np.asarray(rel_shift_xla(x, klen)))
    got = jax.vjp(lambda v: rel_shift_kernel(v, klen, interpret=True), x)[1](g)[0]
    want = jax.vjp(lambda v: rel_shift_xla(v, klen), x)[1](g)[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # the gradient is a placement, not a sum: every entry of g lands exactly once
    assert float(jnp.sum(got)) == pytest.approx(float(jnp.sum(g)), rel=1e-5)
    assert int(jnp.sum(got != 0)) == int(jnp.sum(g != 0))


def test_kernel_under_shard_map_on_the_2_2_2_mesh_equals_xla_path():
    mesh = make_mesh(MeshConfig(2, 2, 2))
    b, n, i, klen = 4, 2, 8, 24
    x, g = _pair(b, n, i, klen, seed=1)
    spec = NamedSharding(mesh, P(("data", "fsdp"), "tensor"))
    xs, gs = jax.device_put(x, spec), jax.device_put(g, spec)

    def loss(fn):
        def f(v, w):
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(LOGICAL_RULES):
                out = fn(v)
            return jnp.sum(out * w), out
        return jax.jit(jax.value_and_grad(f, has_aux=True))

    kernel = loss(lambda v: rel_shift_kernel(v, klen, interpret=True))
    program = str(jax.make_jaxpr(kernel)(xs, gs))
    # the shift and, for the gradient, its inverse, each on every device's own rows (the backward keeps the
    # forward's placement, though traced after its mesh and axis-rule contexts closed)
    assert program.count("pallas_call") == 2 and program.count("shard_map") == 2, program
    (_, out_k), grad_k = kernel(xs, gs)
    (_, out_x), grad_x = loss(lambda v: rel_shift_xla(v, klen))(xs, gs)
    np.testing.assert_array_equal(np.asarray(out_k), np.asarray(out_x))
    np.testing.assert_array_equal(np.asarray(grad_k), np.asarray(grad_x))


def test_kernel_takes_float32_scores_of_tpu_aligned_shapes_that_fit_in_vmem():
    assert kernel_fits((8, 12, 512, 1408), 896, jnp.float32)        # XLNet-base: 512 tokens, memory 384
    assert kernel_fits((2, 16, 512, 1408), 896, jnp.float32)        # XLNet-large
    assert not kernel_fits((8, 12, 512, 1408), 896, jnp.bfloat16)   # float32 scores only
    assert not kernel_fits((8, 12, 512, 897), 385, jnp.float32)     # R and klen not multiples of 128
    assert not kernel_fits((8, 12, 100, 1408), 1308, jnp.float32)   # queries not a multiple of 8
    assert not kernel_fits((1, 1, 128, 384), 384, jnp.float32)      # klen > R - I: a rotation would wrap around
    assert not kernel_fits((1, 1, 1024, 3072), 2048, jnp.float32)   # 2 x 4 x 1024 x 5120 B = 40 MiB of VMEM


def test_rel_shift_keeps_xla_path_off_a_tpu():
    x, _ = _pair(1, 2, 128, 128)
    assert kernel_fits(x.shape, 128, x.dtype)  # a TPU would take the kernels
    text = jax.jit(lambda v: rel_shift(v, 128)).lower(x).as_text()
    assert "tpu_custom_call" not in text and "pallas" not in text
    np.testing.assert_array_equal(np.asarray(rel_shift(x, 128)), np.asarray(rel_shift_xla(x, 128)))
