"""`ptm compile`: lower and compile the sharded train step ahead of time, without running it, and report the
per-device memory XLA assigns, so that memory is known before a pod is reserved (docs/scaling.md, "Before reserving
a slice").

Devices to compile for (``device_type``):

- ``None`` / ``"local"``: the devices this process sees (GPUs, TPUs or CPUs);
- ``"cpu"``: virtual CPU devices, as many as the mesh needs (``jax_num_cpu_devices``; must be set before JAX
  starts its backends, so ``ptm compile`` does it first thing);
- a TPU topology such as ``"v5e:4x4"``, ``"v4:2x2x1"`` or ``"tpu:v5p:2x2x2"``: compile-only devices from
  ``jax.experimental.topologies.get_topology_desc`` (needs the TPU plugin, libtpu, installed; no TPU attached).

The state is sharded exactly as ``fit`` shards it (``compile_objective``). ``memory_analysis()`` on a virtual
CPU mesh reflects CPU buffer assignment (other fusion and layouts than a GPU or TPU); it is a good estimate of
the sharded state and a rough one of activations.
"""
from __future__ import annotations

import math
import os
import re
import time
from typing import Any

import jax

from ptm_jax.bench import flops as flops_lib
from ptm_jax.bench.harness import (batch_specs, build_bench_objective, check_batch, memory_figures, model_summary,
                                   param_count, rng_spec)
from ptm_jax.config import MeshConfig, RunConfig
from ptm_jax.errors import ConfigError, PtmError

_TPU_NAME = re.compile(r"^(?:tpu:)?(v\d+[a-z]*):(\d+(?:x\d+)*)$", re.IGNORECASE)


def parse_mesh(text: str) -> tuple[int, int, int]:
    """'d,f,t' (or 'dxfxt') -> (data, fsdp, tensor); -1 allowed on one axis."""
    parts = [p for p in re.split(r"[,x]", text.strip()) if p]
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or any(s == 0 or s < -1 for s in sizes):
        raise ConfigError(f"--mesh {text!r}: expected three sizes data,fsdp,tensor such as 2,2,2 (-1 on one axis "
                          "takes the remaining devices)")
    return sizes  # type: ignore[return-value]


def _cpu_devices_requested() -> int:
    configured = int(getattr(jax.config, "jax_num_cpu_devices", -1) or -1)
    if configured > 0:
        return configured
    m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(m.group(1)) if m else 1


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # private API moved: assume started (then only the check below applies)
        return True


def virtual_cpu_devices(n: int) -> list:
    """``n`` CPU devices, creating virtual ones if JAX has not started its backends yet."""
    if not _backends_started() and _cpu_devices_requested() < n:
        jax.config.update("jax_num_cpu_devices", n)
    devices = jax.devices("cpu")
    if len(devices) < n:
        raise ConfigError(f"the mesh needs {n} devices but this process has {len(devices)} CPU devices and JAX "
                          f"has already started; run with XLA_FLAGS=--xla_force_host_platform_device_count={n} "
                          "(or call `ptm compile --device-type cpu` as the first JAX work of the process)")
    return devices[:n]


def tpu_topology_devices(name: str) -> list:
    """Compile-only devices of a TPU slice, e.g. 'v5e:4x4' (16 chips)."""
    m = _TPU_NAME.match(name)
    if not m:
        raise ConfigError(f"--device-type {name!r}: expected local, cpu, or a TPU topology such as v5e:4x4, "
                          "v4:2x2x1, v5p:2x2x2")
    from jax.experimental import topologies

    topo_name = f"{m.group(1).lower()}:{m.group(2)}"
    try:
        topo = topologies.get_topology_desc(topo_name, "tpu")
    except Exception as e:  # no libtpu: RuntimeError "JAX TPU support not installed"
        raise ConfigError(f"--device-type {name!r}: cannot describe the TPU topology {topo_name} here "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}). Install "
                          "jax[tpu] (libtpu) to compile for a TPU slice without one, or use --device-type cpu "
                          "for a virtual CPU mesh of the same shape") from None
    return list(topo.devices)


