"""The linear-chain CRF (ptm_jax/models/crf.py) against brute-force enumeration of every tag sequence on small
inputs: score(y), log Z (the forward algorithm), the NLL and Viterbi's best path; the tag-scheme constraints;
and, where pytorch-crf is installed (the test extra), its log-likelihood and decoding on the same numbers."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.errors import ConfigError
from ptm_jax.models.crf import (
    FORBIDDEN,
    CrfParams,
    allowed_transitions,
    crf_module,
    log_partition,
    negative_log_likelihood,
    sequence_score,
    viterbi_decode,
)


def _random(seed: int, B: int = 4, T: int = 4, K: int = 3):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(B, T, K)).astype(np.float32)
    crf = CrfParams(*(jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in ((K, K), (K,), (K,))))
    lengths = np.array([T, 1, 0, T - 1][:B])
    mask = np.arange(T)[None, :] < lengths[:, None]
    return jnp.asarray(e), jnp.asarray(mask), crf, lengths


def _brute_score(e, y, crf) -> float:
    s = float(crf.start[y[0]]) + float(crf.end[y[-1]]) + sum(float(e[t, y[t]]) for t in range(len(y)))
    return s + sum(float(crf.transitions[y[t - 1], y[t]]) for t in range(1, len(y)))


def test_log_partition_score_and_viterbi_equal_brute_force_enumeration():
    e, mask, crf, lengths = _random(0)
    K = e.shape[-1]
    logz = np.asarray(log_partition(e, mask, crf))
    tags, best = viterbi_decode(e, mask, crf)
    tags, best = np.asarray(tags), np.asarray(best)
    for b, n in enumerate(lengths):
        if n == 0:
            assert logz[b] == 0.0 and best[b] == 0.0 and not tags[b].any()
            continue
        scores = {y: _brute_score(np.asarray(e[b]), y, crf) for y in itertools.product(range(K), repeat=int(n))}
        assert logz[b] == pytest.approx(np.log(np.sum(np.exp(list(scores.values())))), abs=1e-5)
        argmax = max(scores, key=scores.get)
        assert tuple(tags[b, :n]) == argmax and not tags[b, n:].any()
        assert best[b] == pytest.approx(scores[argmax], abs=1e-5)
        y = np.zeros(e.shape[1], np.int32)
        y[:n] = argmax
        got = float(sequence_score(e, jnp.asarray(np.tile(y, (e.shape[0], 1))), mask, crf)[b])
        assert got == pytest.approx(scores[argmax], abs=1e-5)


def test_nll_is_minus_log_probability_and_probabilities_sum_to_one():
    e, mask, crf, lengths = _random(1, B=2, T=3, K=3)
    n = int(lengths[0])
    ys = np.array(list(itertools.product(range(3), repeat=n)), np.int32)       # every sequence of row 0
    tile = lambda x: jnp.broadcast_to(x[:1], (len(ys),) + x.shape[1:])
    nll = negative_log_likelihood(tile(e), jnp.asarray(ys), tile(mask), crf)
    assert float(jnp.sum(jnp.exp(-nll))) == pytest.approx(1.0, abs=1e-5)
    assert float(negative_log_likelihood(e, jnp.zeros((2, 3), jnp.int32), mask, crf)[1]) > 0.0


def test_log_partition_gradient_is_the_expected_tag_count():
    """d log Z / d E[t, k] = the marginal p(y_t = k): rows sum to 1 at the words, 0 past the length."""
    e, mask, crf, lengths = _random(2)
    g = np.asarray(jax.grad(lambda x: jnp.sum(log_partition(x, mask, crf)))(e))
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(g[b, :n].sum(-1), 1.0, atol=1e-5)
        assert not g[b, n:].any()


def test_iob2_and_bioes_constraints():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    trans, start, end = allowed_transitions(labels, "iob2")
    assert start.tolist() == [True, True, False, True, False] and end.all()
    assert trans[1, 2] and trans[2, 2] and not trans[0, 2] and not trans[3, 2] and not trans[4, 2]
    assert trans[2, 3] and trans[0, 1] and trans[2, 0]
    t1, s1, _ = allowed_transitions(labels, "iob1")
    assert s1.tolist() == [True, False, True, False, True] and t1[0, 2] and not t1[0, 1] and t1[2, 1]
    bioes = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    tb, sb, eb = allowed_transitions(bioes, "bioes")
    assert sb.tolist() == [True, True, False, False, True] and eb.tolist() == [True, False, False, True, True]
    assert tb[1].tolist() == [False, False, True, True, False] and tb[3].tolist() == [True, True, False, False, True]


def test_unknown_scheme_and_foreign_label_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"tagging.crf_constraints='iobes' is not a tag scheme") as e:
        crf_module(3, "iobes", ["O", "B-X", "I-X"])
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"label 'E-PER' does not fit tag scheme 'iob2'"):
        allowed_transitions(["O", "B-PER", "E-PER"], "iob2")


def test_constrained_viterbi_never_takes_a_forbidden_transition():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    module = crf_module(len(labels), "iob2", labels)
    variables = module.init(jax.random.PRNGKey(0))
    crf = module.apply(variables)
    trans, start, _ = allowed_transitions(labels, "iob2")
    rng = np.random.default_rng(3)
    e = jnp.asarray(rng.normal(size=(64, 6, 5)).astype(np.float32) * 3)
    mask = jnp.ones((64, 6), bool)
    tags = np.asarray(viterbi_decode(e, mask, crf)[0])
    assert start[tags[:, 0]].all() and trans[tags[:, :-1], tags[:, 1:]].all()
    raw = variables["params"]["transitions"]
    raw = getattr(raw, "value", raw)
    assert float(crf.transitions[0, 2]) == pytest.approx(float(raw[0, 2]) + FORBIDDEN)


def test_against_pytorch_crf():
    torchcrf = pytest.importorskip("torchcrf", reason="pytorch-crf (the test extra) is not installed")
    import torch

    e, mask, crf, lengths = _random(4, B=3, T=5, K=4)
    lengths = np.array([5, 3, 1])
    mask = jnp.asarray(np.arange(5)[None, :] < lengths[:, None])
    ref = torchcrf.CRF(4, batch_first=True)
    with torch.no_grad():
        ref.transitions.copy_(torch.tensor(np.asarray(crf.transitions)))
        ref.start_transitions.copy_(torch.tensor(np.asarray(crf.start)))
        ref.end_transitions.copy_(torch.tensor(np.asarray(crf.end)))
    tags = np.random.default_rng(5).integers(0, 4, (3, 5))
    want = ref(torch.tensor(np.asarray(e)), torch.tensor(tags), torch.tensor(np.asarray(mask)), reduction="none")
    got = -negative_log_likelihood(e, jnp.asarray(tags), mask, crf)
    np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), atol=1e-5)
    paths = ref.decode(torch.tensor(np.asarray(e)), torch.tensor(np.asarray(mask)))
    ours = np.asarray(viterbi_decode(e, mask, crf)[0])
    assert [list(ours[b, :n]) for b, n in enumerate(lengths)] == paths
