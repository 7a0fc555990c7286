"""Estimated TPU step time from the TPU compiler's own cost model (``ptm compile --estimate``).

The TPU compiler (libtpu) writes its estimate of every operation it schedules into the compiled HLO:
``"estimated_cycles"`` in the ``backend_config`` of each fusion, copy and other kernel. This module reads
``compiled.as_text()`` and

- sums those cycles over the executed schedule: the entry computation, while bodies times their trip counts
  (scanned layers, gradient accumulation), while conditions once more than their bodies, called computations,
  and of a conditional the costliest branch (the train step's update-or-skip branch: the update runs at every
  finite step), and says which it took;
- divides by the chip's clock (``CHIPS``; sources in docs/benchmarks.md, "TPU step time from the compiler's
  cost model");
- models the collectives, which carry no estimate, from the bytes each device sends over a ring
  (``2 (n-1)/n`` of the buffer for an all-reduce, ``(n-1)/n`` for an all-gather, reduce-scatter or all-to-all)
  at the bandwidth of the ICI links the compiler's ring strategy uses (one link for a one-directional 1D ring,
  two otherwise), each collective once, also where libtpu's async collective fusion puts it inside fusions
  (FSDP's weight all-gathers), and reports the step fully exposed (compute + collectives) and fully overlapped
  (the larger of the two);
- groups the operations by what they do (``categorize``, from the ``op_name`` metadata JAX writes) and lists the
  costliest ones.

Everything here is the compiler's **estimate**, not a measurement: no TPU has run these steps.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable

from ptm_jax.bench.hlo_schedule import ASYNC_DONE, COLLECTIVES, Instr, parse_hlo, schedule, shape_bytes


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation: what turns cycles into seconds and FLOPs into a peak."""

    name: str
    clock_hz: float
    """The TensorCore clock: bf16 peak / (MXUs x MXU size^2 x 2 FLOPs x TensorCores)."""
    mxus: int
    mxu_size: int
    cores: int
    """TensorCores per chip."""
    peak_tflops: float
    """bf16 dense peak of the chip (all its TensorCores)."""
    hbm_gbps: float
    ici_gbps: float
    """ICI bandwidth one chip sends at (one direction, all ports), in GB/s."""
    ici_ports: int
    """ICI links per chip (2D torus: 4, 3D torus: 6)."""

    @property
    def link_gbps(self) -> float:
        return self.ici_gbps / self.ici_ports

    @property
    def flops_per_cycle_per_core(self) -> int:
        return self.mxus * self.mxu_size ** 2 * 2


# Cloud TPU system-architecture pages (docs.cloud.google.com/tpu/docs/v4, v5e, v5p, v6e) for peaks, MXUs, cores,
# HBM and ICI; v4's clock from Jouppi et al. 2023 (ISCA, "TPU v4"), the others from peak / FLOPs per cycle.
CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", 1.05e9, 4, 128, 2, 275.0, 1200.0, 300.0, 6),
    "v5e": Chip("v5e", 1.5e9, 4, 128, 1, 197.0, 819.0, 200.0, 4),
    "v5p": Chip("v5p", 1.75e9, 4, 128, 2, 459.0, 2765.0, 600.0, 6),
    "v6e": Chip("v6e", 1.75e9, 4, 256, 1, 918.0, 1640.0, 448.0, 4),
}
_KINDS = (("tpu v6 lite", "v6e"), ("tpu v6e", "v6e"), ("tpu v5 lite", "v5e"), ("tpu v5e", "v5e"),
          ("tpu v5p", "v5p"), ("tpu v5", "v5p"), ("tpu v4", "v4"))


def chip_of(device_kind: str | None) -> Chip | None:
    """The chip of a ``jax.Device.device_kind`` ('TPU v5 lite' -> v5e); None for anything else."""
    kind = (device_kind or "").lower()
    return next((CHIPS[name] for key, name in _KINDS if key in kind), None)