def resolve_devices(device_type: str | None, needed: int) -> list:
    kind = (device_type or "local").strip()
    if kind.lower() == "local":
        devices = jax.devices()
        if len(devices) < needed:
            raise ConfigError(f"the mesh needs {needed} devices but {len(devices)} are attached; pass "
                              "--device-type cpu (virtual CPU devices) or a TPU topology such as v5e:4x4")
        return devices[:needed]
    if kind.lower() == "cpu":
        return virtual_cpu_devices(needed)
    if kind.lower().startswith(("gpu", "cuda", "h100", "h200", "a100")):
        raise ConfigError(f"--device-type {kind!r}: JAX cannot compile for GPUs that are not attached (no GPU "
                          "topology API); run `ptm compile` on the GPU host with --device-type local, or use "
                          "--device-type cpu to check the sharding on a virtual CPU mesh")
    devices = tpu_topology_devices(kind)
    if len(devices) < needed:
        raise ConfigError(f"topology {kind} has {len(devices)} chips but the mesh needs {needed}")
    return devices[:needed]


def mesh_devices(mcfg: MeshConfig, device_type: str | None) -> list:
    """The devices of the mesh: exactly data*fsdp*tensor of them; an axis of -1 takes every local device,
    every chip of a TPU topology, or (virtual CPU) size 1."""
    sizes = (mcfg.data, mcfg.fsdp, mcfg.tensor)
    fixed = math.prod(s for s in sizes if s != -1)
    kind = (device_type or "local").strip().lower()
    if -1 not in sizes or kind == "cpu":
        return resolve_devices(device_type, fixed)
    if kind == "local":
        return jax.devices()
    return tpu_topology_devices(device_type or "")


def _state_bytes_per_device(abstract_state: Any) -> int:
    total = 0
    for leaf in jax.tree.leaves(abstract_state):
        sharding = getattr(leaf, "sharding", None)
        shape = sharding.shard_shape(leaf.shape) if sharding is not None else leaf.shape
        total += math.prod(shape) * leaf.dtype.itemsize
    return int(total)


