"""What ``ptm bench`` asks of BERT: a synthetic batch with BERT-like masking (google-research/bert
create_pretraining_data.py: short sequences with ``short_seq_prob``, ``masked_lm_prob`` of the tokens picked) and
the ``dense`` MLM-head variant (``Bench.variants``, the ``--mlm-head dense`` switch)."""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator
                    ) -> dict[str, np.ndarray]:
    """``Bench.synthetic_batch``: random ids and BERT masking in the shapes and dtypes of ``example`` (one global
    batch)."""
    out = {k: np.array(v) for k, v in example.items()}
    v = cfg.model.vocab_size
    if "input_ids" not in out:
        return out
    b, s = out["input_ids"].shape
    lengths = np.where(rng.random(b) < cfg.data.short_seq_prob, rng.integers(8, s + 1, b), s)
    real = np.arange(s)[None, :] < lengths[:, None]
    out["input_ids"] = np.where(real, rng.integers(5, max(v, 6), (b, s)), 0).astype(np.int32)
    out["input_ids"][:, 0] = 1  # [CLS]
    if "input_mask" in out:
        out["input_mask"] = real.astype(np.int32)
    if "segment_ids" in out:
        split = (lengths * rng.uniform(0.2, 0.8, b)).astype(np.int64)
        out["segment_ids"] = ((np.arange(s)[None, :] > split[:, None]) & real).astype(np.int32)
    if "masked_lm_positions" in out:
        p = out["masked_lm_positions"].shape[1]
        pos = np.zeros((b, p), np.int32)
        w = np.zeros((b, p), np.float32)
        for i in range(b):  # once per synthetic batch, outside the timed loop
            n = min(p, max(1, int(round(lengths[i] * cfg.data.masked_lm_prob))))
            pos[i, :n] = np.sort(rng.choice(np.arange(1, lengths[i]), size=n, replace=False))
            w[i, :n] = 1.0
        out["masked_lm_positions"] = pos
        out["masked_lm_weights"] = w
        out["masked_lm_ids"] = np.where(w > 0, rng.integers(5, max(v, 6), (b, p)), 0).astype(np.int32)
    if "next_sentence_labels" in out:
        out["next_sentence_labels"] = rng.integers(0, 2, out["next_sentence_labels"].shape).astype(np.int32)
    return out


class DenseMlmHead:
    """Benchmark-only variant: the MLM head evaluated at *all* S positions ([B, S, V] logits), then the P
    masked positions picked for the loss -- what an implementation without BERT's gather pays."""

    def __init__(self, objective: Any):
        self._inner = objective
        self.name, self.model = objective.name, objective.model
        self.primary_metric = objective.primary_metric

    def __getattr__(self, item: str) -> Any:
        return getattr(self._inner, item)

    def loss(self, params, batch, rng, normalizers, train: bool):
        from ptm_jax.families.bert.mlm import mlm_loss, mlm_terms
        from ptm_jax.families.bert.nsp import nsp_terms

        b, s = batch["input_ids"].shape
        every = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
        rngs = {"dropout": rng} if train and rng is not None else None
        logits_BxSxV, nsp_logits = self.model.apply(params, batch["input_ids"], batch["input_mask"],
                                                    batch["segment_ids"], every, deterministic=not train, rngs=rngs)
        picked = jnp.take_along_axis(logits_BxSxV, batch["masked_lm_positions"][..., None].astype(jnp.int32), 1)
        terms = mlm_terms(picked, batch["masked_lm_ids"], batch["masked_lm_weights"])
        loss = mlm_loss(terms["mlm_loss"][0], normalizers["mlm"])
        if nsp_logits is not None:
            nsp = nsp_terms(nsp_logits, batch["next_sentence_labels"])
            loss = loss + nsp["nsp_loss"][0] / normalizers["nsp"]
            terms.update(nsp)
        return loss, terms
