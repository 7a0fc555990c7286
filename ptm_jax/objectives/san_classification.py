"""Sentence-pair classification with a SAN answer module: the single-task model that an MT-DNN job with
``finetune.mtdnn_answer=san`` keeps as a pair task's best model (``train/multi_task.py``), scored again by
``ptm eval`` (Liu et al. 2019 Sec. 3.1; ``models/san.py``).

The params directory names head ``san_classification`` and holds the family's trunk and the answer module as
'classifier'; its ``ptm.json`` ``san`` entry ({steps, step_dropout}) rebuilds the module as it was trained.
Featurisation, metrics and prediction files are the spine's sequence classifier's; the outputs are the log
of the averaged step predictions, so the argmax is the predicted label.
"""
from __future__ import annotations

from typing import Any, Sequence

from ptm_jax.data.tasks.glue import Example, TaskSpec
from ptm_jax.errors import ConfigError
from ptm_jax.objectives.classification import SequenceClassificationObjective

SAN_HEAD = "san_classification"


class SanClassificationObjective(SequenceClassificationObjective):
    head = SAN_HEAD

    def __init__(self, model_cfg: Any, spec: TaskSpec, train: Sequence[Example] | None, dev: Sequence[Example],
                 tokenizer, fcfg: Any, model_info: dict | None = None):
        from ptm_jax.objectives.multi_task import san_settings

        san = (model_info or {}).get("san") or san_settings(fcfg)
        if spec.is_regression or not spec.is_pair:
            raise ConfigError(f"task {spec.name}: the SAN answer module classifies sentence pairs; a "
                              f"{SAN_HEAD} model cannot score a single-sentence or regression task")
        self.san = {"steps": int(san["steps"]), "step_dropout": float(san["step_dropout"])}
        self.extra_info = {"san": self.san}
        super().__init__(model_cfg, spec, train, dev, tokenizer, fcfg)

    def build_model(self, model_cfg: Any):
        return san_classifier(model_cfg, self.num_labels, self.san, self.fcfg.classifier_dropout)


def san_classifier(model_cfg: Any, num_labels: int, san: dict, dropout: float):
    """The model of a ``san_classification`` params directory: the family's encoder under its trunk key and the
    SAN answer module as 'classifier' (``models/san.EncoderWithSAN``), ``san`` = {steps, step_dropout}."""
    from ptm_jax.families import registry
    from ptm_jax.models.san import EncoderWithSAN
    from ptm_jax.objectives.task_data import task_head

    return EncoderWithSAN(task_head(model_cfg, "encoder"), model_cfg, registry.get(model_cfg.family).trunk,
                          num_labels, int(san["steps"]), dropout, float(san["step_dropout"]))