def compile_report(cfg: RunConfig, mesh_shape: tuple[int, int, int] | None = None,
                   device_type: str | None = None, mlm_head: str = "sparse", estimate: bool | None = None,
                   hlo_path: str | None = None, prng: str | None = None) -> dict[str, Any]:
    """Lowers and compiles the train step of ``cfg`` for the mesh; returns per-device memory and compile figures.

    ``estimate`` (None: for a TPU): the compiler's estimated step time (``bench/cost_model.py``) under
    ``"estimate"``. ``hlo_path``: also write the compiled program's HLO text there. ``prng``: the key
    implementation of the step's dropout key (None: JAX's default, as the run's)."""
    from ptm_jax.parallel.mesh import make_mesh, mesh_shape as resolve_shape
    from ptm_jax.train.loop import compile_objective

    mcfg = MeshConfig(*mesh_shape) if mesh_shape is not None else cfg.mesh
    devices = mesh_devices(mcfg, device_type)
    shape = resolve_shape(mcfg, len(devices))
    mesh = make_mesh(mcfg, devices)
    check_batch(cfg, mesh)
    objective = build_bench_objective(cfg, mlm_head)
    compiled = compile_objective(objective, cfg.train, mesh)
    example = objective.example_batch(cfg.train.batch_size)
    t0 = time.perf_counter()
    lowered = compiled.train_step.lower(compiled.abstract_state, batch_specs(example, mesh), rng_spec(mesh, prng))
    try:
        executable = lowered.compile()
    except jax.errors.JaxRuntimeError as e:  # the compiler's refusal, as one line (exit 2), not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"{len(devices)} x {devices[0].device_kind} ({device_type or 'local'})"
        if "RESOURCE_EXHAUSTED" in first or "Ran out of memory" in first:
            raise ConfigError(f"the train step does not fit on {where}: {first}. Lower train.batch_size, set "
                              "model.remat (e.g. full), or shard the state with mesh.fsdp") from None
        raise PtmError(f"XLA could not compile the train step for {where}: {first}") from None
    compile_s = time.perf_counter() - t0
    # memory is what a compile is for: a family without a FLOPs formula compiles too (no model FLOPs then)
    fl = flops_lib.train_step_flops(cfg) if flops_lib.has_formula(cfg.model.family) else None
    hlo, notes = optimized_hlo(executable), []
    if hlo is not None and hlo_path:
        with open(hlo_path, "w") as f:
            f.write(hlo)
    if hlo is None:
        notes.append("the compiled program's HLO could not be read back from the compiler (a libtpu/jaxlib "
                     "protocol mismatch, e.g. libtpu 0.0.52, newer than the pinned 0.0.42.1, on v5p-128: "
                     "'async-update instruction should have 1 operands'): the step compiled and its memory is the "
                     "compiler's; XLA matmul FLOPs not counted")
    matmul = None if hlo is None else flops_lib.hlo_matmul_flops(hlo)
    if matmul == 0 and hlo is not None and " convolution(" in hlo:  # TPU HLO: dots lowered to convolutions
        matmul = None
        notes.append("XLA matmul FLOPs not counted: the TPU program writes its matmuls as convolutions")
    kind = devices[0].device_kind
    report = {
        "mode": "compile",
        "model": model_summary(cfg),
        "mesh": dict(zip(("data", "fsdp", "tensor"), shape)),
        "devices": len(devices),
        "device_type": device_type or "local",
        "device_kind": kind,
        "params": param_count(compiled.abstract_state.params),
        "state_bytes_per_device": _state_bytes_per_device(compiled.abstract_state),
        "compile_s": compile_s,
        "memory_per_device": memory_figures(executable),
        "model_flops_per_step": fl.train if fl is not None else None,
        "xla_flops_per_device": flops_lib.xla_cost_flops(executable),
        "xla_matmul_flops_per_device": matmul,
        "notes": notes,
    }
    if estimate or (estimate is None and devices[0].platform == "tpu"):
        report["estimate"] = step_estimate(hlo, devices, report, notes)
    return report


def libtpu_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("libtpu")
    except Exception:  # not installed (a CPU or GPU compile), or installed without metadata
        return None


def step_estimate(hlo: str | None, devices: list, report: dict[str, Any], notes: list[str]) -> dict[str, Any] | None:
    """The compiler's estimated step time of the compiled step, or None with a one-line note saying why."""
    from ptm_jax.bench import cost_model

    kind = devices[0].device_kind
    if hlo is None:
        notes.append("no step-time estimate: the compiled program's HLO could not be read back")
        return None
    if cost_model.chip_of(kind) is None:
        notes.append(f"no step-time estimate: the cost model's cycles are the TPU compiler's, and {kind!r} is not a "
                     "TPU (compile with --device-type v5e:2x2 or another TPU topology)")
        return None
    n = len(devices)
    model = report["model_flops_per_step"]
    try:
        est = cost_model.estimate(hlo, kind, n, getattr(devices[0], "num_cores", None),
                                  None if model is None else model / n)
    except ValueError as e:
        notes.append(f"no step-time estimate: {e} (libtpu {libtpu_version() or 'unknown'})")
        return None
    est["libtpu"] = libtpu_version()
    return est


def optimized_hlo(executable: Any) -> str | None:
    """The compiled program's optimized HLO text, or None where the runtime cannot read it back: libtpu 0.0.52 (newer
    than the pinned 0.0.42.1) compiles BERT-base's step for a v5p-128 slice, but jaxlib 0.10.2 refuses the module
    (``RET_CHECK ... async-update instruction should have 1 operands but sees 3``), a proto of a newer XLA
    than its own. Memory and cost analysis come from the executable itself and are unaffected."""
    try:
        return executable.as_text()
    except jax.errors.JaxRuntimeError:
        return None
