"""ConSERT's training sources (``data/tasks/registry.py``: 'sentences', 'positive_pairs', 'nli_pairs'), read from
``finetune.data_dir``: a text file with one sentence per line, a GLUE TSV in the standard layout, or a GLUE folder
(its STS-B/train.tsv)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ptm_jax.data.tasks.glue import GLUE_TASKS, get_task, read_glue, utf8_error
from ptm_jax.errors import ConfigError, DataError


def read_sentences(path: str | Path) -> list[str]:
    """Non-empty lines of a UTF-8 text file (one sentence each); a DataError names the file when it is
    missing, unreadable, not UTF-8 or holds no sentence."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: sentences file not found; finetune.data_dir names a text file with one sentence "
                        "per line, a GLUE TSV or a GLUE folder holding STS-B/")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise utf8_error(str(p), "sentences") from None
    except OSError as e:
        raise DataError(f"{p}: cannot read the sentences file ({e.strerror or e})") from None
    out = [line.strip() for line in text.splitlines() if line.strip()]
    if not out:
        raise DataError(f"{p}: no sentences (the file is empty or blank); put one sentence per line")
    return out


def glue_task_of(path: Path) -> tuple[str, str]:
    """(task, split) of a GLUE TSV in the standard layout <glue>/<TASK dir>/<split>.tsv."""
    for name, spec in GLUE_TASKS.items():
        if spec.dirname == path.parent.name:
            for split, (fname, _) in spec.splits.items():
                if fname == path.name:
                    return name, split
    raise ConfigError(f"finetune.data_dir={str(path)!r}: a .tsv file must be a GLUE split in the standard layout "
                      "(e.g. .../STS-B/train.tsv); give plain text with one sentence per line otherwise")


def glue_pair_file(path: Path, where: str, tasks: str):
    """(task, split, spec) of the labelled GLUE pair TSV that ``where`` (a supervised ConSERT variant) reads from
    finetune.data_dir; a ConfigError naming the file for a folder or other file, and for a single-sentence task.
    ``tasks``: the pair tasks to suggest (e.g. 'STS-B, MRPC, RTE')."""
    if path.is_dir() or path.suffix != ".tsv":
        raise ConfigError(f"{where} needs labelled sentence pairs: set finetune.data_dir to a GLUE pair TSV with "
                          f"labels (e.g. <glue>/{tasks.split(',')[0].strip()}/train.tsv), not {path}")
    task, split = glue_task_of(path)
    spec = get_task(task)
    if not spec.is_pair:
        raise ConfigError(f"{where}: {path} ({spec.name}) holds single sentences; use a pair task ({tasks})")
    return task, split, spec


SUPERVISION = ("none", "positive_pairs", "nli", "joint")


def supervision(ccfg) -> str:
    """``consert.supervised`` as one of SUPERVISION (true/false of older configs: 'positive_pairs'/'none');
    a ConfigError naming the field for any other value."""
    value = ccfg.supervised
    if isinstance(value, bool):
        return "positive_pairs" if value else "none"
    if value not in SUPERVISION:
        raise ConfigError(f"consert.supervised={value!r} is not one of {', '.join(SUPERVISION)} (true/false "
                          "are accepted as 'positive_pairs'/'none')")
    return value


def is_positive(spec, label) -> bool:
    """A pair the task marks as similar: STS-B score >= 4 of 5, MRPC paraphrase, entailment."""
    if spec.labels is None:
        return label is not None and float(label) >= 4.0
    return label is not None and spec.labels[label] in ("1", "entailment")


def positive_pairs(path: Path) -> tuple[list[tuple[str, str]], str]:
    """(pairs, description): the positive pairs of a GLUE pair TSV (``consert.supervised='positive_pairs'``)."""
    task, split, spec = glue_pair_file(path, "consert.supervised='positive_pairs'", "STS-B, MRPC, RTE")
    rows, _ = read_glue(path.parent.parent, task, split)
    pairs = [(e.text_a, e.text_b) for e in rows if is_positive(spec, e.label)]
    if not pairs:
        raise DataError(f"{path}: no positive pairs (STS-B score >= 4, paraphrase or entailment label)")
    return pairs, f"{len(pairs)} positive pairs of {len(rows)} ({spec.name}) from {path}"


def labelled_pairs(path: Path, mode: str) -> tuple[list[tuple[str, str]], list[int], Any, str]:
    """(pairs, class indices, task spec, description) of a labelled GLUE pair TSV; ConfigErrors for a folder, a
    file outside the GLUE layout, a single-sentence task, a regression task or a split without labels."""
    where = f"consert.supervised={mode!r}"
    task, split, spec = glue_pair_file(path, where, "MNLI, RTE, WNLI, QNLI, MRPC, QQP")
    if spec.is_regression:
        raise ConfigError(f"{where}: {path} ({spec.name}) is a regression task (similarity scores), not classes; "
                          "the NLI loss needs class labels: use MNLI, RTE, WNLI, QNLI, MRPC or QQP (for STS-B "
                          "pairs use consert.supervised='positive_pairs')")
    if spec.splits[split][1].label is None:
        raise ConfigError(f"{where}: {path} ({spec.name} {split}) has no labels (a GLUE test split); use the "
                          "task's train.tsv")
    rows, report = read_glue(path.parent.parent, task, split)
    if not rows:
        raise DataError(f"{path}: no labelled pairs")
    pairs = [(e.text_a, e.text_b) for e in rows]
    labels = [int(e.label) for e in rows]
    counts = ", ".join(f"{k} {v}" for k, v in report.label_counts.items())
    return pairs, labels, spec, f"{len(rows)} labelled pairs ({spec.name}, {spec.num_labels} classes: {counts}) " \
                                f"from {path}"
