"""Poincare embeddings (ptm_jax/families/poincare): the Riemannian step against a hand-derived one, the distance and
the reconstruction figures against gensim's, the hierarchy reader's errors, the negatives, and a trained run's
vectors through gensim's PoincareKeyedVectors and ``ptm neighbors``."""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config_loading import load_config
from ptm_jax.errors import DataError
from ptm_jax.families.poincare.data import Examples
from ptm_jax.families.poincare.geometry import distance, distances_np
from ptm_jax.families.poincare.hierarchy import SPECIALS, generated_hierarchy, read_relations
from ptm_jax.families.poincare.objective import PoincareObjective
from ptm_jax.families.poincare.reconstruction import reconstruction

GENSIM_DATA = Path(__import__("gensim").__file__).parent / "test" / "test_data"


def _d(a, b):
    """eq. 1, written out."""
    return np.arccosh(1 + 2 * np.sum((a - b) ** 2) / ((1 - a @ a) * (1 - b @ b)))


def _dd(theta, x):
    """Nickel & Kiela eq. 4: the gradient of d(theta, x) in theta."""
    a, b = 1 - theta @ theta, 1 - x @ x
    g = 1 + 2 * np.sum((theta - x) ** 2) / (a * b)
    return 4 / (b * np.sqrt(g * g - 1)) * ((x @ x - 2 * theta @ x + 1) / a ** 2 * theta - x / a)


def _objective(tmp_path, *overrides):
    cfg = load_config("poincare_tiny", [f"output_dir={tmp_path}", "model.dim=3", "data.negative=2", *overrides])
    h = generated_hierarchy()
    return cfg, PoincareObjective(cfg, "poincare", h, h)


def _hand_step(table, examples, lr, eps, factors):
    """Gradients of -log softmax(-d)[0] by eq. 4, summed per row, scaled by (1 - |theta|^2)^2 / 4, retracted."""
    grads = np.zeros_like(table)
    for (u, targets), f in zip(examples, factors):
        d = np.array([_d(table[u], table[t]) for t in targets])
        s = np.exp(-d) / np.exp(-d).sum()
        grads[u] += f * (_dd(table[u], table[targets[0]]) - sum(s[j] * _dd(table[u], table[t])
                                                                  for j, t in enumerate(targets)))
        for j, t in enumerate(targets):
            grads[t] += f * ((1.0 if j == 0 else 0.0) - s[j]) * _dd(table[t], table[u])
    new = table - lr * ((1 - np.sum(table ** 2, axis=1)) ** 2 / 4)[:, None] * grads
    norm = np.linalg.norm(new, axis=1)
    over = norm >= 1 - eps
    new[over] *= ((1 - eps) / norm[over])[:, None]
    touched = sorted({i for u, ts in examples for i in [u, *ts]})
    out = table.copy()
    out[touched] = new[touched]
    return out


@pytest.mark.parametrize("lr,burn_in", [(0.05, (0.0, 0.0)), (0.05, (1.0, 0.0)), (40.0, (0.0, 0.0))])
def test_riemannian_update_matches_a_hand_derived_step(tmp_path, lr, burn_in):
    cfg, obj = _objective(tmp_path)
    rng = np.random.default_rng(0)
    table = rng.uniform(-0.4, 0.4, (cfg.model.vocab_size, 3))
    table[5] = [0.7, 0.5, -0.3]                                  # near the boundary: |x| = 0.91
    # two examples sharing node 5 (as u and as a negative): its two gradients add up
    examples = [(5, [6, 7, 8]), (9, [10, 5, 11])]
    batch = {"u": jnp.array([u for u, _ in examples], jnp.int32),
             "targets": jnp.array([t for _, t in examples], jnp.int32),
             "target_weight": jnp.ones((2, 3), jnp.float32), "burn_in": jnp.array(burn_in, jnp.float32)}
    params = {"params": {"poincare": {"embedding": jnp.asarray(table, jnp.float32)}}}
    norms = obj.normalizers(batch)
    loss, terms, rows = obj.row_gradients(params, batch, None, norms)
    got = np.asarray(obj.apply_rows(params, rows, jnp.float32(lr))["params"]["poincare"]["embedding"])
    factors = [cfg.model.burn_in_factor if b else 1.0 for b in burn_in]
    want = _hand_step(table.astype(np.float32).astype(np.float64), examples, lr, cfg.model.epsilon, factors)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)
    d0 = [_d(table[u], table[t[0]]) for u, t in examples]
    expect_loss = sum(-np.log(np.exp(-_d(table[u], table[t[0]])) / sum(np.exp(-_d(table[u], table[x])) for x in t))
                      for u, t in examples)
    np.testing.assert_allclose(float(loss), expect_loss, rtol=1e-5)
    np.testing.assert_allclose(float(terms["poincare_distance"][0]), sum(d0), rtol=1e-5)
    if lr > 1:                                                   # a step past the boundary is retracted onto it
        assert np.isclose(np.linalg.norm(got[5]), 1 - cfg.model.epsilon, atol=1e-6)
    untouched = np.setdiff1d(np.arange(len(table)), [5, 6, 7, 8, 9, 10, 11])
    np.testing.assert_array_equal(got[untouched], table.astype(np.float32)[untouched])


def test_distance_matches_gensim():
    from gensim.models.poincare import PoincareKeyedVectors

    rng = np.random.default_rng(1)
    v = rng.uniform(-0.5, 0.5, (50, 5))
    v /= np.maximum(1.0, np.linalg.norm(v, axis=1, keepdims=True) / 0.99)
    want = PoincareKeyedVectors.vector_distance_batch(v[0], v)
    np.testing.assert_allclose(distances_np(v[0], v), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(distance(jnp.asarray(v[0], jnp.float32), jnp.asarray(v, jnp.float32))),
                               want, rtol=2e-4, atol=2e-4)


