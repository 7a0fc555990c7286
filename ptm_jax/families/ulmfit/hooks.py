"""What the spine asks of the ULMFiT family besides its models and objectives: the classifier stage's parameter
groups (discriminative learning rates and gradual unfreezing, Howard & Ruder 2018 Sec. 3.2-3.3), gradient-norm
group names, the head of a params tree, and the analytic FLOPs of an LM step.

Layer groups are fastai's ``awd_lstm_clas_split``: [embedding], layers_0, ..., layers_{n-1}, [classifier head]
(n + 2 groups; group 0 the lowest). Discriminative fine-tuning (Sec. 3.2): lr of group g = lr / 2.6^(top - g)
(``model.discriminative_factor``; explicit multipliers in ``model.discriminative_lrs``, one per group). Gradual
unfreezing (Sec. 3.3): only the top group trains at first, and one more group from the top every
``model.unfreeze_every`` steps (the preset sets it to the steps of one epoch); a group is frozen before its start
(the rule's ``start_step``: no gradient into clipping, no moment updates, no update; ``train/param_groups.py``).
The classifier head's BatchNorm running statistics are frozen for the optimizer: the training step sets them
(``models/batch_norm.py``). The slanted triangular schedule is the shared ``train.lr_decay='slanted_triangular'``
(``train/optim.py``): it is not family-specific.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptm_jax.errors import ConfigError

TRUNK = "ulmfit"
NO_DECAY_ON_BIASES = r"(^|/)(recurrent_)?bias$"
"""The decoder's bias and both gate biases of every LSTM layer (``bias``, ``recurrent_bias``)."""


def group_patterns(num_layers: int) -> list[tuple[str, str]]:
    """(name, path pattern) of each layer group, bottom to top."""
    return ([("embedding", rf"(^|/){TRUNK}/embedding$")]
            + [(f"layers_{i}", rf"(^|/){TRUNK}/layers_{i}/") for i in range(num_layers)]
            + [("head", r"(^|/)(classifier|lm_head)/")])


def group_multipliers(model_cfg: Any) -> list[float]:
    """Learning-rate multiplier of each group, bottom to top (top = 1)."""
    n = model_cfg.num_layers + 2
    given = list(model_cfg.discriminative_lrs or [])
    if given:
        if len(given) != n:
            raise ConfigError(f"model.discriminative_lrs has {len(given)} values but the classifier has {n} layer "
                              f"groups (embedding, {model_cfg.num_layers} LSTM layers, head); give {n} values, "
                              "bottom group first")
        return [float(v) for v in given]
    f = float(model_cfg.discriminative_factor)
    return [f ** -(n - 1 - g) for g in range(n)]


def param_groups(model_cfg: Any = None, stage: str = "pretrain") -> list:
    """The classifier stage's rules (``stage='finetune'``): discriminative rates and gradual unfreezing; the
    LM stages (``stage='pretrain'``, ``train/stages.py`` ``pretrain_param_groups``): weight decay on every weight
    (the embedding, both LSTM kernels) and on no bias."""
    from ptm_jax.train.param_groups import Rule

    no_bias_decay = Rule(NO_DECAY_ON_BIASES, weight_decay=0.0, where="ULMFiT: no weight decay on biases",
                         must_match=False)
    if stage != "finetune" or model_cfg is None:
        return [no_bias_decay]
    from ptm_jax.models.batch_norm import STATISTICS_PATTERN

    mults = group_multipliers(model_cfg)
    every = int(model_cfg.unfreeze_every) if model_cfg.gradual_unfreezing else 0
    top = len(mults) - 1
    rules = [no_bias_decay, Rule(STATISTICS_PATTERN, frozen=True, where="BatchNorm running statistics (set, not "
                                 "trained)", must_match=False)]
    for g, (name, pattern) in enumerate(group_patterns(model_cfg.num_layers)):
        start = (top - g) * every
        if mults[g] != 1.0 or start > 0:
            rules.append(Rule(pattern, lr=mults[g], start_step=start, where=f"ULMFiT layer group {g} ({name})",
                              must_match=True))
    return rules


def layer_of(keys: Sequence[str]) -> str:
    keys = [str(k) for k in keys]
    for k in keys:
        if k.startswith("layers_") or k in ("embedding", "classifier", "lm_head"):
            return k
    return "other"


def infer_head(params: dict) -> str:
    return "sequence_classification" if "classifier" in params else "language_model"


def forward_flops(cfg: Any) -> dict[str, float]:
    """2 x MACs of one LM forward pass: the 4 gate matmuls of each layer and the decoder."""
    m = cfg.model
    positions = cfg.train.batch_size * cfg.data.max_seq_length
    out = {f"layers_{i}": positions * 4 * hid * (d + hid) for i, (d, hid) in enumerate(m.layer_sizes)}
    out["decoder"] = positions * m.embed_dim * m.vocab_size
    return {k: 2.0 * v for k, v in out.items()}


def step_flops(cfg: Any):
    from ptm_jax.bench.flops import StepFlops

    return StepFlops(forward=forward_flops(cfg), recompute=0.0,
                     tokens=cfg.train.batch_size * cfg.data.max_seq_length)


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {k: np.array(v) for k, v in example.items()}
    for k in ("input_ids", "target_ids"):
        out[k] = rng.integers(3, max(cfg.model.vocab_size, 4), out[k].shape).astype(np.int32)
    out["target_weights"] = np.ones(out["target_weights"].shape, np.float32)
    return out
