"""The config sections that one task or one family's finetuning reads: ``[squad]``, ``[packing]``, the families' own

The tasks' are declared here; a family declares its own in its ``Finetuning.sections`` (GPT's ``[gpt_finetune]``).

A finetuning job owns the section of its name (``jobs/registry.py``); the settings that only one task or one
family reads live in a section of their own (``plugins.ConfigSection``), declared once (the tasks' here, a
family's in its package) and read the same way:
``config.py`` reads every section of this table into ``RunConfig.plugins`` beside the jobs' and adapters',
``config_loading.section(cfg, name)`` returns it (the defaults when the run sets none), and ``moved`` maps a former
``finetune.<field>`` to its new key so the unknown-key error of an old config names it.

- ``[squad]``: the span-QA tasks squad and squad_v2 (google-research/bert run_squad.py's flags).
- ``[tagging]``: the output layer of every word tagger (CoNLL-2003 under the ``task`` job's token-classification
  head and under the ``features`` job's BiLSTM): a softmax per word or a linear-chain CRF (``models/crf.py``).
- ``[packing]``: packed sequence-classification rows (``data/tasks/packing.py``) for the families with the
  capability 'pack_examples' (BERT).
- a family's own, from its registry record: ``[gpt_finetune]``, GPT's finetuning loss
  (``families/gpt/classification.py``), named after the family and the stage, as ``[gpt]`` alone would read as
  the model's settings.

This module sits low in the import graph: it imports the plug-in record and the error type; the families'
sections are read from the family registry when asked, so ``config.py`` can read every section without loading
the finetuning code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ptm_jax.errors import ConfigError
from ptm_jax.plugins import ConfigSection


@dataclass
class SquadConfig:
    """SQuAD v1.1 / v2.0 features and answers (google-research/bert run_squad.py defaults; ``objectives/span_qa.py``,
    ``data/tasks/squad_features.py``, ``evaluate/squad_postprocess.py``)."""

    doc_stride: int = 128
    """Windows over a long document start this many pieces apart."""
    max_query_length: int = 64
    """The question is cut to this many pieces."""
    n_best_size: int = 20
    """Start and end candidates per window, and the answers kept per question (nbest_predictions.json)."""
    max_answer_length: int = 30
    """The longest answer predicted, in pieces."""
    null_score_threshold: float = 0.0
    """squad_v2: the answer is empty when its null odds exceed this."""

    def validate(self, where: str = "squad") -> None:
        for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class PackingConfig:
    """Several short training examples per row of sequence classification (``data/tasks/packing.py``,
    ``objectives/packed_classification.py``), for a family with the capability 'pack_examples' (BERT)."""

    pack_examples: bool = False
    """Pack the training examples, attention kept inside each example; finetune.batch_size then counts rows.
    Evaluation stays one example per row."""
    max_examples_per_row: int = 8
    """With pack_examples: at most this many examples share a row."""

    def validate(self, where: str = "packing") -> None:
        if self.max_examples_per_row < 1:
            raise ConfigError(f"{where}.max_examples_per_row must be >= 1, got {self.max_examples_per_row}")


TAG_SCHEMES = ("none", "iob1", "iob2", "bioes")
"""Tag schemes whose transition constraints the CRF knows (``models/crf.allowed_transitions``)."""


@dataclass
class TaggingConfig:
    """The output layer of a word tagger (``objectives/tagging.py``; the ``task`` job's token classification and
    the ``features`` job's BiLSTM tagger read it alike)."""

    head: str = "softmax"
    """'softmax': a label per word by its own softmax (cross-entropy per word). 'crf': a linear-chain CRF over
    the words' scores (Lample et al. 2016 Sec. 2.2; ``models/crf.py``): the loss is the sentence's negative
    log-likelihood (forward algorithm) per labelled word, the prediction the Viterbi path."""
    crf_constraints: str = "none"
    """With head='crf': transitions forbidden by a tag scheme ('iob1', 'iob2', 'bioes') get a large negative
    score; 'none' lets the CRF learn every transition. The CoNLL-2003 reader gives IOB2 tags."""

    def validate(self, where: str = "tagging") -> None:
        if self.head not in ("softmax", "crf"):
            raise ConfigError(f"{where}.head={self.head!r} must be 'softmax' or 'crf'")
        if self.crf_constraints not in TAG_SCHEMES:
            raise ConfigError(f"{where}.crf_constraints={self.crf_constraints!r} is not a tag scheme the CRF knows; "
                              f"use one of {', '.join(TAG_SCHEMES)}")


TASK_SECTIONS: tuple[ConfigSection, ...] = (
    ConfigSection("squad", SquadConfig, "the span-QA tasks squad and squad_v2",
                  {f.name: f.name for f in dataclasses.fields(SquadConfig)}),
    ConfigSection("tagging", TaggingConfig, "the word taggers (conll2003 under the task and features jobs)"),
    ConfigSection("packing", PackingConfig, "packed sequence classification, for the families that pack",
                  {"pack_examples": "pack_examples", "max_examples_per_row": "max_examples_per_row"}),
)


def table() -> dict[str, ConfigSection]:
    """Section name -> record: the tasks' (:data:`TASK_SECTIONS`) and every registered family's
    (``Finetuning.sections``)."""
    from ptm_jax.families import registry

    own = [sec for fam in registry.families().values() for sec in fam.finetuning.sections]
    return {sec.name: sec for sec in (*TASK_SECTIONS, *own)}


def sections() -> dict[str, type]:
    """Config section name -> dataclass."""
    return {name: sec.config for name, sec in table().items()}


def moved_key(field: str) -> str | None:
    """Where a former ``finetune.<field>`` lives now ('squad.doc_stride (the [squad] section of ...)'), or None."""
    for s in table().values():
        if field in s.moved:
            return f"{s.name}.{s.moved[field]} (the [{s.name}] section of {s.owner})"
    return None
