"""The AWD-LSTM language-model objective (ULMFiT stages 1 and 2: general-domain LM pretraining and target-task LM
finetuning; Howard & Ruder 2018 Sec. 3.1-3.2; Merity et al. 2018 Sec. 4).

Loss = mean cross-entropy over the batch's real targets + AR + TAR (Merity et al. 2018 Sec. 4.6; fastai
``RNNRegularizer``): alpha * mean(dropped last-layer output ^ 2) + beta * mean((h_t - h_{t-1}) ^ 2) of the
last layer's output before dropout, both over real steps only and in training only.

The LSTM state is carried from batch to batch in ``TrainState.carry`` (``objectives/base.py`` ``CarriesState``;
no gradient flows through it): ``{'layers_i': {'c': [B, H_i], 'h': [B, H_i]}}``. It is zeroed for the rows of a
batch whose ``reset`` is 1, the first batch of each pass over the corpus
(``data/pretraining/contiguous_rows.py``). The loop's periodic evaluation starts every batch from the zero state;
``families/ulmfit/perplexity.py`` carries it.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.data.pretraining.contiguous_rows import LmBatches, eval_batches
from ptm_jax.families.ulmfit.model import AwdLstmLanguageModel
from ptm_jax.models.layers import Partitioned
from ptm_jax.models.lstm import LstmCarry
from ptm_jax.objectives.language_model import LanguageModelReport, lm_terms


def carry_to_tuple(carry: dict) -> tuple[LstmCarry, ...]:
    return tuple(LstmCarry(carry[f"layers_{i}"]["c"], carry[f"layers_{i}"]["h"]) for i in range(len(carry)))


def carry_to_dict(carry) -> dict:
    return {f"layers_{i}": {"c": c.c, "h": c.h} for i, c in enumerate(carry)}


def ar_tar(raw: jax.Array, dropped: jax.Array, weights: jax.Array, alpha: float, beta: float) -> jax.Array:
    """AR on the dropped output and TAR on the raw output of the last layer, means over real steps (and
    features), as fastai's ``RNNRegularizer`` takes them over all steps of its unpadded batches."""
    w = weights.astype(jnp.float32)[..., None]
    dim = raw.shape[-1]
    out = jnp.float32(0.0)
    if alpha:
        out += alpha * jnp.sum(jnp.square(dropped.astype(jnp.float32)) * w) / jnp.maximum(jnp.sum(w) * dim, 1.0)
    if beta:
        pair = w[:, 1:] * w[:, :-1]
        diff = jnp.square((raw[:, 1:] - raw[:, :-1]).astype(jnp.float32)) * pair
        out += beta * jnp.sum(diff) / jnp.maximum(jnp.sum(pair) * dim, 1.0)
    return out


class AwdLstmLmObjective(LanguageModelReport):
    """``cfg.model`` an ``UlmfitConfig``, ``cfg.data`` an ``UlmfitDataConfig`` (bptt = data.max_seq_length)."""

    primary_metric = "lm_loss"

    def __init__(self, cfg: Any, train_source: DocumentSource, eval_source: DocumentSource | None, eos_id: int,
                 pad_id: int, name: str = "awd_lstm_lm"):
        cfg.model.validate()
        cfg.data.validate()
        self.cfg, self.name = cfg, name
        self.model = AwdLstmLanguageModel(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)

    @property
    def bptt(self) -> int:
        return int(self.cfg.data.max_seq_length)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"target_weights": np.zeros((batch_size, self.bptt), np.float32),
                "input_ids": np.zeros((batch_size, self.bptt), np.int32),
                "target_ids": np.zeros((batch_size, self.bptt), np.int32),
                "reset": np.zeros((batch_size,), np.int32)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        return self.model.init(rng, jnp.asarray(batch["input_ids"][:1]))

    def init_carry(self, global_batch: int) -> Any:
        return {f"layers_{i}": {k: Partitioned(jnp.zeros((global_batch, hid), jnp.float32), ("batch", None))
                                for k in ("c", "h")} for i, (_, hid) in enumerate(self.cfg.model.layer_sizes)}

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"lm": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        loss, terms, _ = self.loss_carrying(params, batch, None, rng, normalizers, train)
        return loss, terms

    def loss_carrying(self, params, batch, carry, rng, normalizers, train: bool):
        m = self.cfg.model
        state = None
        if carry is not None:
            keep = (1 - batch["reset"]).astype(jnp.float32)[:, None]
            state = carry_to_tuple(jax.tree.map(lambda x: x * keep, carry))
        mask = batch["target_weights"] > 0
        rngs = {"dropout": rng} if train and rng is not None else None
        logits, raw, dropped, new = self.model.apply(params, batch["input_ids"], mask, state, not train, rngs=rngs)
        terms = lm_terms(logits, batch["target_ids"], batch["target_weights"])
        loss = terms["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0)
        if train and (m.ar_alpha or m.tar_beta):
            reg = ar_tar(raw, dropped, batch["target_weights"], m.ar_alpha, m.tar_beta)
            loss = loss + reg
            terms["ar_tar"] = (reg, jnp.float32(1.0))
        return loss, terms, (carry_to_dict(new) if carry is not None else None)

    def _stream(self, source, shuffle: bool) -> PackedStream:
        return PackedStream(source, self.eos_id, seed=self.cfg.data.seed, shuffle=shuffle)

    def batches(self, global_batch: int) -> LmBatches:
        d = self.cfg.data
        return LmBatches(self._stream(self.train_source, True), global_batch, bptt=self.bptt,
                         variable=d.variable_bptt, p=d.bptt_p, std=d.bptt_std, bucket=d.bptt_bucket,
                         max_len=d.max_bptt, seed=d.seed, pad_id=self.pad_id)

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int):
        return self.batches(global_batch).iterate(start_example // global_batch, process_index, process_count)

    def eval_batches(self, global_batch: int, process_index: int, process_count: int):
        if self.eval_source is None:
            return iter(())
        return eval_batches(self._stream(self.eval_source, False), global_batch, self.bptt, self.pad_id,
                            process_index, process_count)
