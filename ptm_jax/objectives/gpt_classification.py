"""GPT finetuning on GLUE-style tasks through the input transformations (Radford et al. 2018 Sec. 3.2-3.3).

L3 = L2(task) + lambda * L1(LM on the task's own tokens), lambda = ``finetune.lm_coef`` (0.5 in the
paper). The classifier is a linear layer on the final ``[e]`` state; for similarity tasks the ``[e]`` states
of both orders are summed first. Metrics, predictions files and best-checkpoint selection are the BERT
path's (``ptm_jax.objectives.classification``), so GPT and BERT numbers are scored identically.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import FinetuneConfig, ModelConfig
from ptm_jax.data.tasks.glue import Example, TaskSpec
from ptm_jax.data.tasks.gpt_transforms import gpt_features, transform_for
from ptm_jax.objectives.causal_lm import lm_terms
from ptm_jax.objectives.classification import SequenceClassificationObjective


def featurize(examples: Sequence[Example], tokenizer, max_len: int, regression: bool, mode: str
              ) -> dict[str, np.ndarray]:
    pairs = [e.text_b or "" for e in examples] if mode != "classification" else None
    feats = gpt_features(tokenizer, [e.text_a for e in examples], pairs, max_len, mode)
    labels = [(-1 if e.label is None else e.label) for e in examples]
    feats["labels"] = np.asarray(labels, np.float32 if regression else np.int32)
    feats["weights"] = np.ones(len(examples), np.float32)
    return feats


class GptClassificationObjective(SequenceClassificationObjective):
    """Sequence classification / regression with a GPT trunk; scoring is inherited from the BERT objective."""

    def __init__(self, model_cfg: ModelConfig, spec: TaskSpec, train: Sequence[Example], dev: Sequence[Example],
                 tokenizer, fcfg: FinetuneConfig):
        self.mode = transform_for(spec.name, spec.is_pair)
        self.lm_coef = fcfg.lm_coef
        super().__init__(model_cfg, spec, train, dev, tokenizer, fcfg)

    def build_model(self, model_cfg: ModelConfig):
        from ptm_jax.models.gpt_task_heads import GPTForSequenceClassification

        return GPTForSequenceClassification(model_cfg, self.num_labels, self.fcfg.classifier_dropout)

    def featurize(self, examples: Sequence[Example], tokenizer) -> dict[str, np.ndarray]:
        return featurize(examples, tokenizer, self.fcfg.max_seq_length, self.regression, self.mode)

    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["segment_ids"], b["position_ids"], b["extract_index"])

    def normalizers(self, batch):
        return {"n": jnp.sum(batch["weights"]),
                "lm": jnp.sum(batch["lm_weights"] * batch["weights"][:, None, None])}

    def _apply(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["segment_ids"], batch["position_ids"],
                                batch["extract_index"], deterministic=not train, rngs=rngs)

    def _logits(self, params, batch, rng, train: bool):
        return self._apply(params, batch, rng, train)[0]

    def loss(self, params, batch, rng, normalizers, train: bool):
        logits, lm_logits = self._apply(params, batch, rng, train)
        w = batch["weights"]
        if self.regression:
            per = jnp.square(logits[:, 0] - batch["labels"])
            terms = {"loss": (jnp.sum(per * w), jnp.sum(w))}
        else:
            per = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
            hit = (jnp.argmax(logits, -1) == batch["labels"]).astype(jnp.float32)
            terms = {"loss": (jnp.sum(per * w), jnp.sum(w)), "accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        total = jnp.sum(per * w) / normalizers["n"]
        if self.lm_coef:
            lm = lm_terms(lm_logits, batch["lm_targets"], batch["lm_weights"] * w[:, None, None])
            terms["lm_loss"] = lm["lm_loss"]
            total = total + self.lm_coef * lm["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0)
        return total, terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        return {"logits": self._logits(params, batch, None, False)}
