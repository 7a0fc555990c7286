"""node2vec (ptm_jax/families/node2vec): the walks' transition probabilities against the paper's formula, the
edge-list reader's errors, walks that do not depend on who walks them, a trained run's vectors through gensim,
and node classification on the generated planted-partition graph."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from ptm_jax.errors import DataError
from ptm_jax.families.node2vec.alias import alias_setup, build_tables
from ptm_jax.families.node2vec.graph import from_edges, read_edge_list
from ptm_jax.families.node2vec.walks import EOS_ID, PAD_ID, SPECIALS, Walks

# a weighted undirected graph with a triangle (0, 1, 2), a square (1, 2, 3, 4) and a pendant node 5
EDGES = {("a", "b"): 1.0, ("a", "c"): 2.0, ("b", "c"): 1.0, ("b", "d"): 3.0, ("c", "e"): 1.0, ("d", "e"): 2.0,
         ("d", "f"): 0.5}


def _graph():
    both = {}
    for (s, t), w in EDGES.items():
        both[(s, t)] = both[(t, s)] = w
    return from_edges(both, directed=False)


def _expected(g, t: int, v: int, p: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """The paper's unnormalised pi_vx = alpha_pq(t, x) w_vx over v's neighbours x, written out from Sec. 3.2.2."""
    xs = g.indices[g.indptr[v]:g.indptr[v + 1]]
    ws = g.weights[g.indptr[v]:g.indptr[v + 1]]
    t_nbrs = set(g.indices[g.indptr[t]:g.indptr[t + 1]].tolist())
    alpha = np.array([1 / p if x == t else (1.0 if x in t_nbrs else 1 / q) for x in xs.tolist()])
    pi = alpha * ws
    return xs, pi / pi.sum()


def test_second_order_transitions_match_the_formula_by_chi_square():
    g, p, q = _graph(), 0.5, 2.0
    walks = Walks(g, build_tables(g, p, q), length=3, per_node=6000)
    nodes = walks.nodes(np.arange(walks.per_pass), seed=7)                      # [36000, 3]: t -> v -> x
    checked = 0
    for t in range(g.num_nodes):
        for v in g.indices[g.indptr[t]:g.indptr[t + 1]].tolist():
            rows = nodes[(nodes[:, 0] == t) & (nodes[:, 1] == v)]
            if len(rows) < 400:
                continue
            xs, probs = _expected(g, t, v, p, q)
            observed = np.array([(rows[:, 2] == x).sum() for x in xs.tolist()])
            assert observed.sum() == len(rows)                                    # every step goes to a neighbour
            if len(xs) == 1:                                                      # the pendant node: no choice
                continue
            assert chisquare(observed, probs * len(rows)).pvalue > 1e-4, (t, v, observed, probs)
            first_order = g.weights[g.indptr[v]:g.indptr[v + 1]] / g.weights[g.indptr[v]:g.indptr[v + 1]].sum()
            if not np.allclose(first_order, probs):                               # the bias is visible
                assert chisquare(observed, first_order * len(rows)).pvalue < 1e-6, (t, v)
            checked += 1
    assert checked >= 8
    # the first step is first order: proportional to the start's edge weights
    for s in range(g.num_nodes):
        rows = nodes[nodes[:, 0] == s]
        xs = g.indices[g.indptr[s]:g.indptr[s + 1]]
        w = g.weights[g.indptr[s]:g.indptr[s + 1]]
        observed = np.array([(rows[:, 1] == x).sum() for x in xs.tolist()])
        if len(xs) > 1:
                assert chisquare(observed, w / w.sum() * len(rows)).pvalue > 1e-4, s


def test_alias_tables_reproduce_their_distribution_exactly():
    probs = np.array([0.1, 0.5, 0.25, 0.15])
    prob, alias = alias_setup(probs)
    # outcome mass: each column keeps prob[i] / n and gives the rest to alias[i]
    mass = prob / 4
    np.add.at(mass, alias, (1 - prob) / 4)
    np.testing.assert_allclose(mass, probs, atol=1e-12)


def test_walks_do_not_depend_on_who_walks_them_and_fill_the_stream():
    g = _graph()
    walks = Walks(g, build_tables(g, 2.0, 0.5), length=5, per_node=3)
    whole = walks.nodes(np.arange(walks.per_pass), seed=3)
    parts = np.concatenate([walks.nodes(np.arange(a, min(a + 5, walks.per_pass)), seed=3)
                            for a in range(0, walks.per_pass, 5)])
    np.testing.assert_array_equal(whole, parts)
    assert not np.array_equal(whole, walks.nodes(np.arange(walks.per_pass), seed=4))
    # each node starts per_node walks a pass
    assert np.bincount(whole[:, 0], minlength=g.num_nodes).tolist() == [3] * g.num_nodes
    stream = walks.stream(3)
    tokens, starts = stream.span(0, 2 * stream.pass_tokens)
    assert tokens.size == 2 * walks.per_pass * 6
    rows = tokens.reshape(-1, 6)
    np.testing.assert_array_equal(rows[:, -1], EOS_ID)
    np.testing.assert_array_equal(rows[:walks.per_pass, :5], whole + SPECIALS)    # undirected: no walk stops
    np.testing.assert_array_equal(rows[walks.per_pass:], rows[:walks.per_pass])    # every pass walks the same
    a, _ = stream.span(17, 40)
    np.testing.assert_array_equal(a, tokens[17:40])                               # any span, any host share
    assert starts.reshape(-1, 6)[:, 0].all() and not starts.reshape(-1, 6)[:, 1:].any()


def test_a_directed_walk_stops_at_a_sink_and_pads():
    g = from_edges({("a", "b"): 1.0, ("b", "c"): 1.0}, directed=True)
    walks = Walks(g, build_tables(g, 1.0, 1.0), length=4, per_node=1)
    tokens, _ = walks.stream(0).span(0, walks.stream(0).pass_tokens)
    rows = tokens.reshape(-1, 5)
    a, b, c = (g.names.index(n) + SPECIALS for n in "abc")
    got = {tuple(r) for r in rows.tolist()}
    assert got == {(a, b, c, PAD_ID, EOS_ID), (b, c, PAD_ID, PAD_ID, EOS_ID), (c, PAD_ID, PAD_ID, PAD_ID, EOS_ID)}


@pytest.mark.parametrize("text,weighted,message", [
    ("a b\nb c\nc\n", False, r":3: expected SOURCE TARGET, got 1 field"),
    ("a b 1.0\nb c 2\n", False, r":1: expected SOURCE TARGET, got 3 field\(s\) \(a weighted edge list\?"),
    ("# header\na b 1\nb c -2\n", True, r":3: the weight '-2' is not a positive finite number"),
    ("a b 1\nb c x\n", True, r":2: the weight 'x' is not a positive finite number"),
])
def test_a_malformed_edge_list_line_is_refused_with_file_and_line(tmp_path, text, weighted, message):
    path = tmp_path / "edges.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=str(path).replace(".", r"\.") + message):
        read_edge_list(path, directed=False, weighted=weighted)


def test_edge_list_reads_weights_directions_and_repeats(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("a b 2\nb c 1.5  # comment\n\na b 3\n")
    g = read_edge_list(path, directed=True, weighted=True)
    assert g.num_edges == 2                                      # a repeated edge keeps its last weight
    a, b = g.names.index("a"), g.names.index("b")
    assert g.weights[g.indptr[a]:g.indptr[a + 1]].tolist() == [3.0] and g.indices[g.indptr[a]] == b
    u = read_edge_list(path, directed=False, weighted=True)
    assert u.num_edges == 4 and bool(u.has_edge(np.array([b]), np.array([a]))[0])


def test_node2vec_run_recovers_communities_and_its_vectors_round_trip_through_gensim(tmp_path):
    from gensim.models import KeyedVectors

    from ptm_jax.config_loading import load_config
    from ptm_jax.evaluate.vector_loading import export_vectors, load_word_vectors
    from ptm_jax.export.vector_files import read_vectors
    from ptm_jax.families.node2vec import quality
    from ptm_jax.families.node2vec.graph import generated_graph
    from ptm_jax.train.stages import pretrain

    cfg = load_config("node2vec_tiny", [f"output_dir={tmp_path / 'run'}", "train.steps=120", "train.learning_rate=0.2",
                                        "train.eval_every=0", "train.checkpoint_every=0", "train.log_every=60"])
    pretrain(cfg)
    out = tmp_path / "vectors.txt"
    export_vectors(str(tmp_path / "run"), str(out), "text_vectors")
    kv = KeyedVectors.load_word2vec_format(str(out))
    ours = load_word_vectors(str(tmp_path / "run"))
    assert len(kv) == len(ours) == 100
    np.testing.assert_allclose(np.stack([kv[w] for w in ours.words]), ours.vectors, rtol=1e-6, atol=1e-7)
    kv.save_word2vec_format(str(tmp_path / "back.txt"))                         # and gensim's file read back
    words, vectors = read_vectors(tmp_path / "back.txt")
    np.testing.assert_allclose(vectors, np.stack([kv[w] for w in words]), rtol=1e-6, atol=1e-7)
    # the planted communities from the vectors alone (chance: 0.25)
    _, community = generated_graph(cfg.data.seed)
    x = np.stack([kv[n] for n in community])
    y = np.array(list(community.values()))
    scores = quality.node_classification(x, y, quality.label_split(len(y), 0))
    assert scores["test_micro_f1"] > 0.8, scores


def test_two_hosts_build_the_one_hosts_batch_each_walking_only_its_own_rows(tmp_path, monkeypatch):
    from ptm_jax.config_loading import load_config
    from ptm_jax.families import registry
    from ptm_jax.families.node2vec import walks as walks_lib
    from ptm_jax.train.stages import prepare_corpus

    cfg = load_config("node2vec_tiny", [f"output_dir={tmp_path}", "train.batch_size=128", "data.pack_rows=64"])
    corpus = prepare_corpus(cfg)
    obj = registry.family_of_objective("node2vec").pretraining.objectives["node2vec"](cfg, corpus)
    walked: list[np.ndarray] = []
    nodes = walks_lib.Walks.nodes

    def spy(self, slots, seed):
        walked.append(np.asarray(slots))
        return nodes(self, slots, seed)

    monkeypatch.setattr(walks_lib.Walks, "nodes", spy)
    one, _ = obj.batch_maker(corpus.train, 0, 128, 0, 1, True)
    whole = one(3)
    walked.clear()
    halves = []
    for pi in range(2):
        make, _ = obj.batch_maker(corpus.train, 0, 128, pi, 2, True)
        halves.append(make(3))
        # a host walks the walks around its own 64 running words (its share, the window's reach): a handful
        assert max(len(w) for w in walked) <= 16 and set(np.concatenate(walked).tolist()) < set(range(200))
        walked.clear()
    for k in whole:
        np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), whole[k], err_msg=k)