MOVES = "copies, casts, transposes"
RELATIVE_SHIFT = "relative shift (kernel, row reversals)"
OPTIMIZER = "optimizer update and gradient norms"
PERMUTE_SUMS = "collective arithmetic (sums between collective-permutes)"
"""The additions of a reduce-scatter the compiler decomposed into collective-permutes (FSDP's weight gradients):
fusions of the backward pass that read a permute's result or feed the next permute (a last sum the compiler fused
into the gradient norms stays with the optimizer). A native all-reduce's sums have no estimate of their own
(inside "collectives"); these have, and are compute."""
CATEGORIES = ("matmul: projections and FFN", "matmul: attention scores and values", "attention softmax, mask, dropout",
              "attention kernel (splash)", RELATIVE_SHIFT, "layer norm", "dropout", "activation, residual, bias",
              "embedding and head (with loss)", "layer-stack loop (scan slices and updates)", OPTIMIZER, MOVES,
              PERMUTE_SUMS, "collectives", "other")
_ATTN_PROJ = re.compile(r"/(query|key|value|output|qkv|q|k|v|o|r|pos_proj|c_attn|c_proj)/")


def categorize(op_name: str, opcode: str = "", is_matmul: bool | None = None) -> str:
    """The category of one operation from its ``op_name`` metadata (the JAX/Flax name scope) and HLO opcode.
    ``is_matmul`` None: a dot when the name ends in ``dot_general`` (how a GPU profile's names read)."""
    name = op_name or ""
    base = opcode.replace("-start", "").replace("-done", "")
    if base in COLLECTIVES:
        return "collectives"
    if is_matmul is None:
        is_matmul = name.endswith("dot_general") or opcode in ("dot", "convolution")
    low = name.lower()
    in_model = "jvp(" in name or "transpose(" in name
    if re.search(r"rel_(un)?shift", name):
        return RELATIVE_SHIFT
    if "splash" in low or "pallas" in low or opcode == "custom-call" and "mosaic" in low:
        return "attention kernel (splash)"
    if "opt_state" in low or "adam" in low or "optax" in low or "cond/branch" in name:
        return OPTIMIZER
    if "dynamic_update_slice" in name or "dynamic_slice" in name or re.search(r"/while$", name):
        return "layer-stack loop (scan slices and updates)"
    head = re.search(r"[/.](embeddings?|wte|wpe|word_embedding|mlm|nsp|lm_head|pooler|qa|classifier|"
                     r"take_along_axis|logits|cross_entropy|loss)\b", name) or "log_softmax" in name or (
        "jvp()" in name)  # the loss, outside every module
    attention = "attention/" in name or "/attn/" in name or "rel_attn" in name
    if is_matmul:
        if head and not attention:
            return "embedding and head (with loss)"
        if attention and not _ATTN_PROJ.search(name):
            return "matmul: attention scores and values"
        return "matmul: projections and FFN"
    if attention and not _ATTN_PROJ.search(name):
        return "attention softmax, mask, dropout"
    if re.search(r"norm/", name) or "layer_norm" in low or "/ln_" in name:
        return "layer norm"
    if "dropout" in low or "threefry" in low or "random_bits" in low or "rng_bit" in low:
        return "dropout"
    if head:
        return "embedding and head (with loss)"
    if opcode in ("copy", "transpose", "broadcast", "convert", "reverse") or name.endswith(("/transpose", "/copy")) or (
            not name and opcode in ("convert", "fusion")):  # a stacked parameter's cast, hoisted out of the loop
        return MOVES
    if in_model:
        return "activation, residual, bias"
    return OPTIMIZER if name else "other"


# ----------------------------------------------------------------------------------------------------
# The estimate

_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional", "call",
         "after-all", "partition-id", "replica-id", "copy-start", "copy-done", "opt-barrier", "add-dependency",
         "async-start", "async-done", "async-update"}


def group_size(ins: Instr, devices: int) -> int:
    """Devices in one replica group of a collective (``replica_groups`` in any of its three spellings)."""
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", ins.rest)
    if mesh:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
        return math.prod(int(sizes.get(a, 1)) for a in re.findall(r"'(\w+)'", mesh.group(2)))
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", ins.rest)
    if iota:
        return int(iota.group(2))
    listed = re.search(r"replica_groups=\{\{([\d,]*)\}", ins.rest)
    if listed and listed.group(1):
        return len(listed.group(1).split(","))
    return devices


