"""The vocabulary-sized loss terms (causal LM, masked LM, log-probability LM): cross-entropy against a NumPy
log-sum-exp, accuracy against NumPy's argmax, and a single pass over the scores for the accuracy."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.families.bert.mlm import mlm_terms
from ptm_jax.families.transfo_xl.objective import log_prob_terms
from ptm_jax.objectives.language_model import lm_terms, target_is_top


def _case(seed: int = 0, shape=(3, 5), vocab: int = 37):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(*shape, vocab)).astype(np.float32) * 3
    targets = rng.integers(0, vocab, size=shape).astype(np.int32)
    # make about half the targets the argmax, so the accuracy is neither 0 nor 1
    top = logits.argmax(-1)
    pick = rng.random(shape) < 0.5
    targets = np.where(pick, top, targets).astype(np.int32)
    weights = (rng.random(shape) < 0.8).astype(np.float32)
    return logits, targets, weights


def _numpy_terms(logits, targets, weights):
    x = logits.astype(np.float64)
    m = x.max(-1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(-1)) + m[..., 0]
    ce = lse - np.take_along_axis(x, targets[..., None], -1)[..., 0]
    hit = (x.argmax(-1) == targets).astype(np.float64)
    return (ce * weights).sum(), (hit * weights).sum(), weights.sum()


def test_lm_and_mlm_terms_equal_numpy_cross_entropy_and_argmax_accuracy():
    logits, targets, weights = _case()
    ce, hits, total = _numpy_terms(logits, targets, weights)
    assert 0 < hits < total  # the case tests both outcomes
    for fn, prefix in ((lm_terms, "lm"), (mlm_terms, "mlm")):
        t = fn(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights))
        np.testing.assert_allclose(float(t[f"{prefix}_loss"][0]), ce, rtol=1e-5)
        assert float(t[f"{prefix}_accuracy"][0]) == hits
        assert float(t[f"{prefix}_loss"][1]) == float(t[f"{prefix}_accuracy"][1]) == total
    logp = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)
    t = log_prob_terms(logp, jnp.asarray(targets), jnp.asarray(weights))
    np.testing.assert_allclose(float(t["lm_loss"][0]), ce, rtol=1e-5)
    assert float(t["lm_accuracy"][0]) == hits


def test_target_is_top_counts_a_tie_for_the_largest_score_as_correct():
    scores = jnp.asarray([[1.0, 3.0, 3.0, 0.0], [2.0, 1.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    # argmax gives a tie to the first index; here the second of a tied pair counts as well
    got = target_is_top(scores, jnp.asarray([2, 0, 3]))
    np.testing.assert_array_equal(np.asarray(got), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(target_is_top(scores, jnp.asarray([0, 1, 3]))), [0.0, 0.0, 1.0])


def test_lm_terms_accuracy_adds_no_argmax_pass_over_the_vocabulary():
    """An argmax lowers to a reduce over (scores, iota) pairs, a second operand with its own ``init:``; the
    accuracy instead takes the max the loss already needs, so every reduce over the vocabulary has one operand."""
    logits, targets, weights = _case(1)
    argmax_text = jax.jit(lambda x: jnp.argmax(x, -1)).lower(logits).as_text()
    assert any(line.count("init:") == 2 for line in argmax_text.splitlines())  # the pattern looked for
    for fn in (lm_terms, mlm_terms, log_prob_terms):
        reduces = [line for line in jax.jit(fn).lower(logits, targets, weights).as_text().splitlines()
                   if "stablehlo.reduce(" in line and "x37x" in line]
        assert reduces, fn  # the max (and for the logits the sum of exponentials)
        assert all(line.count("init:") == 1 for line in reduces), reduces
