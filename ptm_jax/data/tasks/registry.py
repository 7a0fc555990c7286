"""The task registry: every finetuning task declared once, and GLUE's folder/split resolution in one place.

A :class:`TaskDecl` says what a task is: its reader, its splits, its labels, its metrics (the first one the
primary metric that keeps the best model), the task head it needs of a family (``Finetuning.task_heads``), and
the spine's objective builder (``None``: the family's sequence classifier, ``Finetuning.classifier``). Jobs
(``ptm_jax/jobs``) read tasks from here: the single-task job (``finetune.task``), MT-DNN (``mtdnn.tasks``,
including ``<pair task>_rank`` ranking tasks, :func:`ranking_task`), ConSERT's sentence, positive-pair and
NLI-pair sources, the heads over word features.

GLUE's nine tasks and the diagnostic set AX come from ``data/tasks/glue.py``'s ``GLUE_TASKS`` (labels, file
layout, metrics); :func:`glue_rows` is the one place that turns ``finetune.data_dir`` (a GLUE folder or
'tfds') and a split name ('train', 'dev', 'test': MNLI's matched sets) into examples.

This module sits at the bottom of the import graph: it imports only the error types and the GLUE table (which
itself imports nothing of the spine); readers and builders are named as 'module:function' and imported when
called, so every job and ``config.py`` can ask it without cycles.
"""
from __future__ import annotations

import dataclasses
import difflib
import random
from typing import Any, Callable

from ptm_jax.data.tasks.glue import GLUE_TASKS
from ptm_jax.errors import ConfigError
from ptm_jax.plugins import lazy

RANK_SUFFIX = "_rank"
_SPLITS = "ptm_jax.data.tasks.splits"
PRIMARY = {"cola": "mcc", "stsb": "spearman", "mrpc": "f1", "qqp": "f1"}
"""GLUE tasks whose best model is not chosen by accuracy (GLUE's headline metric of the task)."""


@dataclasses.dataclass(frozen=True)
class TaskDecl:
    """One finetuning task."""

    name: str
    kind: str
    """'classification', 'regression', 'span_qa', 'tagging', 'multiple_choice', 'ranking', 'sentence_pairs'."""
    head: str
    """The task head it needs of a family (``Finetuning.task_heads``): 'sequence_classification', 'question_answering',
    'token_classification', 'multiple_choice', 'encoder'."""
    reader: str
    """'module:function' that reads its files. For the finetuning tasks (:data:`FINETUNE_TASKS`, the ranking tasks)
    a split reader of ``data/tasks/splits.py``, ``(task, data_dir, split, where) -> (examples, source)``, that
    :func:`read` calls; ConSERT's sources name their readers of a path (``jobs/consert/data.py``)."""
    splits: tuple[str, ...]
    metrics: tuple[str, ...]
    """The dev metrics; ``primary`` keeps the best model."""
    primary: str
    data: str
    """What ``finetune.data_dir`` names for it."""
    labels: tuple[str, ...] | None = None
    """The label set; None: regression, or labels read from the training file (CoNLL-2003)."""
    builder: str | None = None
    """'module:function' of the spine's objective builder, (cfg, model_cfg, tokenizer, eval_split, *, train,
    model_info) -> (objective, description); None: the family's sequence classifier (GLUE, embedded). A family
    that supports the task lists it in ``Finetuning.tasks`` (its own builder or this one)."""
    glue: bool = False
    """A GLUE task (read by :func:`glue_rows`)."""
    pair: bool = False


def _glue(name: str) -> TaskDecl:
    spec = GLUE_TASKS[name]
    return TaskDecl(name, "regression" if spec.labels is None else "classification", "sequence_classification",
                    f"{_SPLITS}:glue", tuple(spec.splits), spec.metrics,
                    PRIMARY.get(name, "accuracy"), f"the GLUE folder (holding {spec.dirname}/) or 'tfds'",
                    tuple(spec.labels) if spec.labels else None, glue=True, pair=spec.is_pair)


_SPINE = "ptm_jax.objectives.finetune_registry"
TASKS: dict[str, TaskDecl] = {
    **{name: _glue(name) for name in GLUE_TASKS},
    "embedded": TaskDecl("embedded", "classification", "sequence_classification",
                         f"{_SPLITS}:embedded", ("train", "dev"), ("accuracy",),
                         "accuracy", "nothing (derived from the embedded corpus)", ("0", "1")),
    "squad": TaskDecl("squad", "span_qa", "question_answering", f"{_SPLITS}:squad",
                      ("train", "dev"), ("exact_match", "f1"), "f1",
                      "a folder with train-v1.1.json and dev-v1.1.json, 'PATH/dev-v1.1.json#fold=K/N' or 'tfds'",
                      builder=f"{_SPINE}:build_squad"),
    "squad_v2": TaskDecl("squad_v2", "span_qa", "question_answering", f"{_SPLITS}:squad",
                         ("train", "dev"), ("exact_match", "f1"), "f1",
                         "a folder with train-v2.0.json and dev-v2.0.json, 'PATH/dev-v2.0.json#fold=K/N' or 'tfds'",
                         builder=f"{_SPINE}:build_squad_v2"),
    "conll2003": TaskDecl("conll2003", "tagging", "token_classification", f"{_SPLITS}:conll",
                          ("train", "dev", "test"), ("f1", "precision", "recall"), "f1",
                          "the CoNLL-2003 folder (eng.train/eng.testa/eng.testb) or 'tfds'",
                          builder=f"{_SPINE}:build_conll"),
    "swag": TaskDecl("swag", "multiple_choice", "multiple_choice", f"{_SPLITS}:swag",
                     ("train", "dev", "test"), ("accuracy",), "accuracy",
                     "the SWAG folder (train.csv, val.csv, test.csv)", ("0", "1", "2", "3"),
                     builder=f"{_SPINE}:build_swag"),
    "sentences": TaskDecl("sentences", "sentence_pairs", "encoder", "ptm_jax.jobs.consert.data:read_sentences",
                          ("train",), ("spearman", "pearson"), "spearman",
                          "a text file (one sentence per line), a GLUE TSV or a GLUE folder holding STS-B/"),
    "positive_pairs": TaskDecl("positive_pairs", "sentence_pairs", "encoder",
                               "ptm_jax.jobs.consert.data:positive_pairs", ("train",), ("spearman", "pearson"),
                               "spearman", "a GLUE pair TSV (STS-B score >= 4, paraphrase, entailment)", pair=True),
    "nli_pairs": TaskDecl("nli_pairs", "classification", "encoder", "ptm_jax.jobs.consert.data:labelled_pairs",
                          ("train",), ("spearman", "pearson"), "spearman",
                          "a labelled GLUE pair TSV (e.g. MNLI/train.tsv)", pair=True),
}
"""Every task by name. 'sentences', 'positive_pairs' and 'nli_pairs' are ConSERT's training sources (evaluated
on STS-B dev); '<pair task>_rank' tasks are built by :func:`ranking_task`."""

