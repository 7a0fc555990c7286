"""The translation objective of the MT-LSTM (McCann et al. 2017 Sec. 3): teacher-forced cross-entropy of the
target words given the source sentence,

    loss = sum over real target positions of -log p(y_t | X, y_<t) / number of real target positions

(the end symbol included), ``translation_loss`` / ``translation_accuracy`` its mean and token accuracy; the
report adds ``perplexity`` = exp(translation_loss) per target word. The batches are ``data.py``'s.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.cove.data import EncodedPairs, feature_dtype, feature_shapes, translation_dataset
from ptm_jax.families.cove.model import CoveTranslator
from ptm_jax.objectives.base import SourceStreams
from ptm_jax.objectives.language_model import lm_terms

EVAL_SEED = 1_000_003
"""Added to ``data.seed`` for the eval stream (its order is file order; the seed is not read there)."""


class TranslationObjective(SourceStreams):
    """``train_source`` / ``eval_source``: ``parallel.Pairs`` (the eval one may be None)."""

    primary_metric = "translation_loss"

    def __init__(self, cfg: Any, train_source, eval_source, tokenizer):
        cfg.model.validate()
        if tokenizer.vocab_size > cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is below the target vocabulary's "
                              f"{tokenizer.vocab_size} entries; raise it (or lower tokenizer.vocab_size)")
        self.cfg, self.name = cfg, "cove_translation"
        self.model = CoveTranslator(cfg.model)
        self.length = int(cfg.data.max_seq_length)
        self.train_source = EncodedPairs(train_source, cfg.model, tokenizer, self.length)
        self.eval_source = (None if eval_source is None
                            else EncodedPairs(eval_source, cfg.model, tokenizer, self.length))

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        shapes = feature_shapes(batch_size, self.length, self.cfg.model.input_dim)
        return {k: np.zeros(s, feature_dtype(k)) for k, s in shapes.items()}

    def _apply(self, params, batch, train: bool, rngs=None):
        return self.model.apply(params, batch["source"], batch["source_mask"], batch["target_in"], train=train,
                                rngs=rngs or {})

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["source"], b["source_mask"], b["target_in"])

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"target": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else {}
        logits = self._apply(params, batch, train, rngs)
        t = lm_terms(logits, batch["target_out"], batch["target_weights"])
        terms = {"translation_loss": t["lm_loss"], "translation_accuracy": t["lm_accuracy"]}
        return t["lm_loss"][0] / jnp.maximum(normalizers["target"], 1.0), terms

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        seed = int(self.cfg.data.seed) + (0 if repeat else EVAL_SEED)
        return translation_dataset(source, seed=seed, start=start, global_batch=global_batch, process_index=pi,
                                   process_count=pc, repeat=repeat, length=self.length,
                                   dim=self.cfg.model.input_dim)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        out = dict(metrics)
        if "translation_loss" in out and math.isfinite(out["translation_loss"]):
            out["perplexity"] = math.exp(min(out["translation_loss"], 50.0))
        return out