def collective_seconds(ins: Instr, devices: int, chip: Chip, comps: dict[str, list[Instr]]) -> tuple[float, int, int]:
    """(seconds, bytes of the buffer, group size) of a collective over a ring: the links its strategy uses
    (``UniDirection1DRingStrategy``, or a collective-permute to one neighbour: one; any other ring: both
    directions, two) at the chip's link bandwidth."""
    target = ins
    if ins.opcode == "async-start":  # the collective wrapped in an async computation
        inner = [i for c in ins.callees("calls") for i in comps.get(c, []) if i.opcode in COLLECTIVES]
        target = inner[0] if inner else ins
    base = target.opcode.replace("-start", "")
    n = group_size(target, devices)
    size = shape_bytes(target.shape)
    if base == "reduce-scatter":
        size *= n  # the output is 1/n of the buffer
    elif target.opcode in ("all-gather-start", "collective-permute-start"):  # (operand, result[, context])
        size = size * n // (n + 1) if base == "all-gather" else size // 2
    factor = {"all-reduce": 2.0 * (n - 1) / n}.get(base, (n - 1) / n if n > 1 else 0.0)
    if base == "collective-permute":
        factor = 1.0
    links = 1 if "UniDirection" in target.rest or base == "collective-permute" else 2  # a permute: one neighbour
    return (factor * size / (links * chip.link_gbps * 1e9) if n > 1 else 0.0), size, n


KERNEL_EFFICIENCY = 0.5
"""A Mosaic (Pallas) kernel carries no estimate: a splash-attention kernel is modelled as its matmul FLOPs at this
fraction of the MXU peak, times the fraction of the MXU a head of H columns fills (H / MXU size, at most 1).
An assumption, not the compiler's figure: docs/benchmarks.md gives the step at half and twice this."""
_SPLASH_MATMULS = {"fwd": 2, "dkv": 4, "dq": 3}  # (batch, head, query, key) matmuls of H MACs per kernel


def _operand_layouts(ins: Instr) -> str | None:
    """The operand shapes of a Mosaic kernel's custom call (its ``operand_layout_constraints``), or None."""
    m = re.search(r"operand_layout_constraints=\{(.*?)\}(?:, [a-z_]+=|$)", ins.rest, re.S)
    return m.group(1) if m else None


def splash_flops(ins: Instr, fused_bwd: bool = True) -> tuple[float, int] | None:
    """(matmul FLOPs, head dim) of one splash-attention kernel call from its operands' shapes: q [b, n, T, H] and
    k [b, n, S, H] (the first two 4-D float operands); the forward runs QK^T and PV, the fused backward (dkv)
    recomputes QK^T and runs dO V^T, P^T dO, dS^T Q and, ``fused_bwd`` (no separate dq kernel), dS K; causal
    blocks the kernel skips are counted, as the FLOPs formula counts them."""
    kind = re.search(r"splash_mha_(fwd|dkv|dq)", ins.op_name)
    constraints = _operand_layouts(ins)
    if not kind or not constraints:
        return None
    dims = [[int(d) for d in m.split(",")] for m in re.findall(r"(?:bf16|f32|f16)\[(\d+,\d+,\d+,\d+)\]",
                                                                 constraints)]
    if len(dims) < 2:
        return None
    (b, n, t, h), s = dims[0], dims[1][2]
    per_pair = 2.0 * b * n * t * s * h
    count = _SPLASH_MATMULS[kind.group(1)] + (1 if fused_bwd and kind.group(1) == "dkv" else 0)
    return count * per_pair, h


def memory_bound_bytes(ins: Instr) -> int | None:
    """Bytes read and written by an operation that carries no estimate and only moves data: the relative-shift
    kernels of ``models/rel_shift_kernel.py`` (Mosaic calls named ``rel_shift`` / ``rel_unshift``: their operand
    from the layout constraint, their result) and XLA's ``reverse`` (which the compiler leaves unestimated; its
    category is its op_name's, "relative shift" for the reversals of the shift's transpose). None for anything
    else."""
    if ins.opcode == "reverse":
        return 2 * shape_bytes(ins.shape)
    if ins.opcode != "custom-call" or not re.search(r"rel_(un)?shift", ins.op_name):
        return None
    constraints = _operand_layouts(ins)
    return None if constraints is None else shape_bytes(constraints) + shape_bytes(ins.shape)


