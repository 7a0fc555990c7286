"""The character-LM objective of both directions (Akbik et al. 2018 Sec. 2.1; flairNLP/flair
``trainers/language_model_trainer.py``, which trains one direction per run with cross-entropy over the next
character and carries the hidden state from batch to batch):

    loss = 0.5 * (mean CE of the forward LM + mean CE of the backward LM)

The two directions have no parameter in common, so one run trains both (their gradients are independent; only
a global ``train.clip_norm`` couples them, where flair clips each model on its own). The rows are ELMo's lanes of
the packed stream (``families/elmo/data.py``: the backward LM reads the reversed stream, both carry their state in
``TrainState.carry``), here over character ids (``tokenizer.kind = "char"``): the document end ``<eos>`` plays
flair's document delimiter. ``lm_loss`` is the mean CE over both directions' characters (nats), so
``perplexity`` = exp(lm_loss) per character; ``forward_loss`` / ``backward_loss`` are each direction's.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ptm_jax.errors import ConfigError
from ptm_jax.families.elmo.objective import ElmoObjective
from ptm_jax.families.flair.model import DIRECTIONS, FlairLanguageModels, init_carry
from ptm_jax.models.layers import Partitioned
from ptm_jax.objectives.language_model import lm_terms


class FlairObjective(ElmoObjective):
    """ELMo's biLM objective with its batches (``example_batch``, ``dataset``, ``normalizers``), over character ids
    read directly (no character table) by two LMs that share nothing, with the full softmax over the characters."""

    def __init__(self, cfg: Any, train_source, eval_source, tokenizer):
        cfg.model.validate()
        chars = getattr(tokenizer, "vocab_size", None)  # None: a stream of ids without its vocabulary
        if chars is not None and chars > cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is below the character vocabulary's "
                              f"{chars} entries; raise it (or lower tokenizer.vocab_size)")
        self.cfg, self.name = cfg, "flair"
        self.model = FlairLanguageModels(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(tokenizer.eos_id), int(tokenizer.pad_id)

    def _inputs(self, batch):
        rows = {"forward": batch["fwd_ids"], "backward": batch["bwd_ids"]}
        ids = {d: rows[d][:, :-1] for d in DIRECTIONS}
        mask = {d: ids[d] != self.pad_id for d in DIRECTIONS}
        targets = {d: rows[d][:, 1:] for d in DIRECTIONS}
        weights = {"forward": batch["target_weights"], "backward": batch["bwd_weights"]}
        return ids, mask, targets, weights

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        ids, mask, _, _ = self._inputs({k: jnp.asarray(v[:1]) for k, v in batch.items()})
        return self.model.init(rng, ids, mask)

    def init_carry(self, global_batch: int) -> Any:
        zero = init_carry(self.cfg.model, global_batch)
        return {d: [type(c)(*(Partitioned(v, ("batch", "act_mlp")) for v in c)) for c in zero[d]] for d in DIRECTIONS}

    def loss_carrying(self, params, batch, carry, rng, normalizers, train: bool):
        ids, mask, targets, weights = self._inputs(batch)
        rngs = {"dropout": rng} if train and rng is not None else {}
        out = self.model.apply(params, ids, mask, carry, train=train, rngs=rngs)
        terms, loss = {}, 0.0
        for d in DIRECTIONS:
            t = lm_terms(out[d][1], targets[d], weights[d])
            terms[f"{d}_loss"], terms[f"{d}_accuracy"] = t["lm_loss"], t["lm_accuracy"]
            loss = loss + 0.5 * t["lm_loss"][0] / jnp.maximum(normalizers[d], 1.0)
        for name in ("loss", "accuracy"):
            f, b = terms[f"forward_{name}"], terms[f"backward_{name}"]
            terms[f"lm_{name}"] = (f[0] + b[0], f[1] + b[1])
        return loss, terms, {d: out[d][2] for d in DIRECTIONS}
