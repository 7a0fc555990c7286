"""GLUE metrics in numpy: Matthews correlation, accuracy, F1, Pearson, Spearman; the GLUE score.

Metric per task follows the GLUE paper (Wang et al. 2018, sec. 3) and its leaderboard: CoLA MCC;
SST-2, QNLI, RTE, WNLI accuracy; MNLI matched and mismatched accuracy; MRPC and QQP F1 of class 1
and accuracy; STS-B Pearson and Spearman. The GLUE score is the mean of task scores where a task
with two metrics (MRPC, QQP, STS-B, and MNLI's m/mm pair) is averaged first; AX is not scored.
Values are fractions in [0, 1] (multiply by 100 for the leaderboard's units).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ptm_jax.errors import ConfigError


def _as_1d(x: Sequence | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ConfigError(f"{name} must be one value per example, got shape {a.shape}")
    return a


def _pair(preds, labels) -> tuple[np.ndarray, np.ndarray]:
    p, y = _as_1d(preds, "preds"), _as_1d(labels, "labels")
    if p.shape != y.shape:
        raise ConfigError(f"preds ({p.shape[0]}) and labels ({y.shape[0]}) differ in length")
    if p.size == 0:
        raise ConfigError("no examples to score")
    return p, y


def accuracy(preds, labels) -> float:
    """Fraction of exact matches."""
    p, y = _pair(preds, labels)
    return float(np.mean(p == y))


def f1_binary(preds, labels, positive: int = 1) -> float:
    """F1 of the positive class; 0.0 when there is no true and no predicted positive."""
    p, y = _pair(preds, labels)
    tp = float(np.sum((p == positive) & (y == positive)))
    fp = float(np.sum((p == positive) & (y != positive)))
    fn = float(np.sum((p != positive) & (y == positive)))
    denom = 2 * tp + fp + fn
    return 0.0 if denom == 0 else 2 * tp / denom


def matthews_corrcoef(preds, labels) -> float:
    """Matthews correlation (multi-class form, Gorodkin 2004); 0.0 when undefined (one class)."""
    p, y = _pair(preds, labels)
    classes, inv = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    yi, pi = inv[: len(y)], inv[len(y):]
    cm = np.zeros((k, k), dtype=np.float64)
    np.add.at(cm, (yi, pi), 1.0)
    t_sum, p_sum = cm.sum(axis=1), cm.sum(axis=0)
    n, correct = cm.sum(), np.trace(cm)
    cov_yp = correct * n - t_sum @ p_sum
    cov_pp = n * n - p_sum @ p_sum
    cov_yy = n * n - t_sum @ t_sum
    if cov_pp == 0 or cov_yy == 0:
        return 0.0
    return float(cov_yp / np.sqrt(cov_yy * cov_pp))


def pearson(preds, labels) -> float:
    """Pearson correlation; 0.0 when either side is constant (scipy returns nan there)."""
    p, y = _pair(preds, labels)
    p = p.astype(np.float64) - p.mean(dtype=np.float64)
    y = y.astype(np.float64) - y.mean(dtype=np.float64)
    denom = np.sqrt(np.sum(p * p) * np.sum(y * y))
    if denom == 0:
        return 0.0
    return float(np.clip(np.sum(p * y) / denom, -1.0, 1.0))


def rank_average(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given the mean of the ranks they span (scipy.stats.rankdata 'average')."""
    a = np.asarray(x)
    order = np.argsort(a, kind="stable")
    sorted_a = a[order]
    new_group = np.r_[True, sorted_a[1:] != sorted_a[:-1]]
    group_id = np.cumsum(new_group) - 1
    starts = np.flatnonzero(new_group)
    ends = np.r_[starts[1:], len(a)]  # exclusive
    mean_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(a), dtype=np.float64)
    ranks[order] = mean_rank[group_id]
    return ranks


def spearman(preds, labels) -> float:
    """Spearman correlation: Pearson of average ranks (ties share their mean rank)."""
    p, y = _pair(preds, labels)
    return pearson(rank_average(p), rank_average(y))


_METRIC_FNS = {"accuracy": accuracy, "f1": f1_binary, "mcc": matthews_corrcoef,
               "pearson": pearson, "spearman": spearman}

TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",), "sst2": ("accuracy",), "mrpc": ("f1", "accuracy"), "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"), "mnli": ("accuracy",), "mnli_matched": ("accuracy",),
    "mnli_mismatched": ("accuracy",), "qnli": ("accuracy",), "rte": ("accuracy",),
    "wnli": ("accuracy",), "ax": ("mcc",),
}


def _task_key(task: str) -> str:
    key = task.lower().replace("-", "")
    aliases = {"mnlim": "mnli_matched", "mnlimm": "mnli_mismatched", "mnli_m": "mnli_matched",
               "mnli_mm": "mnli_mismatched", "diagnostic": "ax"}
    key = aliases.get(key, key)
    if key not in TASK_METRICS:
        raise ConfigError(f"unknown GLUE task {task!r}; choose one of {sorted(TASK_METRICS)}")
    return key


def task_metrics(task: str, preds, labels) -> dict[str, float]:
    """The task's GLUE metrics. `preds` are class ids, or [N, C] logits (arg-maxed); STS-B scores."""
    key = _task_key(task)
    p = np.asarray(preds)
    if key != "stsb" and p.ndim == 2 and p.shape[1] > 1:
        p = p.argmax(axis=-1)
    return {name: _METRIC_FNS[name](p, labels) for name in TASK_METRICS[key]}


def glue_score(per_task: Mapping[str, Mapping[str, float]]) -> float:
    """Mean over tasks of each task's score (its metrics averaged first); AX is left out.

    MNLI may come as one entry 'mnli' holding both accuracies (any two metric values) or as
    'mnli_matched' and 'mnli_mismatched' entries; either way the pair counts as one task whose score
    is the mean of matched and mismatched accuracy, as on the GLUE leaderboard.
    """
    scores: dict[str, float] = {}
    mnli_parts: list[float] = []
    for task, metrics in per_task.items():
        key = _task_key(task)
        if key == "ax":
            continue
        if not metrics:
            raise ConfigError(f"GLUE task {task!r} has no metric values")
        values = [float(v) for v in metrics.values()]
        if key in ("mnli_matched", "mnli_mismatched"):
            mnli_parts.append(float(np.mean(values)))
        else:
            scores[key] = float(np.mean(values))
    if mnli_parts:
        if "mnli" in scores:
            raise ConfigError("give MNLI either as 'mnli' or as 'mnli_matched'/'mnli_mismatched', not both")
        scores["mnli"] = float(np.mean(mnli_parts))
    if not scores:
        raise ConfigError("glue_score needs at least one scored task")
    return float(np.mean(list(scores.values())))
