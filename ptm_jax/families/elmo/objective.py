"""The biLM objective (Peters et al. 2018 Sec. 3.1; allenai/bilm-tf ``bilm/training.py``):

    loss = 0.5 * (mean CE of the forward LM + mean CE of the backward LM)

over the lane rows of ``data.py``. A train step minimises ``unroll_steps * loss`` (``data.max_seq_length``
positions per row), as bilm-tf's ``training.py`` takes its gradients (``compute_gradients(loss *
options['unroll_steps'])``): the CE summed over a window's positions, averaged over rows and the two directions.
Under Adagrad the factor is not a learning-rate rescaling (the accumulators' initial value and the global-norm clip
do not scale with it). The reported ``loss`` is that product; ``lm_loss`` and the sampled terms stay per-position
means. Training uses the sampled softmax (``softmax.py``, ``model.num_sampled``
classes) and carries both directions' LSTM state from one step to the next (``TrainState.carry``, the
``CarriesState`` protocol, as bilm-tf feeds each batch's final state to the next); evaluation (``loss``) uses
the full softmax from a zero state per window. ``lm_loss`` is the mean full-softmax CE over both
directions' targets, so ``perplexity`` = exp(lm_loss) is the mean of the two directions' log-perplexities.
The word ids of a batch become characters through the vocabulary's table (``chars.py``, the family's
``char_ids`` artifact).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.families.elmo.model import DIRECTIONS, ElmoLanguageModel, init_carry
from ptm_jax.families.elmo.softmax import full_softmax_logits, sampled_softmax_ce
from ptm_jax.models.layers import Partitioned, accum_dtype
from ptm_jax.objectives.base import SourceStreams
from ptm_jax.objectives.language_model import LanguageModelReport, lm_terms


class ElmoObjective(SourceStreams, LanguageModelReport):
    primary_metric = "lm_loss"

    def __init__(self, cfg: Any, train_source, eval_source, tokenizer, char_table: np.ndarray):
        cfg.model.validate()
        if len(char_table) > cfg.model.vocab_size:
            from ptm_jax.errors import ConfigError

            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is below the word vocabulary's "
                              f"{len(char_table)} entries; raise it (or lower tokenizer.vocab_size)")
        self.cfg = cfg
        self.name = "elmo"
        self.model = ElmoLanguageModel(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(tokenizer.eos_id), int(tokenizer.pad_id)
        self.char_table = np.asarray(char_table, np.int32)      # Pretraining.artifacts['char_ids'] (chars.py)

    @property
    def length(self) -> int:
        return int(self.cfg.data.max_seq_length)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L = self.length
        return {"target_weights": np.zeros((batch_size, L), np.float32),
                "fwd_ids": np.zeros((batch_size, L + 1), np.int32),
                "bwd_ids": np.zeros((batch_size, L + 1), np.int32),
                "bwd_weights": np.zeros((batch_size, L), np.float32),
                "target_ids": np.zeros((batch_size, L), np.int32)}

    def _inputs(self, batch):
        table = jnp.asarray(self.char_table)
        ids = {"forward": batch["fwd_ids"], "backward": batch["bwd_ids"]}
        chars = {d: jnp.take(table, ids[d][:, :-1], axis=0) for d in DIRECTIONS}
        mask = {d: ids[d][:, :-1] != self.pad_id for d in DIRECTIONS}
        targets = {d: ids[d][:, 1:] for d in DIRECTIONS}
        weights = {"forward": batch["target_weights"], "backward": batch["bwd_weights"]}
        return chars, mask, targets, weights

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        chars, mask, _, _ = self._inputs({k: jnp.asarray(v[:1]) for k, v in batch.items()})
        return self.model.init(rng, chars, mask)

    def init_carry(self, global_batch: int) -> Any:
        names = {"c": ("batch", "act_mlp"), "h": ("batch", "act_embed")}
        zero = init_carry(self.cfg.model, global_batch)
        return {d: [type(c)(*(Partitioned(v, names[f]) for f, v in zip(c._fields, c))) for c in zero[d]]
                for d in DIRECTIONS}

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"forward": jnp.sum(batch["target_weights"].astype(jnp.float32)),
                "backward": jnp.sum(batch["bwd_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        loss, terms, _ = self.loss_carrying(params, batch, None, rng, normalizers, train)
        return loss, terms

    def loss_carrying(self, params, batch, carry, rng, normalizers, train: bool):
        chars, mask, targets, weights = self._inputs(batch)
        rngs = {}
        if train and rng is not None:
            rng, drop = jax.random.split(rng)
            rngs = {"dropout": drop}
        top, (w, b), new_carry = self.model.apply(params, chars, mask, carry, train=train, rngs=rngs)
        m = self.cfg.model
        sampled = train and rng is not None and 0 < m.num_sampled < m.vocab_size
        terms, loss = {}, 0.0
        for k, d in enumerate(DIRECTIONS):
            wt = weights[d].astype(accum_dtype(top[d].dtype))
            if sampled:
                ce = sampled_softmax_ce(top[d], targets[d], w, b, jax.random.fold_in(rng, k), m.num_sampled)
                num = jnp.sum(ce * wt)
                terms[f"{d}_sampled_loss"] = (num, jnp.sum(wt))
            else:
                t = lm_terms(full_softmax_logits(top[d], w, b), targets[d], wt)
                num = t["lm_loss"][0]
                terms[f"{d}_loss"] = t["lm_loss"]
                terms[f"{d}_accuracy"] = t["lm_accuracy"]
            loss = loss + 0.5 * num / jnp.maximum(normalizers[d], 1.0)
        if train:
            loss = loss * self.length  # bilm-tf: the gradients of loss * unroll_steps (module doc)
        if not sampled:
            f, bk = terms["forward_loss"], terms["backward_loss"]
            terms["lm_loss"] = (f[0] + bk[0], f[1] + bk[1])
            fa, ba = terms["forward_accuracy"], terms["backward_accuracy"]
            terms["lm_accuracy"] = (fa[0] + ba[0], fa[1] + ba[1])
        return loss, terms, new_carry

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        from ptm_jax.families.elmo.data import elmo_dataset

        return elmo_dataset(source, self.eos_id, self.pad_id, self.length, seed=self.cfg.data.seed,
                            start_index=start, global_batch=global_batch, process_index=pi, process_count=pc,
                            repeat=repeat, shuffle=repeat)
