"""Compiles small programs for TPU slices with the real TPU compiler (libtpu) on this CPU machine and prints, as
one JSON line, what ``bench/cost_model.py`` estimates for each (tests/test_cost_model.py reads it). It runs in a
process of its own with libtpu on PYTHONPATH (tests/libtpu_env.py), so the CPU tests never load libtpu.

  python tests/cost_model_worker.py
"""
from __future__ import annotations

import functools
import json
import os
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ptm_jax.bench import cost_model

TOPOLOGIES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
N = 8192  # a square bf16 matmul large enough to be compute-bound on every chip


@functools.lru_cache(maxsize=None)
def devices(chip: str) -> list:
    return list(topologies.get_topology_desc(TOPOLOGIES[chip], "tpu").devices)


def one_device(chip: str, shapes: list[tuple[int, ...]]) -> list[jax.ShapeDtypeStruct]:
    s = NamedSharding(Mesh(devices(chip)[:1], ("x",)), P())
    return [jax.ShapeDtypeStruct(sh, jnp.bfloat16, sharding=s) for sh in shapes]


def estimate(chip: str, fn, args, n: int = 1, flops: float | None = None) -> dict:
    text = jax.jit(fn).lower(*args).compile().as_text()
    d = devices(chip)[0]
    return cost_model.estimate(text, d.device_kind, n, d.num_cores, flops)


def mlp_grad(batch: int):
    """Gradient of a two-layer bf16 MLP's squared output, batch x 1024 -> 4096 -> 1024."""
    def loss(w1, w2, x):
        return jnp.sum(jnp.square((jax.nn.relu(x @ w1) @ w2).astype(jnp.float32)))

    return jax.grad(loss, argnums=(0, 1)), one_device("v5e", [(1024, 4096), (4096, 1024), (batch, 1024)])


def main() -> int:
    out: dict = {}
    for chip in TOPOLOGIES:  # the chip table: one big matmul against its FLOPs at the table's peak
        a, b = one_device(chip, [(N, N), (N, N)])
        e = estimate(chip, jnp.matmul, (a, b), flops=2.0 * N ** 3)
        out[f"matmul_{chip}"] = {"compute_s": e["compute_s"], "at_peak_s": e["model_flops_at_peak_s"],
                                 "device_cores": e["device_cores"], "ops": e["ops_estimated"]}
    for batch in (4096, 8192):  # linearity in the batch
        fn, args = mlp_grad(batch)
        out[f"mlp_{batch}"] = estimate("v5e", fn, args)["compute_s"]
    a, b = one_device("v5e", [(4096, 4096), (4096, 4096)])
    for trips in (4, 8):  # a while loop counted trip times
        loop = estimate("v5e", lambda x, y: jax.lax.fori_loop(0, trips, lambda i, c: (c @ y) * 0.5, x), (a, b))
        out[f"loop_of_{trips}"] = {"compute_s": loop["compute_s"], "notes": loop["notes"]}
    branch = estimate("v5e", lambda x, y: jax.lax.cond(jnp.sum(x[0].astype(jnp.float32)) > 0,
                                                       lambda: x @ y @ y, lambda: x), (a, b))
    out["cond"] = {"compute_s": branch["compute_s"], "notes": branch["notes"]}
    mesh = Mesh(devices("v5e"), ("d",))  # an all-reduce of 4 MiB over the 4 chips
    x = jax.ShapeDtypeStruct((4 * 1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P("d")))
    psum = jax.shard_map(lambda v: jax.lax.psum(v, "d") * 2.0, mesh=mesh, in_specs=P("d"), out_specs=P())
    e = estimate("v5e", psum, (x,), n=4)
    out["psum"] = {"collectives_s": e["collectives_s"], "collectives": e["collectives"]}
    for scan in (True, False):  # the tiny BERT's train step, its layers scanned and unrolled
        out[f"bert_scan_{scan}"] = step_estimate([f"model.scan_layers={str(scan).lower()}"])
    out["bert_splash"] = step_estimate(["model.attention_impl='splash'", "model.attention_dropout=0.0",
                                        "data.max_seq_length=256", "model.max_position_embeddings=256"])
    for path in ("kernel", "xla"):
        out[f"rel_shift_{path}"] = rel_shift_estimate(path)
    for where in ("tpu", "cpu"):
        out[f"dropout_{where}"] = dropout_estimate(where)
    xlnet = step_estimate(XLNET_128, "xlnet_tiny")  # the kernels inside a train step: 2 layers x 2 streams
    out["xlnet_step"] = {"mosaic_calls": xlnet["mosaic_calls"], "estimate": xlnet["estimate"]}
    print(json.dumps(out, default=float))


