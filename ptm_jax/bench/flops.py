"""Analytic model FLOPs of one train step, XLA's own matmul count, and device peaks for MFU.

Convention (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Sec. 2.1; Chowdhery et al. 2022,
PaLM, Appendix B): count only matrix multiplies, one multiply-add = 2 FLOPs, so a forward pass is
``2 * MACs`` and a train step (forward + gradients of both matmul operands) is ``3 * forward``. For a dense
Transformer this is the familiar ``6 N`` FLOPs per token for the non-embedding parameters plus the
attention term ``12 * n_layer * n_ctx * d_model`` per token. Recomputation (remat) is *not* model FLOPs
(PaLM's MFU excludes it); it is returned separately as ``recompute`` for hardware-FLOPs utilisation.

BERT (Devlin et al. 2019; google-research/bert modeling.py, run_pretraining.py), batch B, length S,
hidden H, FFN I, layers L, vocabulary V, P gathered masked positions per sequence. Forward MACs:

- embeddings: lookups, 0 (gathers are not matmuls);
- per layer: Q, K, V and output projections ``4 B S H^2``; scores ``Q K^T`` and the weighted sum of V
  ``2 B S^2 H`` (summed over heads, ``N * d_head = H``); FFN ``2 B S H I``;
- pooler ``B H^2`` and NSP classifier ``2 B H`` (objective ``mlm_nsp`` only: with ``mlm`` XLA drops the
  unused pooler);
- MLM head at the P gathered positions only: transform ``B P H^2`` and the tied decoder ``B P H V``.

A model family adds its formula with :func:`register_family`; ``train_step_flops`` dispatches on
``cfg.model.family``.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from ptm_jax.config import RunConfig
from ptm_jax.errors import ConfigError

# Dense bf16 peak TFLOP/s per device (vendor datasheets; dense = without 2:4 sparsity). Matched as a
# lower-cased substring of ``jax.Device.device_kind``; more specific names first.
DEVICE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("h200", 989.0),
    ("h100", 989.0),  # SXM; PCIe parts are lower (756): pass --peak-tflops for them
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
    """Extra forward FLOPs re-run by rematerialisation in the backward pass (hardware FLOPs only)."""
    tokens: int
    """Token positions per step (batch x length)."""

    @property
    def forward_total(self) -> float:
        return float(sum(self.forward.values()))

    @property
    def train(self) -> float:
        """Model FLOPs of a train step: 3 x forward (forward, and the two gradient matmuls of each)."""
        return 3.0 * self.forward_total

    @property
    def hardware(self) -> float:
        """What the device actually multiplies: model FLOPs plus recomputation."""
        return self.train + self.recompute

    @property
    def per_token(self) -> float:
        return self.train / max(self.tokens, 1)


FlopsFormula = Callable[[RunConfig], StepFlops]
_FAMILIES: dict[str, FlopsFormula] = {}


def register_family(family: str, formula: FlopsFormula) -> None:
    """Adds the FLOPs formula of a model family (``cfg.model.family``)."""
    _FAMILIES[family] = formula


def train_step_flops(cfg: RunConfig) -> StepFlops:
    """Model FLOPs of one train step of ``cfg`` (global batch ``cfg.train.batch_size``)."""
    formula = _FAMILIES.get(cfg.model.family)
    if formula is None:
        raise ConfigError(f"no FLOPs formula for model.family={cfg.model.family!r}; known: {', '.join(_FAMILIES)}")
    return formula(cfg)


def bert_forward_flops(cfg: RunConfig) -> dict[str, float]:
    """Forward matmul FLOPs of BertForPreTraining on one global batch, by component (module docstring)."""
    m = cfg.model
    B, S, P = cfg.train.batch_size, cfg.data.max_seq_length, cfg.data.max_predictions_per_seq
    H, I, L, V = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    macs = {
        "attention_projections": L * 4 * B * S * H * H,
        "attention_scores": L * 2 * B * S * S * H,
        "ffn": L * 2 * B * S * H * I,
        "mlm_head": B * P * H * H + B * P * H * V,
    }
    if cfg.objective == "mlm_nsp":
        macs["pooler_nsp"] = B * H * H + B * H * 2
    return {k: 2.0 * v for k, v in macs.items()}


def _bert_recompute(cfg: RunConfig, fwd: dict[str, float]) -> float:
    """Forward FLOPs that ``model.remat`` re-runs: the whole block (full) or the batched attention matmuls,
    which ``dots_with_no_batch_dims_saveable`` does not save (save_dots)."""
    if cfg.model.remat == "full":
        return fwd["attention_projections"] + fwd["attention_scores"] + fwd["ffn"]
    if cfg.model.remat == "save_dots":
        return fwd["attention_scores"]
    return 0.0


def bert_step_flops(cfg: RunConfig) -> StepFlops:
    fwd = bert_forward_flops(cfg)
    return StepFlops(forward=fwd, recompute=_bert_recompute(cfg, fwd),
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length)


register_family("bert", bert_step_flops)


def gpt_forward_flops(cfg: RunConfig) -> dict[str, float]:
    """GPT (Radford et al. 2018/2019) on packed rows of S tokens: the BERT layer terms (the causal mask does
    not skip any matmul work: full S x S scores are computed and masked) and the tied LM head at every
    position, ``B S H V``. No pooler, no transform before the decoder."""
    m = cfg.model
    B, S = cfg.train.batch_size, cfg.data.max_seq_length
    H, I, L, V = m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size
    macs = {"attention_projections": L * 4 * B * S * H * H, "attention_scores": L * 2 * B * S * S * H,
            "ffn": L * 2 * B * S * H * I, "lm_head": B * S * H * V}
    return {k: 2.0 * v for k, v in macs.items()}


def gpt_step_flops(cfg: RunConfig) -> StepFlops:
    fwd = gpt_forward_flops(cfg)
    return StepFlops(forward=fwd, recompute=_bert_recompute(cfg, fwd),
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length)


register_family("gpt", gpt_step_flops)
# XLNet has no analytic formula here (two streams, relative positions, target mapping): `ptm bench` reports
# XLA's own matmul count (``hlo_matmul_flops``) as its model FLOPs and says so ("model_flops_source").


def has_formula(family: str) -> bool:
    return family in _FAMILIES


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