def permute_neighbours(comps: dict[str, list[Instr]]) -> set[str]:
    """Names of the instructions that read a collective-permute's result or feed a collective-permute (through
    get-tuple-element, bitcast and tuple): the arithmetic between the steps of a decomposed collective."""
    out: set[str] = set()
    for body in comps.values():
        by_name = {i.name: i for i in body}
        passes = ("get-tuple-element", "bitcast", "tuple")
        done = {i.name for i in body if i.opcode == "collective-permute-done"}
        for i in body:  # results of a permute, through get-tuple-element and bitcast
            if i.opcode in passes[:2] and any(o in done for o in i.operands()):
                done.add(i.name)
        for i in body:
            if i.opcode in passes or i.opcode.startswith("collective-permute"):
                continue
            if any(o in done for o in i.operands()):
                out.add(i.name)
        for i in body:  # producers of a permute's operand
            if i.opcode != "collective-permute-start":
                continue
            todo = list(i.operands())
            while todo:
                src = by_name.get(todo.pop())
                if src is None:
                    continue
                if src.opcode in passes:
                    todo += src.operands()
                elif not src.opcode.startswith("collective-permute"):
                    out.add(src.name)
    return out


def _is_matmul(ins: Instr, comps: dict[str, list[Instr]]) -> bool:
    if ins.opcode in ("dot", "convolution"):
        return True
    return ins.opcode == "fusion" and any(
        i.opcode in ("dot", "convolution") for c in ins.callees("calls") for i in comps.get(c, []))


