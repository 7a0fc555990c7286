"""Masked-LM loss terms (google-research/bert run_pretraining.py get_masked_lm_output).

Loss = sum(w * CE) / (sum(w) + 1e-5) over the gathered masked positions; accuracy is weighted the same way.
Terms are returned as (numerator, denominator) pairs so that microbatches and eval batches add up exactly.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from ptm_jax.objectives.language_model import target_is_top

MLM_EPS = 1e-5


def mlm_terms(logits: jax.Array, ids: jax.Array, weights: jax.Array) -> dict[str, tuple[jax.Array, jax.Array]]:
    """logits [B,P,V] float32, ids [B,P], weights [B,P] -> {'mlm_loss': (sum w*CE, sum w), 'mlm_accuracy': ...}."""
    x = logits.astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(x, ids)
    w = weights.astype(jnp.float32)
    correct = target_is_top(x, ids)
    total = jnp.sum(w)
    return {"mlm_loss": (jnp.sum(ce * w), total), "mlm_accuracy": (jnp.sum(correct * w), total)}


def mlm_loss(numerator: jax.Array, weight_total: jax.Array) -> jax.Array:
    return numerator / (weight_total + MLM_EPS)
