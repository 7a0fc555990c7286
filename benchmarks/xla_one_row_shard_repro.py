"""Standalone reproduction (pure JAX, no ptm_jax) of the wrong gradients XLA's SPMD partitioner produced for
ptm_jax's MLM head with one row per batch shard, kept for an upstream report.

    python benchmarks/xla_one_row_shard_repro.py

Two dense layers with a nonlinearity between them, a [4, 10, 32] batch sharded over ('data', 'fsdp') of a
(2, 2, 2) CPU mesh (one row per shard), kernels sharded ('fsdp', 'tensor') / ('tensor', 'fsdp'). The gradient
of the first kernel differs from the single-device one by about 100% of its size unless the activation
between the layers carries a sharding constraint. Both partitioners (Shardy, GSPMD) give the same wrong
numbers on jax 0.10.2; 8 rows, or the constraint, give the right ones. The script prints the relative error of
each variant and exits 1 if the constrained variant is wrong too.
"""
from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def relative_error(batch: int, constrain_activation: bool, rows: int = 10, hidden: int = 32, vocab: int = 64
                   ) -> float:
    mesh = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    rows_spec = NamedSharding(mesh, P(("data", "fsdp"), None, None))
    rng = np.random.default_rng(0)
    h = rng.normal(size=(batch, rows, hidden)).astype(np.float32)
    kernel = (0.1 * rng.normal(size=(hidden, hidden))).astype(np.float32)
    table = rng.normal(size=(vocab, hidden)).astype(np.float32)

    def loss(kernel, table, h):
        x = jnp.einsum("bph,hk->bpk", jax.lax.with_sharding_constraint(h, rows_spec), kernel)
        if constrain_activation:
            x = jax.lax.with_sharding_constraint(x, rows_spec)
        x = jnp.tanh(x)
        if constrain_activation:
            x = jax.lax.with_sharding_constraint(x, rows_spec)
        return jnp.sum(jnp.sin(jnp.einsum("bph,vh->bpv", x, table)))

    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(jax.jit(jax.grad(loss))(kernel, table, h))
    shardings = (NamedSharding(mesh, P("fsdp", "tensor")), NamedSharding(mesh, P("tensor", "fsdp")), rows_spec)
    args = [jax.device_put(a, s) for a, s in zip((kernel, table, h), shardings)]
    got = np.asarray(jax.jit(jax.grad(loss), in_shardings=shardings)(*args))
    return float(np.abs(got - want).max() / np.abs(want).max())


def main() -> int:
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, shardy={jax.config.jax_use_shardy_partitioner}")
    worst_fixed = 0.0
    for batch in (4, 8):
        for constrained in (False, True):
            err = relative_error(batch, constrained)
            print(f"batch {batch} ({batch // 4} row(s) per batch shard), activation constrained={constrained}: "
                  f"relative error of the kernel gradient {err:.3g}")
            if constrained:
                worst_fixed = max(worst_fixed, err)
    return 0 if worst_fixed < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
