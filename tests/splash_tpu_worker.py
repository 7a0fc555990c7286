"""Compiles splash attention (models/splash.py) for a 4-chip TPU v5e slice with the real TPU compiler (libtpu)
on this CPU machine: ``python tests/splash_tpu_worker.py`` prints one JSON line. Run in a process of its own by
tests/test_splash_tpu_compile.py, with libtpu on PYTHONPATH, so the CPU tests never load it."""
from __future__ import annotations

import json
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ptm_jax.models.attention import AttentionMask, dot_product_attention, implementation_for
from ptm_jax.parallel.rules import LOGICAL_RULES

B, T, N, H = 8, 2048, 4, 64


def main() -> None:
    devices = topologies.get_topology_desc("v5e:2x2", "tpu").devices
    mesh = Mesh(np.array(devices).reshape(2, 1, 2), ("data", "fsdp", "tensor"))
    qkv = jax.ShapeDtypeStruct((B, T, N, H), jnp.bfloat16, sharding=NamedSharding(mesh, P("data", None, "tensor")))
    seg = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=NamedSharding(mesh, P("data")))

    def compiled(impl: str):
        def loss(q, k, v, s):
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(LOGICAL_RULES):
                mask = AttentionMask(causal=True, segments=(s, s))
                out = dot_product_attention(q, k, v, mask, dropout_rate=0.0, deterministic=True, dropout_rng=None,
                                            implementation=impl)
            return jnp.sum(out.astype(jnp.float32))

        t0 = time.perf_counter()
        c = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(qkv, qkv, qkv, seg).compile()
        return {"mosaic_calls": c.as_text().count("tpu_custom_call"),
                "temp_bytes": int(c.memory_analysis().temp_size_in_bytes),
                "compile_s": round(time.perf_counter() - t0, 1)}

    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):  # what auto picks for this shape on this slice
        spec = jax.ShapeDtypeStruct((B, T, N, H), jnp.bfloat16)
        picked = implementation_for("auto", spec, spec, AttentionMask(causal=True), False)
    print(json.dumps({"device_kind": devices[0].device_kind, "auto": picked, "splash": compiled("splash"),
                      "xla": compiled("xla")}))


if __name__ == "__main__":
    main()
