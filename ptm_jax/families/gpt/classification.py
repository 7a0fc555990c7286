"""GPT finetuning through the input transformations (Radford et al. 2018 Sec. 3.2-3.3): GLUE-style
classification / regression and multiple choice (SWAG).

L3 = L2(task) + lambda * L1(LM on the task's own tokens), lambda = ``gpt_finetune.lm_coef`` (0.5 in
the paper). The classifier is a linear layer on the final ``[e]`` state; for similarity tasks the ``[e]`` states
of both orders are summed first. Metrics, predictions files and best-checkpoint selection are the BERT
path's (``ptm_jax.objectives.classification``), so GPT and BERT numbers are scored identically.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config import FinetuneConfig
from ptm_jax.families.gpt.config import GptConfig, GptFinetuneConfig
from ptm_jax.data.tasks.glue import Example, TaskSpec
from ptm_jax.errors import DataError
from ptm_jax.families.gpt.transforms import gpt_features, transform_for
from ptm_jax.objectives.classification import SequenceClassificationObjective
from ptm_jax.objectives.language_model import lm_terms
from ptm_jax.objectives.multiple_choice import MultipleChoiceObjective


def featurize(examples: Sequence[Example], tokenizer, max_len: int, regression: bool, mode: str
              ) -> dict[str, np.ndarray]:
    pairs = [e.text_b or "" for e in examples] if mode != "classification" else None
    feats = gpt_features(tokenizer, [e.text_a for e in examples], pairs, max_len, mode)
    labels = [(-1 if e.label is None else e.label) for e in examples]
    feats["labels"] = np.asarray(labels, np.float32 if regression else np.int32)
    feats["weights"] = np.ones(len(examples), np.float32)
    return feats


def lm_normalizer(batch) -> jax.Array:
    return jnp.sum(batch["lm_weights"] * batch["weights"][:, None, None])


def with_lm_loss(total, terms, lm_logits, batch, normalizers, coef: float):
    """task loss + coef x LM loss over the real tokens of every view (weight-0 rows excluded)."""
    if coef:
        lm = lm_terms(lm_logits, batch["lm_targets"], batch["lm_weights"] * batch["weights"][:, None, None])
        terms["lm_loss"] = lm["lm_loss"]
        total = total + coef * lm["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0)
    return total, terms


class GptViews:
    """What the GPT task objectives share: inputs of V views per example ([B, V, L] ids, [B, V] extract index),
    a model returning (task logits, LM logits), and the loss task + lm_coef x LM. The constructors take the
    ``[gpt_finetune]`` section as ``gpt_finetune`` (its defaults when None; ``config.bind_sections``)."""

    config_sections = ("gpt_finetune",)
    lm_coef: float

    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["segment_ids"], b["position_ids"], b["extract_index"])

    def normalizers(self, batch):
        return {**super().normalizers(batch), "lm": lm_normalizer(batch)}

    def _apply(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["segment_ids"], batch["position_ids"],
                                batch["extract_index"], deterministic=not train, rngs=rngs)

    def _logits(self, params, batch, rng, train: bool):
        return self._apply(params, batch, rng, train)[0]

    def loss(self, params, batch, rng, normalizers, train: bool):
        logits, lm_logits = self._apply(params, batch, rng, train)
        total, terms = self.task_loss(logits, batch, normalizers)
        return with_lm_loss(total, terms, lm_logits, batch, normalizers, self.lm_coef)


class GptClassificationObjective(GptViews, SequenceClassificationObjective):
    """Sequence classification / regression with a GPT trunk; scoring is inherited from the BERT objective."""

    def __init__(self, model_cfg: GptConfig, spec: TaskSpec, train: Sequence[Example], dev: Sequence[Example],
                 tokenizer, fcfg: FinetuneConfig, *, gpt_finetune: GptFinetuneConfig | None = None):
        self.mode = transform_for(spec.name, spec.is_pair)
        self.lm_coef = (gpt_finetune or GptFinetuneConfig()).lm_coef
        super().__init__(model_cfg, spec, train, dev, tokenizer, fcfg)

    def build_model(self, model_cfg: GptConfig):
        from ptm_jax.families.gpt.task_heads import GPTForSequenceClassification

        return GPTForSequenceClassification(model_cfg, self.num_labels, self.fcfg.classifier_dropout)

    def featurize(self, examples: Sequence[Example], tokenizer) -> dict[str, np.ndarray]:
        return featurize(examples, tokenizer, self.fcfg.max_seq_length, self.regression, self.mode)


class GptMultipleChoiceObjective(GptViews, MultipleChoiceObjective):
    """Multiple choice with a GPT trunk: ``[s] context $ option [e]`` per option, a score per option,
    softmax over the options, plus lambda x LM (Radford et al. 2018 Sec. 3.3)."""

    def __init__(self, model_cfg: GptConfig, fcfg: FinetuneConfig, train, dev, tokenizer, *, name: str = "swag",
                 gpt_finetune: GptFinetuneConfig | None = None):
        self.lm_coef = (gpt_finetune or GptFinetuneConfig()).lm_coef
        super().__init__(model_cfg, fcfg, train, dev, tokenizer, name=name)

    def build_model(self, model_cfg: GptConfig):
        from ptm_jax.families.gpt.task_heads import GPTForMultipleChoice

        return GPTForMultipleChoice(model_cfg, self.fcfg.classifier_dropout)

    def featurize(self, examples, tokenizer) -> dict[str, np.ndarray]:
        n, c = len(examples), len(examples[0].options)
        if any(len(e.options) != c for e in examples):
            raise DataError(f"{self.name}: every example needs the same number of options ({c})")
        feats = gpt_features(tokenizer, [e.context for e in examples for _ in range(c)],
                             [o for e in examples for o in e.options], self.fcfg.max_seq_length, "entailment")
        out = {k: v.reshape((n, c) + v.shape[2:]) for k, v in feats.items()}
        out["labels"] = np.asarray([e.label for e in examples], np.int32)
        out["weights"] = np.ones(n, np.float32)
        return out
