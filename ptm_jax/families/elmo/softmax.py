"""ELMo's softmax: sampled in training, full in evaluation (allenai/bilm-tf ``bilm/training.py``, which calls
``tf.nn.sampled_softmax_loss(softmax_W, softmax_b, next_token_id, output, num_sampled, n_tokens_vocab)``).

The sampler is TensorFlow's default for ``sampled_softmax_loss``, the log-uniform (Zipfian) candidate sampler
(``tf.random.log_uniform_candidate_sampler``): class k has probability

    Q(k) = (log(k + 2) - log(k + 1)) / log(V + 1),

drawn as ``k = floor(exp(u * log(V + 1))) - 1`` with u ~ U[0, 1), which assumes ids in decreasing frequency
(the word vocabulary's order, ``data/word_vocab.py``). One set of ``num_sampled`` classes serves the whole
batch (as TF's). Differences from TF, stated: the draws are with replacement (TF's default ``unique=True``
rejects repeats), so the expected count of class k is ``num_sampled * Q(k)``; as in TF the logits subtract
log(expected count) (``subtract_log_q``) and a sampled class equal to a row's true class is removed from that
row (``remove_accidental_hits``) (Jean et al. 2015, "On Using Very Large Target Vocabulary for NMT" Sec. 3).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from ptm_jax.models.layers import accum_dtype


def log_uniform_sample(rng: jax.Array, num_sampled: int, vocab_size: int) -> jax.Array:
    u = jax.random.uniform(rng, (num_sampled,))
    k = jnp.floor(jnp.exp(u * math.log(vocab_size + 1.0))).astype(jnp.int32) - 1
    return jnp.clip(k, 0, vocab_size - 1)


def log_uniform_log_q(ids: jax.Array, vocab_size: int) -> jax.Array:
    k = ids.astype(jnp.float32)
    return jnp.log((jnp.log(k + 2.0) - jnp.log(k + 1.0)) / math.log(vocab_size + 1.0))


def sampled_softmax_ce(hidden: jax.Array, targets: jax.Array, w: jax.Array, b: jax.Array, rng: jax.Array,
                       num_sampled: int) -> jax.Array:
    """hidden [..., P], targets [...] -> per-position cross-entropy of the true class among it and the sampled
    classes (label 0), [...]."""
    vocab = w.shape[0]
    sampled = log_uniform_sample(rng, num_sampled, vocab)
    log_count = math.log(num_sampled)
    h = hidden.astype(accum_dtype(hidden.dtype))
    true_logit = (jnp.sum(h * jnp.take(w, targets, axis=0), -1) + jnp.take(b, targets)
                  - (log_uniform_log_q(targets, vocab) + log_count))
    s_logits = (h @ jnp.take(w, sampled, axis=0).T + jnp.take(b, sampled)
                - (log_uniform_log_q(sampled, vocab) + log_count))
    s_logits = jnp.where(targets[..., None] == sampled, -1e30, s_logits)     # accidental hits
    logits = jnp.concatenate([true_logit[..., None], s_logits], axis=-1)
    return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.zeros(targets.shape, jnp.int32))


def full_softmax_logits(hidden: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return hidden.astype(accum_dtype(hidden.dtype)) @ w.T + b
