"""node2vec's two evaluations (Grover & Leskovec 2016, Sec. 4.3-4.4), with a split protocol that keeps the
figure reported apart from the one choices are made on.

* Node classification: one-vs-rest logistic regression (scikit-learn, L2, C = 1) on the node vectors; the labelled
  nodes are split once by a seeded permutation into train / dev / test (default 50 / 25 / 25%); micro- and
  macro-F1 on dev (to choose p, q) and on test (reported, never used to choose).
* Link prediction: a seeded share of the edges is held out (default 10% dev, 10% test; removed from the graph the
  vectors are trained on, both directions of an undirected edge), each with as many node pairs that are not edges
  of the full graph; an edge's feature is the Hadamard product of its two vectors (the paper's best operator), a
  logistic regression is fitted on the training graph's edges against as many sampled non-edges, and the ROC AUC
  of its scores is measured on dev and on test.
"""
from __future__ import annotations

import numpy as np


def label_split(num: int, seed: int, shares=(0.5, 0.25)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices of a seeded train / dev / test split of ``num`` items."""
    perm = np.random.default_rng([int(seed), 4242]).permutation(num)
    a, b = int(round(shares[0] * num)), int(round((shares[0] + shares[1]) * num))
    return perm[:a], perm[a:b], perm[b:]


def node_classification(x: np.ndarray, y: np.ndarray, split) -> dict[str, float]:
    """Micro/macro F1 on dev and test of a one-vs-rest logistic regression fitted on train."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.multiclass import OneVsRestClassifier

    train, dev, test = split
    clf = OneVsRestClassifier(LogisticRegression(C=1.0, max_iter=2000)).fit(x[train], y[train])
    out = {}
    for name, idx in (("dev", dev), ("test", test)):
        pred = clf.predict(x[idx])
        out[f"{name}_micro_f1"] = float(f1_score(y[idx], pred, average="micro"))
        out[f"{name}_macro_f1"] = float(f1_score(y[idx], pred, average="macro"))
    return out


def non_edges(edges: set[tuple[int, int]], num_nodes: int, count: int, rng: np.random.Generator
              ) -> np.ndarray:
    out: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(out) < count:
        a, b = (int(v) for v in rng.integers(0, num_nodes, 2))
        key = (min(a, b), max(a, b))
        if a != b and key not in edges and key not in seen:
            seen.add(key)
            out.append(key)
    return np.array(out, np.int64)


def link_split(pairs: np.ndarray, num_nodes: int, seed: int, shares=(0.1, 0.1)) -> dict[str, np.ndarray]:
    """Undirected edges ``pairs`` [E, 2] (each once) -> 'train' edges, 'dev'/'test' held-out edges and
    'dev_neg'/'test_neg' non-edges of the full graph."""
    rng = np.random.default_rng([int(seed), 777])
    perm = rng.permutation(len(pairs))
    n_dev, n_test = int(shares[0] * len(pairs)), int(shares[1] * len(pairs))
    edges = {(min(a, b), max(a, b)) for a, b in pairs.tolist()}
    negs = non_edges(edges, num_nodes, n_dev + n_test, rng)
    return {"dev": pairs[perm[:n_dev]], "test": pairs[perm[n_dev:n_dev + n_test]],
            "train": pairs[perm[n_dev + n_test:]], "dev_neg": negs[:n_dev], "test_neg": negs[n_dev:]}


def link_prediction(x: np.ndarray, split: dict[str, np.ndarray], num_nodes: int, seed: int) -> dict[str, float]:
    """ROC AUC on dev and test of a logistic regression on Hadamard features (module doc)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng([int(seed), 778])
    train = split["train"]
    held = {(min(a, b), max(a, b)) for k in ("dev", "test", "train") for a, b in split[k].tolist()}
    neg = non_edges(held, num_nodes, len(train), rng)

    def feats(p):
        return x[p[:, 0]] * x[p[:, 1]]

    clf = LogisticRegression(C=1.0, max_iter=2000).fit(
        np.concatenate([feats(train), feats(neg)]), np.r_[np.ones(len(train)), np.zeros(len(neg))])
    out = {}
    for name in ("dev", "test"):
        pos, negs = split[name], split[f"{name}_neg"]
        score = clf.decision_function(np.concatenate([feats(pos), feats(negs)]))
        out[f"{name}_auc"] = float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(negs))], score))
    return out
