"""Prediction writers: GLUE submission TSVs, SQuAD prediction JSONs, conlleval tag files.

GLUE: one `<Task>.tsv` per test set with header `index<TAB>prediction`, labels spelled as in the
task's training files (0/1, entailment/not_entailment, MNLI class names, STS-B scores), file names
as the GLUE server expects (CoLA.tsv, SST-2.tsv, MNLI-m.tsv, MNLI-mm.tsv, AX.tsv, ...).
SQuAD: predictions.json (qid -> text), nbest_predictions.json and null_odds.json, the names and
layout of google-research/bert run_squad.py. CoNLL: `token gold pred` per line, blank line between
sentences, which conlleval reads (last two columns). Every file is written whole through ptm_jax/fs.py
(a temporary sibling and os.replace on local disk, one object upload on gs://), so a reader never sees
half a file.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import numpy as np

from ptm_jax.data.tasks.glue import get_task
from ptm_jax.errors import ConfigError, DataError


def atomic_write_text(path: str | os.PathLike, text: str) -> str:
    """Write `text` to `path` (local or gs://) whole or not at all; returns the path as a string."""
    from ptm_jax import fs

    fs.write_text_atomic(path, text)
    return fs.to_str(path)


def glue_submission_name(task: str, split: str = "test") -> str:
    """GLUE server file name of a task's test predictions (e.g. SST-2.tsv, MNLI-mm.tsv)."""
    spec = get_task(task)
    if split not in spec.submission:
        raise ConfigError(f"GLUE task {spec.name!r} takes submissions for {sorted(spec.submission)}, "
                          f"not {split!r}")
    return spec.submission[split]


def write_glue_submission(out_dir: str | os.PathLike, task: str, predictions: Sequence | np.ndarray,
                          split: str = "test", indices: Sequence[Any] | None = None, suffix: str = "") -> str:
    """Write one GLUE test-set submission file; `predictions` are class ids ([N] or [N, C] logits)
    or STS-B scores. `indices` default to 0..N-1 (the test files' index column). `suffix` goes before
    '.tsv' (dev predictions in the submission format: 'SST-2.dev.tsv')."""
    spec = get_task(task)
    name = glue_submission_name(spec.name, split)
    name = name[: -len(".tsv")] + suffix + ".tsv" if suffix else name
    pred = np.asarray(predictions)
    if spec.labels is not None and pred.ndim == 2:
        pred = pred.argmax(axis=-1)
    if pred.ndim == 2 and pred.shape[1] == 1:
        pred = pred[:, 0]
    if pred.ndim != 1:
        raise ConfigError(f"{name}: predictions must be one value per example, got shape {pred.shape}")
    idx = list(range(len(pred))) if indices is None else list(indices)
    if len(idx) != len(pred):
        raise ConfigError(f"{name}: {len(pred)} predictions but {len(idx)} indices")
    lines = ["index\tprediction"]
    if spec.labels is None:
        lines += [f"{i}\t{float(v):.3f}" for i, v in zip(idx, pred.tolist())]
    else:
        bad = [int(v) for v in pred.tolist() if not 0 <= int(v) < len(spec.labels)]
        if bad:
            raise ConfigError(f"{name}: class id {bad[0]} outside 0..{len(spec.labels) - 1}")
        lines += [f"{i}\t{spec.labels[int(v)]}" for i, v in zip(idx, pred.tolist())]
    return atomic_write_text(os.path.join(os.fspath(out_dir), name), "\n".join(lines) + "\n")


def _json_ready(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def write_squad_predictions(out_dir: str | os.PathLike, predictions: Mapping[str, str],
                            nbest: Mapping[str, Any] | None = None,
                            null_odds: Mapping[str, float] | None = None) -> dict[str, str]:
    """Write predictions.json (+ nbest_predictions.json, + null_odds.json when given, non-empty).
    Returns the written paths by kind."""
    out_dir = os.fspath(out_dir)
    written = {"predictions": atomic_write_text(
        os.path.join(out_dir, "predictions.json"), json.dumps(_json_ready(predictions), indent=4) + "\n")}
    if nbest is not None:
        written["nbest"] = atomic_write_text(os.path.join(out_dir, "nbest_predictions.json"),
                                             json.dumps(_json_ready(nbest), indent=4) + "\n")
    if null_odds:
        written["null_odds"] = atomic_write_text(os.path.join(out_dir, "null_odds.json"),
                                                 json.dumps(_json_ready(null_odds), indent=4) + "\n")
    return written


def write_conll_predictions(path: str | os.PathLike, words: Sequence[Sequence[str]],
                            gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> str:
    """Write `token gold pred` lines, one blank line after each sentence (conlleval input)."""
    if not len(words) == len(gold) == len(pred):
        raise DataError(f"{len(words)} sentences of words, {len(gold)} of gold tags, {len(pred)} of "
                        f"predicted tags; they must match")
    out: list[str] = []
    for i, (w, g, p) in enumerate(zip(words, gold, pred)):
        if not len(w) == len(g) == len(p):
            raise DataError(f"sentence {i}: {len(w)} words, {len(g)} gold and {len(p)} predicted tags")
        for k, cols in enumerate(zip(w, g, p)):
            if any(not c or any(ch.isspace() for ch in c) for c in cols):
                raise DataError(f"sentence {i} token {k}: {cols!r} has an empty or whitespace-containing "
                                f"field, which conlleval cannot read")
            out.append(" ".join(cols))
        out.append("")
    return atomic_write_text(path, "\n".join(out) + ("\n" if out else ""))
