"""Analytic model FLOPs of one train step, XLA's own matmul count, and device peaks for MFU.

Convention (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Sec. 2.1; Chowdhery et al. 2022,
PaLM, Appendix B): count only matrix multiplies, one multiply-add = 2 FLOPs, so a forward pass is
``2 * MACs`` and a train step (forward + gradients of both matmul operands) is ``3 * forward``. For a dense
Transformer this is the familiar ``6 N`` FLOPs per token for the non-embedding parameters plus the
attention term ``12 * n_layer * n_ctx * d_model`` per token, of which a causal model (GPT) is counted at half,
as MaxText counts it (``calculate_tflops_training_per_device``: causal attention FLOPs / 2; the fused kernels
skip the masked half); ``StepFlops.train_full_attention`` keeps the whole term, Kaplan's and PaLM's count, and
``ptm bench`` shows both where they differ. Recomputation (remat) is *not* model FLOPs
(PaLM's MFU excludes it); it is returned separately as ``recompute`` for hardware-FLOPs utilisation.

Each family gives its formula as ``Bench.flops`` (e.g. ``ptm_jax/families/<name>/flops.py``);
``train_step_flops`` asks the registry for ``cfg.model.family``. A family without one is measured by XLA's
matmul count (``hlo_matmul_flops``), and ``ptm bench`` says so (``model_flops_source``).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ptm_jax.config import RunConfig
from ptm_jax.errors import ConfigError

# Dense bf16 peak TFLOP/s per device (vendor datasheets; dense = without 2:4 sparsity). Matched as a
# lower-cased substring of ``jax.Device.device_kind``; more specific names first.
DEVICE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("h200", 989.0),
    ("h100 pcie", 756.0),  # device_kind "NVIDIA H100 PCIe"
    ("h100", 989.0),  # SXM
    ("a100", 312.0),
    ("tpu v6 lite", 918.0),  # v6e
    ("tpu v5 lite", 197.0),  # v5e
    ("tpu v5e", 197.0),
    ("tpu v5p", 459.0),
    ("tpu v5", 459.0),  # v5p reports itself as "TPU v5"
    ("tpu v4", 275.0),
)


def peak_tflops(device_kind: str | None) -> float | None:
    """bf16 dense peak of one device from its ``device_kind``; None when unknown (CPU, other GPUs)."""
    if not device_kind:
        return None
    kind = device_kind.lower()
    for key, value in DEVICE_PEAK_TFLOPS:
        if key in kind:
            return value
    return None


@dataclasses.dataclass(frozen=True)
class StepFlops:
    """Matmul FLOPs of one optimizer step on the global batch, by component."""

    forward: dict[str, float]
    """Forward FLOPs per component (2 x MACs)."""
    recompute: float
    """Hardware FLOPs that are not model FLOPs: forward matmuls re-run by rematerialisation in the backward
    pass, and work a scanned layer stack cannot drop although its result is unused (XLNet's last content
    stream)."""
    tokens: int
    """Token positions per step (batch x length)."""
    one_gradient: tuple[str, ...] = ()
    """Components of ``forward`` whose matmuls have one operand that takes no gradient (a constant, or data
    such as XLNet's ``target_mapping``): their backward pass is one matmul, not two (2 x forward)."""
    causal: tuple[str, ...] = ()
    """Components computed under a causal mask (a decoder's attention scores and values), given in full in
    ``forward``: model FLOPs count them at half (MaxText's convention), ``train_full_attention`` in full."""

    @property
    def forward_total(self) -> float:
        return float(sum(self.forward.values()))

    @property
    def train_breakdown(self) -> dict[str, float]:
        """Train FLOPs per component: 3 x forward (forward, and the gradients of both matmul operands);
        2 x for the components in ``one_gradient``; half of that for the ``causal`` ones."""
        return {k: (0.5 if k in self.causal else 1.0) * v for k, v in self._train_full().items()}

    def _train_full(self) -> dict[str, float]:
        return {k: (2.0 if k in self.one_gradient else 3.0) * v for k, v in self.forward.items()}

    @property
    def train(self) -> float:
        """Model FLOPs of a train step (``train_breakdown`` summed; causal attention at half)."""
        return float(sum(self.train_breakdown.values()))

    @property
    def train_full_attention(self) -> float:
        """Model FLOPs with causal attention counted in full (the S x S product an unfused einsum computes)."""
        return float(sum(self._train_full().values()))

    @property
    def hardware(self) -> float:
        """What the device actually multiplies: model FLOPs plus recomputation."""
        return self.train + self.recompute

    @property
    def per_token(self) -> float:
        return self.train / max(self.tokens, 1)


def train_step_flops(cfg: RunConfig) -> StepFlops:
    """Model FLOPs of one train step of ``cfg`` (global batch ``cfg.train.batch_size``): the formula of the
    model's family (``Bench.flops``)."""
    from ptm_jax.families import registry

    formula = registry.get(cfg.model.family).bench.flops
    if formula is None:
        raise ConfigError(f"no FLOPs formula for model.family={cfg.model.family!r}; families with one: "
                          f"{', '.join(n for n, f in registry.families().items() if f.bench.flops)}")
    return formula(cfg)


def loop_step_flops(objective: Any, tcfg: Any) -> float | None:
    """Model FLOPs of one train step of ``objective`` as ``fit`` runs it with ``tcfg``: the family's formula for
    a pretraining objective (one that holds its ``RunConfig`` as ``cfg``); None for task objectives and
    families without a formula."""
    cfg = getattr(objective, "cfg", None)
    if not isinstance(cfg, RunConfig) or not has_formula(cfg.model.family):
        return None
    return train_step_flops(dataclasses.replace(cfg, train=tcfg)).train


def device_peak_flops(override_tflops: float, device_kind: str | None, devices: int) -> float | None:
    """Peak FLOP/s of ``devices`` devices: ``override_tflops`` per device when > 0, else the table's peak of
    ``device_kind``; None when neither is known (CPU, an unlisted device)."""
    per_device = override_tflops if override_tflops > 0 else peak_tflops(device_kind)
    return None if per_device is None else per_device * 1e12 * devices


def has_formula(family: str) -> bool:
    from ptm_jax.families import registry

    return registry.get(family).bench.flops is not None


def transformer_recompute(cfg: RunConfig, fwd: dict[str, float]) -> float:
    """Forward FLOPs that ``model.remat`` re-runs in a Transformer stack whose ``fwd`` has the terms
    attention_projections, attention_scores and ffn: the whole block (full) or the batched attention matmuls,
    which ``dots_with_no_batch_dims_saveable`` does not save (save_dots)."""
    if cfg.model.remat == "full":
        return fwd["attention_projections"] + fwd["attention_scores"] + fwd["ffn"]
    if cfg.model.remat == "save_dots":
        return fwd["attention_scores"]
    return 0.0


# ----------------------------------------------------------------------------------------------------
# What XLA counts


def xla_cost_flops(compiled: Any) -> float | None:
    """``cost_analysis()['flops']`` of a compiled executable (all ops, per device; while bodies once)."""
    try:
        ca = compiled.cost_analysis()
    except Exception:  # some backends do not implement it
        return None
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else None
    if not ca or "flops" not in ca:
        return None
    return float(ca["flops"])


_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(\w+)\[([\d,]*)\][^ ]*\s+(\w[\w-]*)\((.*)$")
_COMP = re.compile(r"^\s*(?:ENTRY\s+)?%(\S+)\s.*\{\s*$")
_CALLEES = re.compile(r"\b(calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%[\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def hlo_matmul_flops(hlo_text: str) -> float:
    """2 x MACs of every ``dot`` in an HLO module (``compiled.as_text()``), each computation weighted by how
    often it runs: while bodies with a ``known_trip_count`` count that many times, so a scanned layer stack
    is counted in full (``cost_analysis`` counts it once)."""
    shapes: dict[str, list[int]] = {}
    comps: list[tuple[str, list[str]]] = []  # (name, lines) in text order: callees before callers
    current: list[str] | None = None
    entry = ""
    for line in hlo_text.splitlines():
        head = _COMP.match(line)
        if head and "=" not in line.split("{")[0].split("(")[0]:
            current = []
            comps.append((head.group(1), current))
            if line.lstrip().startswith("ENTRY"):
                entry = head.group(1)
            continue
        if current is not None:
            current.append(line)
        ins = _INSTR.match(line)
        if ins:
            shapes[ins.group(1)] = _dims(ins.group(3))
    own: dict[str, float] = {}
    calls: dict[str, list[tuple[str, int]]] = {}
    for name, lines in comps:
        total, edges = 0.0, []
        for line in lines:
            ins = _INSTR.match(line)
            if ins and ins.group(4) == "dot":
                out = _dims(ins.group(3))
                first = re.search(r"%([\w.\-]+)", ins.group(5))
                lhs = first.group(1) if first else ""
                contract = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
                k = 1
                for d in _dims(contract.group(1)) if contract else []:
                    k *= shapes.get(lhs, [1] * (d + 1))[d]
                n = 1
                for d in out:
                    n *= d
                total += 2.0 * n * k
            trip = _TRIP.search(line)
            for group in _CALLEES.finditer(line):
                times = int(trip.group(1)) if (trip and group.group(1) == "body") else 1
                edges += [(callee, times) for callee in re.findall(r"%([\w.\-]+)", group.group(2))]
        own[name] = total
        calls[name] = edges
    weight: dict[str, float] = {name: 0.0 for name, _ in comps}
    if comps:
        weight[entry or comps[-1][0]] = 1.0
    for name, _ in reversed(comps):  # callees are printed before their callers
        for callee, times in calls[name]:
            if callee in weight:
                weight[callee] += weight[name] * times
    return float(sum(own[n] * weight[n] for n in own))
