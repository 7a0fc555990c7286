"""XLNet's permutation language modelling objective (Yang et al. 2019 Sec. 2.2-2.3; zihangdai/xlnet
train_gpu.py / model_utils.py).

For a factorization order z the model maximises sum_t log p(x_{z_t} | x_{z<t}) over the partial-prediction
targets only (Sec. 2.3): the query stream at each target, mapped by ``target_mapping``, scores the tied
embedding + bias; loss = sum(CE * w) / sum(w). The examples (span targets, one order per ``perm_size``
block, ``perm_mask``, ``bi_data``) come from ``ptm_jax.families.xlnet.plm_data``.

Memory (Sec. 2.3, "Incorporating ideas from Transformer-XL"; train_gpu.py feeds each step's ``new_mems`` to the
next): with ``model.mem_len > 0`` the objective carries, per batch row, the content-stream states of the
``reuse_len`` leading tokens of each layer into the next step (``TrainState.carry``, [layers, batch, mem_len,
hidden], zeros at step 0 as the reference's ``init_mems``, no gradient through it). The data stream lays rows out
so that row r of step s+1 continues row r of step s (``ptm_jax.families.xlnet.plm_data``), so the memory really is
the text that precedes. Evaluation reads each held-out sample on its own (no memory). With ``mem_len = 0`` each
sample trains on its own.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config import RunConfig
from ptm_jax.data.pretraining.source import DocumentSource, SpecialIds
from ptm_jax.errors import ConfigError
from ptm_jax.models.layers import Partitioned, dtype_of
from ptm_jax.objectives.base import RowStreams
from ptm_jax.objectives.language_model import LanguageModelReport, lm_terms

INPUT_KEYS = ("input_ids", "segment_ids", "perm_mask", "target_mapping", "target_ids", "target_weights")


class PlmObjective(RowStreams, LanguageModelReport):
    primary_metric = "lm_loss"

    def __init__(self, cfg: RunConfig, train_source: DocumentSource, eval_source: DocumentSource | None,
                 special: SpecialIds):
        from ptm_jax.families.xlnet.model import XLNetLMHeadModel

        d = cfg.data
        if d.bi_data and (cfg.train.batch_size % 2 or cfg.train.grad_accum_steps > 1):
            raise ConfigError("data.bi_data=true needs an even train.batch_size and train.grad_accum_steps=1 "
                              "(the reversed half of each batch must stay in the same microbatch)")
        if cfg.model.mem_len > 0 and cfg.train.grad_accum_steps > 1:
            raise ConfigError(f"model.mem_len={cfg.model.mem_len} carries Transformer-XL memory from one step to the "
                              "next, which needs train.grad_accum_steps=1 (each row continues the same row of the "
                              "previous step); set model.mem_len=0 to accumulate gradients")
        self.cfg, self.name = cfg, cfg.objective
        self.model = XLNetLMHeadModel(cfg.model, reuse_len=d.reuse_len, bi_data=d.bi_data)
        self.train_source, self.eval_source, self.special = train_source, eval_source, special

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L, P = self.cfg.data.max_seq_length, self.cfg.data.max_predictions_per_seq
        return {"input_ids": np.zeros((batch_size, L), np.int32),
                "segment_ids": np.zeros((batch_size, L), np.int32),
                "perm_mask": np.zeros((batch_size, L, L), np.float32),
                "target_mapping": np.zeros((batch_size, P, L), np.float32),
                "target_ids": np.zeros((batch_size, P), np.int32),
                "target_weights": np.zeros((batch_size, P), np.float32)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        n = 2 if self.cfg.data.bi_data else 1
        b = {k: jnp.asarray(v[:n]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["segment_ids"], None, b["perm_mask"], b["target_mapping"])

    def init_carry(self, global_batch: int) -> Any:
        c = self.cfg.model
        if c.mem_len <= 0:
            return None
        zeros = jnp.zeros((c.num_layers, global_batch, c.mem_len, c.hidden_size), dtype_of(c.dtype))
        return Partitioned(zeros, ("layers", "batch", "length", "act_embed"))

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"lm": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        loss, terms, _ = self.loss_carrying(params, batch, None, rng, normalizers, train)
        return loss, terms

    def loss_carrying(self, params, batch, carry, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        logits, new_mems = self.model.apply(params, batch["input_ids"], batch["segment_ids"], None,
                                            batch["perm_mask"], batch["target_mapping"], carry,
                                            deterministic=not train, rngs=rngs)
        terms = lm_terms(logits, batch["target_ids"], batch["target_weights"])
        new_carry = None if carry is None else jnp.stack(new_mems).astype(carry.dtype)
        return terms["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0), terms, new_carry

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        from ptm_jax.families.xlnet.plm_data import plm_dataset

        return plm_dataset(source, self.special, self.cfg.data, seed=self.cfg.data.seed, start_index=start,
                           global_batch=global_batch, process_index=pi, process_count=pc, repeat=repeat, rows=rows,
                           grouped=True)
