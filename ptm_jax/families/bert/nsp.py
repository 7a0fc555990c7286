"""Next-sentence-prediction loss terms (google-research/bert run_pretraining.py get_next_sentence_output).

Label 1 = B is a random sentence, 0 = B is the actual next segment. Loss = mean CE over the batch.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def nsp_terms(logits: jax.Array, labels: jax.Array) -> dict[str, tuple[jax.Array, jax.Array]]:
    labels = labels.reshape(-1).astype(jnp.int32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    n = jnp.asarray(labels.shape[0], jnp.float32)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return {"nsp_loss": (jnp.sum(ce), n), "nsp_accuracy": (jnp.sum(correct), n)}
