"""`ptm context-neighbors` and `ptm vector-map`: a word's nearest neighbours in context, and 2-D maps of static
word vectors.

Contextual neighbours: the query word's feature in its sentence (``evaluate/features.py``, one layer, default
the last) against the features of every word occurrence of a reference text (one sentence per line, words
split on whitespace), ranked by cosine; each hit is printed with its sentence, so the senses a model tells
apart show (the contextual word-sense nearest-neighbour test of Peters et al. 2018 Sec. 5.3, Table 4,
which used SemCor). A static family gives every occurrence of a word the same vector, so its neighbours do not
depend on the context.

Vector map: the chosen words, their nearest neighbours and a background of the most frequent words, projected
to 2-D with PCA (numpy) or t-SNE (scikit-learn; ``evaluate/plots.project_2d``) and drawn with the chosen words
and their neighbours labelled. MODEL is anything ``ptm neighbors`` reads (``evaluate/vector_loading.py``).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import ConfigError, DataError


def context_neighbors(params: dict, model_cfg: Any, tokenizer: Any, sentence: Sequence[str], position: int,
                      reference: Sequence[Sequence[str]], *, layer: int = -1, k: int = 10, batch_size: int = 32,
                      exclude_self: bool = True, center: bool = False) -> list[dict]:
    """The ``k`` word occurrences of ``reference`` whose layer-``layer`` features have the largest cosine with
    word ``position`` of ``sentence``: [{'word', 'cosine', 'sentence', 'position'}]. With ``exclude_self`` the
    same occurrence (the query sentence found in the reference) is left out. ``center``: the mean feature of the
    reference's words is subtracted from every vector first, so that the cosine compares what the occurrences do
    not share (contextual features are anisotropic: a briefly trained biLM's top-layer cosines are all
    0.99 or more; Ethayarajh 2019, "How Contextual are Contextualized Word Representations?", Sec. 4)."""
    from ptm_jax.evaluate.features import word_features

    sentence = list(sentence)
    if not 0 <= position < len(sentence):
        raise ConfigError(f"word position {position} is outside the {len(sentence)}-word sentence")
    feats = word_features(params, model_cfg, tokenizer, [sentence, *reference], layers=[layer],
                          batch_size=batch_size)
    query = feats[0][0, position]
    rows = [(i, j) for i, s in enumerate(reference) for j in range(len(s))]
    if not rows:
        raise DataError("the reference text has no words")
    mat = np.concatenate([f[0] for f in feats[1:]], axis=0)
    if center:
        mean = mat.mean(axis=0)
        mat, query = mat - mean, query - mean
    norms = np.linalg.norm(mat, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
    cos = mat @ query / np.maximum(norms, 1e-12)
    if exclude_self:
        for n, (i, j) in enumerate(rows):
            if j == position and list(reference[i]) == sentence:
                cos[n] = -np.inf
    out = []
    for n in np.argsort(-cos, kind="stable")[:k]:
        if not np.isfinite(cos[n]):
            break
        i, j = rows[n]
        out.append({"word": reference[i][j], "cosine": round(float(cos[n]), 6), "sentence": " ".join(reference[i]),
                    "position": j})
    return out


def find_word(sentence: Sequence[str], word: str) -> int:
    """The first position of ``word`` in ``sentence`` (exact, then case-insensitive)."""
    for match in (lambda w: w == word, lambda w: w.lower() == word.lower()):
        for i, w in enumerate(sentence):
            if match(w):
                return i
    raise ConfigError(f"--word {word!r} is not a word of the --context sentence ({' '.join(sentence)!r}); words are "
                      "split on whitespace")


def read_reference(path: str, limit: int) -> list[list[str]]:
    from ptm_jax.export.inference import read_lines

    sentences = [line.split() for line in read_lines(path) if line.strip()]
    return sentences[:limit] if limit else sentences


def vector_map(model: str, words: Sequence[str], out: str | Path, *, neighbors: int = 5, background: int = 300,
               method: str = "pca", ignore_case: bool = True) -> dict:
    """Writes the map PNG; returns {'words': [...], 'labelled': [...], 'method': ...}."""
    from ptm_jax.evaluate.plots import plot_word_map, project_2d
    from ptm_jax.evaluate.vector_loading import load_word_vectors

    wv = load_word_vectors(model)
    rows: list[int] = []
    labelled: list[str] = []
    for w in words:
        r = wv.lookup(w, ignore_case=ignore_case)
        rows.append(r)
        labelled.append(wv.words[r])
        for n, _ in wv.neighbors(w, neighbors, ignore_case=ignore_case):
            rows.append(wv.index(False)[n])
            labelled.append(n)
    rows = list(dict.fromkeys(rows + list(range(min(background, len(wv))))))
    names = [wv.words[i] for i in rows]
    points = project_2d(wv.vectors[rows], method)
    plot_word_map(names, points, out, labelled=labelled,
                  title=f"{Path(str(model).rstrip('/')).name}: {method.upper()} of {len(rows)} word vectors")
    return {"words": list(words), "labelled": labelled, "points": len(rows), "method": method, "png": str(out)}