FINETUNE_TASKS = ("embedded", *(n for n in GLUE_TASKS if n != "ax"), "squad", "squad_v2", "conll2003", "swag")
"""The values of ``finetune.task`` (the single-task job)."""


def key(name: str) -> str:
    """The registry's spelling of a task name ('SST-2' -> 'sst2')."""
    return str(name).lower().replace("-", "")


def ranking_task(name: str) -> TaskDecl:
    """'<pair task>_rank': pairwise ranking built from a GLUE pair task's positive pairs (MT-DNN Sec. 3.1)."""
    base = get(name[: -len(RANK_SUFFIX)])
    if not base.glue or not base.pair:
        raise ConfigError(f"{name}: a ranking task is built from a GLUE sentence-pair task (e.g. mrpc_rank, rte_rank)")
    return TaskDecl(name, "ranking", "sequence_classification", base.reader, ("train", "dev"), ("accuracy",),
                    "accuracy", base.data, None, glue=True, pair=True)


def get(name: str, where: str = "finetune.task", among: tuple[str, ...] | None = None) -> TaskDecl:
    """The task called ``name`` (any spelling of :func:`key`), or a ConfigError naming ``where`` and the choices."""
    k = key(name)
    if k.endswith(RANK_SUFFIX) and (among is None or RANK_SUFFIX in among):
        return ranking_task(k)
    names = among if among is not None else tuple(TASKS)
    if k in TASKS and k in names:
        return TASKS[k]
    close = difflib.get_close_matches(k, [n for n in names if n != RANK_SUFFIX], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{where}={name!r} is not one of: {', '.join(n for n in names if n != RANK_SUFFIX)}.{hint}")


def glue_split(name: str, split: str) -> str:
    """A GLUE split name for 'train', 'dev' or 'test' (MNLI: the matched sets); other names pass through."""
    if key(name) == "mnli" and split in ("dev", "test"):
        return f"{split}_matched"
    return split


def glue_rows(data_dir: str, name: str, split: str, where: str = "finetune.data_dir") -> list:
    """The examples of GLUE task ``name``'s ``split`` ('train', 'dev', 'test' or a GLUE split name) from
    ``data_dir``: a GLUE folder (``glue.read_glue``) or 'tfds' (``glue.glue_from_tfds``). An empty ``data_dir``
    is a ConfigError naming ``where``."""
    from ptm_jax.data.tasks.glue import glue_from_tfds, read_glue

    task = key(name)
    if not data_dir:
        raise ConfigError(f"{where} is empty: set it to the GLUE folder (holding {GLUE_TASKS[task].dirname}/) "
                          f"or to 'tfds' (--glue-dir)")
    split = glue_split(task, split)
    return glue_from_tfds(task, split) if data_dir == "tfds" else read_glue(data_dir, task, split)[0]


def read(name: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    """(examples, source) of task ``name``'s ``split`` ('train', 'dev', 'test') from ``data_dir`` (what ``where``
    names), through the task's split reader (``TaskDecl.reader``). Every finetuning job reads its tasks here."""
    decl, task = get(name, among=(*FINETUNE_TASKS, RANK_SUFFIX)), key(name)
    base = task[: -len(RANK_SUFFIX)] if task.endswith(RANK_SUFFIX) else task  # a ranking task reads its GLUE task
    return lazy(*decl.reader.split(":"))(base, data_dir, split, where)


def take_subset(examples: list, n: int, seed: int) -> list:
    """The first ``n`` examples after ``random.Random(seed).shuffle`` of the file order (0: all):
    ``finetune.train_subset`` / ``subset_seed`` for every task."""
    if n <= 0 or n >= len(examples):
        return list(examples)
    rows = list(examples)
    random.Random(seed).shuffle(rows)
    return rows[:n]


def builder(decl: TaskDecl) -> Callable[..., Any] | None:
    """The spine's objective builder of ``decl`` (imported when called), or None (the family's classifier)."""
    if decl.builder is None:
        return None
    return lazy(*decl.builder.split(":"))
