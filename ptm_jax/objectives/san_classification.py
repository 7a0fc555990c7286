"""Sentence-pair classification with a SAN answer module: the single-task model that an MT-DNN job with
``mtdnn.answer=san`` keeps as a pair task's best model (``jobs/mtdnn/job.py``), scored again by
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


def san_settings(mcfg: Any) -> dict[str, Any]:
    """``mtdnn.san_steps`` and ``mtdnn.san_step_dropout``, checked (``mtdnn.answer`` is checked by the config's
    Literal type)."""
    if isinstance(mcfg.san_steps, bool) or not isinstance(mcfg.san_steps, int) or mcfg.san_steps < 1:
        raise ConfigError(f"mtdnn.san_steps={mcfg.san_steps!r}: the SAN answer module needs at least 1 reasoning "
                          "step (Liu et al. 2018 use 5)")
    if not 0.0 <= mcfg.san_step_dropout < 1.0:
        raise ConfigError(f"mtdnn.san_step_dropout={mcfg.san_step_dropout!r} must be in [0, 1) (the probability of "
                          "dropping one step's prediction in training; 0.1 in Liu et al. 2018)")
    return {"steps": int(mcfg.san_steps), "step_dropout": float(mcfg.san_step_dropout)}


class SanClassificationObjective(SequenceClassificationObjective):
    head = SAN_HEAD

    def __init__(self, model_cfg: Any, spec: TaskSpec, train: Sequence[Example] | None, dev: Sequence[Example],
                 tokenizer, fcfg: Any, model_info: dict | None = None, mcfg: Any = None):
        san = (model_info or {}).get("san")
        if not san:  # a model saved without its settings: those of the run's [mtdnn] section
            if mcfg is None:
                raise ConfigError(f"the {SAN_HEAD} model's ptm.json has no 'san' settings (steps, step_dropout); "
                                  "evaluate a model saved by an MT-DNN job (mtdnn/<task>/best)")
            san = san_settings(mcfg)
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

    return EncoderWithSAN(task_head(model_cfg, "encoder"), model_cfg, registry.get(model_cfg.family).layout.trunk,
                          num_labels, int(san["steps"]), dropout, float(san["step_dropout"]))
