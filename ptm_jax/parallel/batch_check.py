"""Does every global batch of a command divide over the mesh?

A global batch is split row-wise over the mesh axes ``data`` x ``fsdp`` (``parallel/rules.py``
``batch_sharding``), and with ``train.grad_accum_steps`` each microbatch is split the same way. A batch that
does not divide fails deep inside JAX (``IndivisibleError``) when the first batch is placed, which in
``ptm run`` is after the whole pretraining stage. So every command checks, right after the distributed runtime
starts and before any stage runs, every batch size its stages will use: ``train.batch_size`` for pretraining
(and a family's own language-model stages), ``finetune.batch_size`` for every finetuning job (single task,
MT-DNN, ConSERT, heads over features) and for ``ptm eval``, and the evaluation batches ``train.eval_batch_size``
and ``finetune.eval_batch_size`` where they are set.
"""
from __future__ import annotations

from typing import Any, Iterable

from ptm_jax.errors import ConfigError

STAGE_FIELDS = {"pretrain": "train.batch_size", "finetune": "finetune.batch_size"}
EVAL_FIELDS = {"pretrain": "train.eval_batch_size", "finetune": "finetune.eval_batch_size"}


def batch_shards(mesh_cfg: Any, num_devices: int) -> tuple[int, tuple[int, int, int]]:
    """(data x fsdp, the resolved (data, fsdp, tensor)) of ``mesh_cfg`` over ``num_devices`` devices."""
    from ptm_jax.parallel.mesh import mesh_shape

    shape = mesh_shape(mesh_cfg, num_devices)
    return shape[0] * shape[1], shape


def nearest_multiples(value: int, step: int) -> list[int]:
    """The multiples of ``step`` just below (if positive) and just above ``value``."""
    below, above = (value // step) * step, -(-value // step) * step
    return [m for m in dict.fromkeys((below, above)) if m > 0]


def check_batch(field: str, batch: int, mesh_cfg: Any, num_devices: int, accum: int = 1) -> None:
    """Raises a ConfigError naming ``field`` unless ``batch`` (and each of its ``accum`` microbatches) divides
    over the mesh's data x fsdp devices."""
    shards, (data, fsdp, tensor) = batch_shards(mesh_cfg, num_devices)
    step = shards * max(accum, 1)
    if batch % step == 0:
        return
    free = [f"mesh.{name}=-1 takes {size}" for name, size, given in
            (("data", data, mesh_cfg.data), ("fsdp", fsdp, mesh_cfg.fsdp), ("tensor", tensor, mesh_cfg.tensor))
            if given == -1]
    micro = (f" in {accum} microbatches of {batch // accum if batch % accum == 0 else batch / accum:g} rows "
             f"(train.grad_accum_steps={accum})" if accum > 1 else "")
    options = " or ".join(str(m) for m in nearest_multiples(batch, step))
    raise ConfigError(
        f"{field}={batch}{micro} does not divide over the mesh: each batch is split over mesh data x fsdp = "
        f"{data} x {fsdp} = {shards} devices ({num_devices} devices as data x fsdp x tensor = {data} x {fsdp} x "
        f"{tensor}{'; ' + ', '.join(free) if free else ''}). Set {field} to a multiple of {step} (nearest: "
        f"{options}), or set mesh.data / mesh.fsdp / mesh.tensor so that data x fsdp divides it")


def check_stage_batches(cfg: Any, stages: Iterable[str], num_devices: int | None = None) -> None:
    """Checks the batch of every stage in ``stages`` ('pretrain', 'finetune') against ``cfg.mesh`` over
    ``num_devices`` (default: every device of the run, ``jax.device_count()``)."""
    if num_devices is None:
        import jax

        num_devices = jax.device_count()
    for stage in stages:
        if stage == "pretrain":
            check_batch(STAGE_FIELDS[stage], cfg.train.batch_size, cfg.mesh, num_devices,
                        accum=cfg.train.grad_accum_steps)
            devices, eval_batch = num_devices, cfg.train.eval_batch_size
        elif stage == "finetune":  # on finetune.devices_per_host of every host when set (parallel/mesh.py)
            per_host = cfg.finetune.devices_per_host
            devices = num_devices if per_host <= 0 else _sub_mesh_devices(per_host, num_devices)
            check_batch(STAGE_FIELDS[stage], cfg.finetune.batch_size, cfg.mesh, devices)
            eval_batch = cfg.finetune.eval_batch_size
        else:
            raise ValueError(f"unknown stage {stage!r}; expected one of {sorted(STAGE_FIELDS)}")
        if eval_batch:  # 0: the evaluation takes the stage's batch, checked above
            check_batch(EVAL_FIELDS[stage], eval_batch, cfg.mesh, devices)



def _sub_mesh_devices(per_host: int, num_devices: int) -> int:
    """Devices of a sub-mesh of ``per_host`` devices on every process (as ``parallel/mesh.py`` ``per_host``)."""
    import jax

    processes = jax.process_count()
    if per_host > num_devices // processes:
        raise ConfigError(f"finetune.devices_per_host={per_host} but each host (process) has "
                          f"{num_devices // processes} devices; set it to at most {num_devices // processes} (0: all)")
    return per_host * processes
