"""The config sections of finetuning tasks and of a family's finetuning: ``[squad]``, ``[packing]``, ``[gpt_finetune]``.

A finetuning job owns the section of its name (``jobs/registry.py``); the settings that only one task or one
family reads live in a section of their own, declared here once (:class:`TaskSection`) and read the same way:
``config.py`` reads every section of this table into ``RunConfig.plugins`` beside the jobs' and adapters',
``config.section(cfg, name)`` returns it (the defaults when the run sets none), and ``moved`` maps a former
``finetune.<field>`` to its new key so the unknown-key error of an old config names it.

- ``[squad]``: the span-QA tasks squad and squad_v2 (google-research/bert run_squad.py's flags).
- ``[packing]``: packed sequence-classification rows (``data/tasks/packing.py``) for the families with the
  capability 'pack_examples' (BERT).
- ``[gpt_finetune]``: GPT's finetuning loss (``families/gpt/classification.py``); named after the family and the
  stage, as ``[gpt]`` alone would read as the model's settings. Its dataclass lives in the family package.

This module sits low in the import graph: it imports the plug-in table and the families' config dataclasses
(no JAX), so ``config.py`` can read the sections without loading the finetuning code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ptm_jax.errors import ConfigError
from ptm_jax.families.gpt.config import GptFinetuneConfig
from ptm_jax.plugins import PluginTable


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


@dataclasses.dataclass(frozen=True)
class TaskSection:
    """One top-level config section read by a task or by a family's finetuning."""

    name: str
    config: type
    owner: str
    """Who reads it, for messages ('the span-QA tasks squad and squad_v2')."""
    moved: dict[str, str] = dataclasses.field(default_factory=dict)
    """Former ``finetune.<field>`` -> its field here."""


_TABLE: PluginTable[TaskSection] = PluginTable("ptm_jax.data.tasks", "task config section", "section")
get = _TABLE.get
table = _TABLE.all
sections = _TABLE.sections
"""``sections()``: config section name -> dataclass."""

for _section in (
    TaskSection("squad", SquadConfig, "the span-QA tasks squad and squad_v2",
                {f.name: f.name for f in dataclasses.fields(SquadConfig)}),
    TaskSection("packing", PackingConfig, "packed sequence classification, for BERT",
                {"pack_examples": "pack_examples", "max_examples_per_row": "max_examples_per_row"}),
    TaskSection("gpt_finetune", GptFinetuneConfig, "GPT's finetuning", {"lm_coef": "lm_coef"}),
):
    _TABLE.register(_section)


def moved_key(field: str) -> str | None:
    """Where a former ``finetune.<field>`` lives now ('squad.doc_stride (the [squad] section of ...)'), or None."""
    for s in table().values():
        if field in s.moved:
            return f"{s.name}.{s.moved[field]} (the [{s.name}] section of {s.owner})"
    return None