def dropout_estimate(where: str) -> float:
    """Estimated compute of the gradient of a squared sum of ``dropout``'s output, a [8, 512, 1024] bf16
    activation at rate 0.1 on one v5e chip, with the mask computed as ``keep_mask`` does for ``where``: 'tpu'
    (traced under a TPU mesh: one hash per position) or 'cpu' (no mesh, JAX's CPU backend here: four decisions
    per hash, interleaved)."""
    from ptm_jax.models.dropout import dropout

    mesh = Mesh(np.array(devices("v5e")[:1]), ("x",))
    x = jax.ShapeDtypeStruct((8, 512, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=NamedSharding(mesh, P()))

    def loss(v, k):
        if where == "tpu":
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                y = dropout(v, 0.1, k)
        else:
            y = dropout(v, 0.1, k)
        return jnp.sum(jnp.square(y.astype(jnp.float32)))

    return estimate("v5e", jax.grad(loss), (x, key))["compute_s"]


REL = (8, 4, 512, 384)
"""(examples, heads, queries, memory) of the relative-shift check: XLNet's shapes at 512 tokens."""


def rel_shift_estimate(path: str) -> dict:
    """The gradient of a weighted sum of squared ``rel_shift``ed float32 scores (the shift forward, its transpose
    backward) on v5e:2x2, examples over the 4 chips: ``path`` 'kernel' (what ``rel_shift`` takes on a TPU) or
    'xla' (``rel_shift_xla``)."""
    import flax.linen as nn

    from ptm_jax.models.relative_attention import rel_shift, rel_shift_xla
    from ptm_jax.parallel.rules import LOGICAL_RULES

    b, n, i, m = REL
    klen = m + i
    mesh = Mesh(np.array(devices("v5e")).reshape(4, 1, 1), ("data", "fsdp", "tensor"))
    sh = NamedSharding(mesh, P("data"))
    x = jax.ShapeDtypeStruct((b, n, i, klen + i), jnp.float32, sharding=sh)
    w = jax.ShapeDtypeStruct((b, n, i, klen), jnp.float32, sharding=sh)
    shift = rel_shift if path == "kernel" else rel_shift_xla

    def loss(v, u):  # the gradient is taken outside the mesh and axis-rule contexts, as jax.grad(loss) does
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(LOGICAL_RULES):
            return jnp.sum(jnp.square(shift(v, klen)) * u)

    text = jax.jit(jax.grad(loss)).lower(x, w).compile().as_text()
    dev = devices("v5e")[0]
    e = cost_model.estimate(text, dev.device_kind, 4, dev.num_cores, None, top=10_000)
    kernels = [o for o in e["top_ops"] if o["opcode"] == "custom-call" and "rel_" in o["op_name"]]
    return {"mosaic_calls": text.count("tpu_custom_call"), "compute_s": e["compute_s"],
            "kernel_s": sum(o["seconds"] for o in kernels), "kernels": len(kernels),
            "shift_s": e["breakdown_s"].get(cost_model.RELATIVE_SHIFT, 0.0),
            "modelled_s": e["modelled_memory_bound_s"], "notes": e["notes"],
            "without_estimate": e["ops_without_estimate"],
            "all_gathers": text.count("all-gather")}


XLNET_128 = ["model.num_layers=2", "model.mem_len=128", "data.reuse_len=64", "data.perm_size=64",
             "data.max_predictions_per_seq=20"]
"""xlnet_tiny at 128 tokens with a 128-token memory: scores [B, N, 128, 384] cut to 256 keys, shapes the
relative-shift kernels take."""


def step_estimate(overrides: list[str], preset: str = "bert_tiny") -> dict:
    """``ptm compile``'s report of ``preset``'s train step (bert_tiny: 4 layers) at 128 tokens on v5e:2x2, pure
    data parallelism, with the count of Mosaic kernels in the compiled program."""
    from ptm_jax.bench.aot import compile_report
    from ptm_jax.config_loading import load_config

    cfg = load_config(preset, ["model.num_layers=4", "train.batch_size=32", "data.max_seq_length=128",
                               "model.max_position_embeddings=128", "mesh.data=-1", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        hlo = os.path.join(tmp, "step.hlo")
        r = compile_report(cfg, None, TOPOLOGIES["v5e"], hlo_path=hlo)
        with open(hlo) as f:
            text = f.read()
    return {"estimate": r["estimate"], "model": r["model"], "mosaic_calls": text.count("tpu_custom_call")}


if __name__ == "__main__":
    sys.exit(main())
