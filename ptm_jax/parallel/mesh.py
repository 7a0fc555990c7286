"""Device mesh from config over the axes (data, fsdp, tensor); the shape is config, never code."""
from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ptm_jax.config import MeshConfig
from ptm_jax.errors import ConfigError
from ptm_jax.parallel.rules import MESH_AXES


def mesh_shape(cfg: MeshConfig, num_devices: int) -> tuple[int, int, int]:
    """Resolves -1 (at most one axis) to the remaining devices and checks the product."""
    sizes = [cfg.data, cfg.fsdp, cfg.tensor]
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1:
        raise ConfigError("mesh: at most one of mesh.data/mesh.fsdp/mesh.tensor may be -1")
    known = math.prod(s for s in sizes if s != -1)
    if free:
        if num_devices % known:
            raise ConfigError(f"mesh: {num_devices} devices are not divisible by the fixed axes ({known}); "
                              f"set mesh.data/fsdp/tensor so their product is {num_devices}")
        sizes[free[0]] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ConfigError(f"mesh: data*fsdp*tensor = {'*'.join(map(str, sizes))} = {math.prod(sizes)} but "
                          f"{num_devices} devices are available; make the product equal the device count")
    return tuple(sizes)  # type: ignore[return-value]


def check_tensor_within_host(tensor: int, devices: list) -> None:
    """Tensor parallelism all-reduces inside every layer: its groups must stay on one host's fast links
    (ICI/NVLink). Refuses mesh.tensor larger than, or not dividing, the devices of one process."""
    per_process: dict[int, int] = {}
    for d in devices:
        per_process[d.process_index] = per_process.get(d.process_index, 0) + 1
    local = min(per_process.values())
    if tensor > local or local % tensor:
        raise ConfigError(f"mesh.tensor={tensor} but each host (process) has {local} devices: tensor-parallel "
                          "groups must fit inside one host; set mesh.tensor to a divisor of "
                          f"{local} (e.g. {local}) and put the rest on mesh.fsdp or mesh.data")


def interleave_processes(devices: list) -> list:
    """Devices round-robin over processes (p0's first, p1's first, ..., p0's second, ...): mesh.device_order
    'interleaved', a mesh on which each process's batch rows are not contiguous, as on TPU pods."""
    by_process: dict[int, list] = {}
    for d in devices:
        by_process.setdefault(d.process_index, []).append(d)
    groups = [by_process[p] for p in sorted(by_process)]
    return [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]


def per_host(devices: list, count: int) -> list:
    """The first ``count`` devices (by id) of every process, in process order; all of them when ``count`` is 0.
    Every process keeps devices in the sub-mesh, so every process still runs the same program on its own rows."""
    if count <= 0:
        return list(devices)
    by_process: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: d.id):
        by_process.setdefault(d.process_index, []).append(d)
    local = min(len(v) for v in by_process.values())
    if count > local:
        raise ConfigError(f"finetune.devices_per_host={count} but each host (process) has {local} devices; set it to "
                          f"at most {local} (0: all)")
    return [d for p in sorted(by_process) for d in by_process[p][:count]]


def finetune_devices(cfg) -> list:
    """The devices of the finetuning stage and ``ptm eval`` (``finetune.devices_per_host``)."""
    return per_host(jax.devices(), cfg.finetune.devices_per_host)


def make_mesh(cfg: MeshConfig, devices: list | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape(cfg, len(devices))
    check_tensor_within_host(shape[2], devices)
    if cfg.device_order == "interleaved":
        devices = interleave_processes(devices)
        return Mesh(np.array(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))
    if cfg.device_order != "default":
        raise ConfigError(f"mesh.device_order={cfg.device_order!r}: expected 'default' or 'interleaved'")
    # Auto axes: GSPMD propagation from the in/out shardings and the logical constraints.
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=devices)
