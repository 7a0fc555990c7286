"""Transformer-XL language modelling with segment-level recurrence (Dai et al. 2019 Sec. 3.2; kimiyoung/transformer-xl
``pytorch/train.py``): each step predicts every next token of a segment of ``data.max_seq_length`` tokens [tgt_len]
per row, attending over the row's memory of the segments before it.

Batches (``data/pretraining/contiguous_rows.py``, fixed length): pass e of the packed corpus is cut into B
contiguous row regions; step s + 1 reads, in every row, the segment right after the one step s read, so row r's
memory is the text just before its segment (the reference's ``LMOrderedIterator``). The memory lives in
``TrainState.carry`` (``objectives/base.py`` ``CarriesState``): ``{'mems': [layers, B, mem_len, H], 'valid': [B]}``,
sharded over the batch like the activations, checkpointed with the state (a resumed run keeps its memory) and never
differentiated. ``valid`` counts a row's real memory states: 0 at step 0 and at the first segment of every pass
(``reset``, the reference's empty memory at each epoch), so no row ever attends to states it does not have. The
global batch index fixes the segment every row reads: the stream is the same on any number of processes and a
resume continues it exactly; a changed ``train.batch_size`` changes the row regions (keep it when resuming).

Loss: mean negative log-likelihood over the segment's real targets (the adaptive softmax's log-probabilities).
The loop's periodic evaluation reads held-out segments without memory; ``ptm perplexity`` (``perplexity.py``)
carries it.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.data.pretraining.contiguous_rows import LmBatches, eval_batches
from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import ConfigError
from ptm_jax.models.layers import Partitioned, dtype_of
from ptm_jax.objectives.language_model import LanguageModelReport, target_is_top


def log_prob_terms(logp: jax.Array, targets: jax.Array, weights: jax.Array) -> dict[str, tuple[jax.Array, jax.Array]]:
    """log-probabilities [..., V], targets/weights [...] -> {'lm_loss': (sum w * NLL, sum w), 'lm_accuracy': ...}."""
    picked = jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    w = weights.astype(jnp.float32)
    correct = target_is_top(logp, targets)
    total = jnp.sum(w)
    return {"lm_loss": (-jnp.sum(picked * w), total), "lm_accuracy": (jnp.sum(correct * w), total)}


class SegmentLmObjective(LanguageModelReport):
    """``cfg.model`` a ``TransfoXlConfig``; segments of ``cfg.data.max_seq_length`` tokens."""

    primary_metric = "lm_loss"

    def __init__(self, cfg: Any, train_source: DocumentSource, eval_source: DocumentSource | None, eos_id: int,
                 pad_id: int):
        from ptm_jax.families.transfo_xl.model import TransfoXLLMHeadModel

        cfg.model.validate()
        if cfg.model.mem_len > 0 and cfg.train.grad_accum_steps > 1:
            raise ConfigError(f"model.mem_len={cfg.model.mem_len} carries Transformer-XL memory from one step to the "
                              "next, which needs train.grad_accum_steps=1 (each row continues the same row of the "
                              "previous step); set model.mem_len=0 to accumulate gradients")
        self.cfg, self.name = cfg, cfg.objective
        self.model = TransfoXLLMHeadModel(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)

    @property
    def tgt_len(self) -> int:
        return int(self.cfg.data.max_seq_length)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        z = np.zeros((batch_size, self.tgt_len), np.int32)
        return {"input_ids": z, "target_ids": z, "target_weights": np.zeros((batch_size, self.tgt_len), np.float32),
                "reset": np.zeros((batch_size,), np.int32)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        return self.model.init(rng, jnp.asarray(batch["input_ids"][:1]))

    def init_carry(self, global_batch: int) -> Any:
        c = self.cfg.model
        if c.mem_len <= 0:
            return None
        mems = jnp.zeros((c.num_layers, global_batch, c.mem_len, c.hidden_size), dtype_of(c.dtype))
        return {"mems": Partitioned(mems, ("layers", "batch", "length", "act_embed")),
                "valid": Partitioned(jnp.zeros((global_batch,), jnp.int32), ("batch",))}

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"lm": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        loss, terms, _ = self.loss_carrying(params, batch, None, rng, normalizers, train)
        return loss, terms

    def loss_carrying(self, params, batch, carry, rng, normalizers, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        mems = valid = None
        if carry is not None:
            mems, valid = carry["mems"], carry["valid"] * (1 - batch["reset"].astype(jnp.int32))
        logp, new_mems, new_valid = self.model.apply(params, batch["input_ids"], mems, valid,
                                                     deterministic=not train, rngs=rngs)
        terms = log_prob_terms(logp, batch["target_ids"], batch["target_weights"])
        loss = terms["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0)
        new = None if carry is None else {"mems": new_mems.astype(carry["mems"].dtype), "valid": new_valid}
        return loss, terms, new

    def _stream(self, source, shuffle: bool) -> PackedStream:
        return PackedStream(source, self.eos_id, seed=self.cfg.data.seed, shuffle=shuffle)

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int):
        n = self.tgt_len
        batches = LmBatches(self._stream(self.train_source, True), global_batch, bptt=n, variable=False, p=1.0,
                            std=0.0, bucket=n, max_len=n, seed=self.cfg.data.seed, pad_id=self.pad_id)
        return batches.iterate(start_example // global_batch, process_index, process_count)

    def eval_batches(self, global_batch: int, process_index: int, process_count: int):
        if self.eval_source is None:
            return iter(())
        return eval_batches(self._stream(self.eval_source, False), global_batch, self.tgt_len, self.pad_id,
                            process_index, process_count)