def estimate(hlo_text: str, device_kind: str, devices: int, device_cores: int | None = None,
             model_flops_per_device: float | None = None, top: int = 12) -> dict[str, Any]:
    """The compiler's estimated step time of a compiled program (``compiled.as_text()``) on one device.

    ``device_cores``: TensorCores of one device as compiled (``Device.num_cores``; v4's compile-only topology
    lists each core as a device); ``model_flops_per_device``: the FLOPs formula's train step over the devices,
    for the estimated MFU. Raises ``ValueError`` when no operation carries an estimate."""
    chip = chip_of(device_kind)
    if chip is None:
        raise ValueError(f"no TPU chip in the clock table for device kind {device_kind!r} (known: "
                         f"{', '.join(CHIPS)})")
    comps, entry = parse_hlo(hlo_text)
    executed, notes = schedule(comps, entry)
    if not any(e.instr.cycles is not None for e in executed) and any(
            e.instr.opcode in ("fusion", "copy", "convert") for e in executed):
        raise ValueError("the compiled program carries no estimated_cycles (this libtpu's compiler writes no cost "
                         "model estimate into the HLO): no step time can be estimated")
    cores = device_cores or chip.cores
    peak = chip.peak_tflops * 1e12 * cores / chip.cores
    by_cat: dict[str, float] = {c: 0.0 for c in CATEGORIES}
    rows, missing, colls = [], {}, []
    comm_s = modelled = memory_modelled = fused_s = 0.0
    fused_seen: set[str] = set()
    fused_bwd = "splash_mha_dq" not in hlo_text
    permute_sums = permute_neighbours(comps) if "collective-permute-start" in hlo_text else set()

    def collective(ins: Instr, name: str, times: float, **extra) -> float:
        secs, size, n = collective_seconds(ins, devices, chip, comps)
        by_cat["collectives"] += secs * times
        colls.append({"name": name, "opcode": ins.opcode, "bytes": size, "group": n, "times": times,
                      "seconds": secs * times, **extra})
        return secs * times

    for e in executed:
        ins = e.instr
        base = ins.opcode.replace("-start", "")
        if base in COLLECTIVES or (ins.opcode == "async-start" and any(
                i.opcode in COLLECTIVES for c in ins.callees("calls") for i in comps.get(c, []))):
            comm_s += collective(ins, ins.name, e.times)
            continue
        if ins.opcode == "fusion":  # libtpu's async collective fusion: a collective inside fusions, counted once
            for inner in (i for c in ins.callees("calls") for i in comps.get(c, []) if i.opcode in COLLECTIVES):
                channel = re.search(r"channel_id=(\d+)", inner.rest)
                key = channel.group(1) if channel else f"{ins.name}/{inner.name}"
                if key not in fused_seen:
                    fused_seen.add(key)
                    secs = collective(inner, f"{ins.name}/{inner.name}", e.times, fused=True)
                    comm_s, fused_s = comm_s + secs, fused_s + secs
        cycles = ins.cycles
        kernel = splash_flops(ins, fused_bwd) if cycles is None and ins.opcode == "custom-call" else None
        moved = memory_bound_bytes(ins) if cycles is None else None
        if moved is not None:
            secs = e.times * moved / (chip.hbm_gbps * 1e9)
            cat = categorize(ins.op_name, ins.opcode, False)
            by_cat[cat] += secs
            memory_modelled += secs
            rows.append((secs, ins, e, cat))
            continue
        if kernel is not None:
            flops, head = kernel
            secs = e.times * flops / (peak * KERNEL_EFFICIENCY * min(1.0, head / chip.mxu_size))
            by_cat["attention kernel (splash)"] += secs
            modelled += secs
            rows.append((secs, ins, e, "attention kernel (splash)"))
            continue
        if cycles is None:
            if ins.opcode not in _FREE and not ins.opcode.endswith(ASYNC_DONE) and not (
                    ins.opcode == "custom-call" and re.search(r'target="(AllocateBuffer|ConcatBitcast)"', ins.rest)):
                key = ins.opcode + (" (Mosaic kernel)" if "tpu_custom_call" in ins.rest else "")
                missing[key] = missing.get(key, 0) + e.times
            continue
        secs = cycles * e.times / chip.clock_hz
        matmul = _is_matmul(ins, comps)
        summed = ins.name in permute_sums and not matmul and "transpose(" in ins.op_name  # a gradient's sums
        cat = PERMUTE_SUMS if summed else categorize(ins.op_name, ins.opcode, matmul)
        by_cat[cat] += secs
        rows.append((secs, ins, e, cat))
    compute_s = sum(r[0] for r in rows)
    rows.sort(key=lambda r: -r[0])
    if fused_s:
        notes.append(f"collectives inside fusions (libtpu's async collective fusion; each counted once, by its "
                     f"channel): {fused_s * 1e3:,.2f} ms of the collectives")
    if modelled:
        notes.append(f"splash-attention kernels carry no estimate: modelled as their matmul FLOPs at "
                     f"{KERNEL_EFFICIENCY:.0%} of the peak x head dim / MXU size ({modelled * 1e3:,.2f} ms)")
    if memory_modelled:
        notes.append(f"the relative-shift kernels and XLA's reverses carry no estimate: modelled as the bytes they "
                     f"read and write at the HBM bandwidth ({chip.hbm_gbps:,.0f} GB/s; "
                     f"{memory_modelled * 1e3:,.2f} ms)")
    result: dict[str, Any] = {
        "estimate_source": "the TPU compiler's cost model (estimated_cycles in the compiled HLO); an estimate, "
                           "not a measurement",
        "chip": chip.name, "clock_hz": chip.clock_hz, "device_cores": cores,
        "peak_tflops_per_device": peak / 1e12, "ici_link_gbps": chip.link_gbps,
        "compute_s": compute_s, "collectives_s": comm_s, "collectives_in_fusions_s": fused_s,
        "modelled_kernels_s": modelled, "modelled_memory_bound_s": memory_modelled,
        "step_s_exposed": compute_s + comm_s, "step_s_overlapped": max(compute_s, comm_s),
        "ops_estimated": len(rows),
        "ops_without_estimate": {k: v for k, v in sorted(missing.items(), key=lambda kv: -kv[1])},
        "breakdown_s": {k: v for k, v in by_cat.items() if v > 0},
        "top_ops": [{"name": ins.name, "op_name": ins.op_name, "opcode": ins.opcode, "category": cat,
                     "cycles": ins.cycles, "times": e.times, "seconds": secs,
                     "share": secs / compute_s if compute_s else 0.0} for secs, ins, e, cat in rows[:top]],
        "collectives": sorted(colls, key=lambda c: -c["seconds"])[:top],
        "notes": notes,
    }
    if model_flops_per_device:
        result["model_flops_at_peak_s"] = model_flops_per_device / peak
        result["mfu_exposed"] = model_flops_per_device / (peak * result["step_s_exposed"])
        result["mfu_overlapped"] = model_flops_per_device / (peak * result["step_s_overlapped"])
    return result


def breakdown(ops: Iterable[tuple[str, str, float]]) -> dict[str, float]:
    """Seconds per category of ``(op_name, opcode, seconds)`` rows: the TPU estimate's breakdown for any list of
    timed operations, such as the XLA ops of a GPU profile (no cost model runs there)."""
    out: dict[str, float] = {}
    for op_name, opcode, seconds in ops:
        cat = categorize(op_name, opcode)
        out[cat] = out.get(cat, 0.0) + seconds
    return out
