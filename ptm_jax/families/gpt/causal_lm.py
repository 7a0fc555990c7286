"""Causal language modelling: GPT's pretraining objective (Radford et al. 2018 Sec. 3.1; 2019 Sec. 2).

L1 = sum_i log P(u_i | u_<i) over the tokens of packed rows. The rows come from
``ptm_jax.data.pretraining.causal_lm`` (documents joined by an end-of-text token, segment ids keep attention
and positions inside each document). The loss is the mean token cross-entropy over the global batch,
computed as (sum of weighted CE) / (sum of weights) so microbatches add up exactly.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config import RunConfig
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.objectives.base import RowStreams
from ptm_jax.objectives.language_model import LanguageModelReport, lm_terms

INPUT_KEYS = ("input_ids", "target_ids", "target_weights", "segment_ids", "position_ids")


class CausalLmObjective(RowStreams, LanguageModelReport):
    """GPT-1 / GPT-2 pretraining on packed rows; plugs into ``ptm_jax.train.loop.fit`` unchanged."""

    primary_metric = "lm_loss"

    def __init__(self, cfg: RunConfig, train_source: DocumentSource, eval_source: DocumentSource | None,
                 eos_id: int, pad_id: int):
        from ptm_jax.families.gpt.model import GPTLMHeadModel

        self.cfg = cfg
        self.name = cfg.objective
        self.model = GPTLMHeadModel(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L = self.cfg.data.max_seq_length
        z = np.zeros((batch_size, L), np.int32)
        return {"input_ids": z, "target_ids": z, "target_weights": np.zeros((batch_size, L), np.float32),
                "segment_ids": np.ones((batch_size, L), np.int32),
                "position_ids": np.broadcast_to(np.arange(L, dtype=np.int32), (batch_size, L)).copy()}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["segment_ids"], b["position_ids"])

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"lm": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        logits, _ = self.model.apply(params, batch["input_ids"], batch["segment_ids"], batch["position_ids"],
                                     deterministic=not train, rngs=rngs)
        terms = lm_terms(logits, batch["target_ids"], batch["target_weights"])
        return terms["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0), terms

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        from ptm_jax.data.pretraining.causal_lm import causal_lm_dataset

        return causal_lm_dataset(source, self.eos_id, self.pad_id, self.cfg.data.max_seq_length,
                                 seed=self.cfg.data.seed, start_index=start, global_batch=global_batch,
                                 process_index=pi, process_count=pc, repeat=repeat, shuffle=repeat,
                                 rows=rows, grouped=True)
