"""What the language-model objectives share (causal, permutation, n-gram): the token cross-entropy terms,
perplexity in the report, and a unigram baseline fitted on the training stream."""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import RunConfig
from ptm_jax.models.layers import accum_dtype


def target_is_top(scores: jax.Array, targets: jax.Array) -> jax.Array:
    """1.0 where the target's score is the largest over the last axis (a tie with another entry counts), else 0.0.

    The same as ``argmax(scores) == targets`` except in exact ties, which argmax gives to the first index. It reads
    the target's score (a gather) and the maximum, which the softmax cross-entropy beside it already takes, where
    an argmax is a second pass over the [..., V] scores: about a thirtieth of GPT-2 124M's step at s1024, by the TPU
    compiler's estimate (docs/benchmarks.md, "The accuracy metric's pass over the logits").
    """
    picked = jnp.take_along_axis(scores, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return (picked >= jnp.max(scores, axis=-1)).astype(jnp.float32)


def lm_terms(logits: jax.Array, targets: jax.Array, weights: jax.Array) -> dict[str, tuple[jax.Array, jax.Array]]:
    """logits [..., V], targets/weights [...] -> {'lm_loss': (sum w*CE, sum w), 'lm_accuracy': (...)}."""
    x = logits.astype(accum_dtype(logits.dtype))
    ce = optax.softmax_cross_entropy_with_integer_labels(x, targets)
    w = weights.astype(accum_dtype(logits.dtype))
    correct = target_is_top(x, targets)
    total = jnp.sum(w)
    return {"lm_loss": (jnp.sum(ce * w), total), "lm_accuracy": (jnp.sum(correct * w), total)}


class LanguageModelReport:
    """Mixin of the LM objectives (causal, permutation): perplexity in the report, a unigram baseline."""

    cfg: RunConfig

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        out = dict(metrics)
        if "lm_loss" in out and math.isfinite(out["lm_loss"]):
            out["perplexity"] = math.exp(min(out["lm_loss"], 50.0))
        return out

    def baseline(self, global_batch: int) -> dict[str, float]:
        return unigram_baseline(self, global_batch, eval_batches=self.cfg.train.eval_batches)


def unigram_baseline(objective: Any, global_batch: int, train_batches: int = 20,
                     eval_batches: int = 8) -> dict[str, float]:
    """A unigram model fitted on the training stream (add-one smoothing), scored on the eval stream.

    The model has learned beyond token frequencies only when its eval perplexity is below this one.
    """
    vocab = objective.cfg.model.vocab_size
    counts = np.ones(vocab, np.float64)
    it = objective.train_batches(0, global_batch, 0, 1)
    for _ in range(train_batches):
        b = next(it)
        np.add.at(counts, b["target_ids"][b["target_weights"] > 0], 1.0)
    logp = np.log(counts / counts.sum())
    nll = hit = total = 0.0
    top = int(np.argmax(counts))
    for i, b in enumerate(objective.eval_batches(global_batch, 0, 1)):
        if i >= eval_batches:
            break
        w = b["target_weights"] > 0
        t = b["target_ids"][w]
        nll -= float(logp[t].sum())
        hit += float((t == top).sum())
        total += float(t.size)
    if not total:
        return {"unigram_perplexity": float("nan"), "majority_accuracy": float("nan")}
    return {"unigram_perplexity": math.exp(nll / total), "majority_accuracy": hit / total, "majority_token": top}