def test_reconstruction_is_gensims_with_u_itself_left_out(tmp_path):
    from gensim.models.poincare import PoincareKeyedVectors, ReconstructionEvaluation

    tsv = GENSIM_DATA / "poincare_hypernyms_large.tsv"
    h = read_relations(tsv)
    rng = np.random.default_rng(2)
    x = rng.uniform(-0.5, 0.5, (h.num_nodes, 4)) / 2
    out = tmp_path / "v.txt"
    out.write_text(f"{h.num_nodes} 4\n" + "".join(f"{n} {' '.join(f'{a:.17g}' for a in row)}\n"
                                                 for n, row in zip(h.names, x)))
    kv = PoincareKeyedVectors.load_word2vec_format(str(out))
    theirs = ReconstructionEvaluation(str(tsv), kv).evaluate()
    x = np.stack([kv[n] for n in h.names]).astype(np.float64)
    same = reconstruction(x, h, count_self=True)
    assert same["mean_rank"] == pytest.approx(theirs["mean_rank"], rel=1e-12)
    assert same["map"] == pytest.approx(theirs["MAP"], rel=1e-12)
    ours = reconstruction(x, h)
    # u itself (distance 0) is one more node nearer than every related one, unless u is related to itself
    counted = np.mean(~h.related(h.relations[:, 0], h.relations[:, 0]))
    assert counted < 1                                           # the file holds such relations (mammal.n.01)
    assert ours["mean_rank"] == pytest.approx(theirs["mean_rank"] - counted, rel=1e-12)
    assert ours["relations"] == len(h.relations)


@pytest.mark.parametrize("name,text,message", [
    ("closure.tsv", "kangaroo.n.01\tmarsupial.n.01\nwallaby.n.01\n", r":2: node 'wallaby.n.01' has no parent"),
    ("closure.tsv", "a b\nb c d\n", r":2: expected CHILD PARENT, got 3 fields"),
    ("closure.csv", "id1,id2,weight\na,b,1\nc,,1\n", r":3: node 'c' has no parent"),
])
def test_a_hierarchy_line_without_a_parent_is_refused_with_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError, match=str(path).replace(".", r"\.") + message):
        read_relations(path)


def test_the_reference_csv_and_gensims_tsv_read_alike(tmp_path):
    (tmp_path / "c.csv").write_text("id1,id2,weight\na,b,1\na,c,1\nb,c,1\na,b,1\n")
    (tmp_path / "c.tsv").write_text("a\tb\na\tc\n# a comment\nb\tc\n")
    a, b = read_relations(tmp_path / "c.csv"), read_relations(tmp_path / "c.tsv")
    assert a.names == b.names == ["c", "a", "b"] or a.names == b.names
    np.testing.assert_array_equal(a.relations, b.relations)
    assert len(a.relations) == 3                                 # the repeated relation is kept once


def test_negatives_are_never_u_or_related_to_u_and_burn_in_comes_first():
    h = generated_hierarchy()
    ex = Examples(h, negative=10, power=1.0, tries=10, burn_in=1, seed=3)
    rows = ex.rows(0, 2 * len(h.relations))
    u, t, w = rows["u"] - SPECIALS, rows["targets"] - SPECIALS, rows["target_weight"]
    kept = w[:, 1:] > 0
    neg = t[:, 1:]
    assert kept.mean() > 0.95
    assert not np.any(kept & (neg == u[:, None]))
    assert not np.any(kept & h.related(np.broadcast_to(u[:, None], neg.shape), neg))
    assert np.all(h.related(u, t[:, 0]))                          # the positive is a relation of the closure
    # each epoch is every relation once
    first = np.sort(u[:len(h.relations)] * h.num_nodes + t[:len(h.relations), 0])
    np.testing.assert_array_equal(first, np.sort(h.relations[:, 0] * h.num_nodes + h.relations[:, 1]))
    np.testing.assert_array_equal(rows["burn_in"], np.repeat([1.0, 0.0], len(h.relations)))


def test_a_trained_run_round_trips_through_gensim_and_ptm_neighbors_ranks_by_the_hyperbolic_distance(tmp_path):
    from gensim.models.poincare import PoincareKeyedVectors

    from ptm_jax.evaluate.vector_loading import export_vectors, load_word_vectors
    from ptm_jax.train.stages import pretrain

    cfg = load_config("poincare_tiny", [f"output_dir={tmp_path / 'run'}", "train.steps=150", "train.eval_every=0",
                                        "train.checkpoint_every=0", "train.log_every=50"])
    pretrain(cfg)
    ours = load_word_vectors(str(tmp_path / "run"))
    out = tmp_path / "vectors.txt"
    export_vectors(str(tmp_path / "run"), str(out), "text_vectors")
    kv = PoincareKeyedVectors.load_word2vec_format(str(out))
    np.testing.assert_allclose(np.stack([kv[w] for w in ours.words]), ours.vectors, rtol=1e-6, atol=1e-7)
    assert np.all(np.linalg.norm(ours.vectors, axis=1) < 1)
    near = ours.neighbors("r.1", 5)
    theirs = kv.most_similar("r.1", topn=5)                       # gensim ranks by the Poincare distance
    assert [w for w, _ in near] == [w for w, _ in theirs]
    np.testing.assert_allclose([d for _, d in near], [kv.distance("r.1", w) for w, _ in theirs], rtol=1e-5)
    # the tree is learnt: reconstruction far better than chance (a node's ancestors among 121 nodes)
    h = generated_hierarchy()
    fit = reconstruction(np.stack([kv[n] for n in h.names]), h)
    assert fit["map"] > 0.5 and fit["mean_rank"] < 10, fit
