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
and their neighbours labelled. MODEL is anything ``ptm neighbors`` reads (``evaluate/vector_commands.py``).
"""
from __future__ import annotations

import argparse
import json
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
    from ptm_jax.export.commands import read_lines

    sentences = [line.split() for line in read_lines(path) if line.strip()]
    return sentences[:limit] if limit else sentences


def cmd_context_neighbors(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.features import load_model

    params, cfg, tok = load_model(args.model)
    sentence = args.context.split()
    reference = read_reference(args.reference, args.max_sentences)
    hits = context_neighbors(params, cfg, tok, sentence, find_word(sentence, args.word), reference,
                             layer=args.layer, k=args.k, center=args.center)
    if args.json:
        print(json.dumps({"word": args.word, "context": args.context, "neighbors": hits}, indent=2))
    else:
        print(f"{args.word} in: {args.context}")
        for h in hits:
            print(f"  {h['cosine']:.4f}\t{h['word']}\t| {h['sentence'][:100]}")
    return 0


def vector_map(model: str, words: Sequence[str], out: str | Path, *, neighbors: int = 5, background: int = 300,
               method: str = "pca", ignore_case: bool = True) -> dict:
    """Writes the map PNG; returns {'words': [...], 'labelled': [...], 'method': ...}."""
    from ptm_jax.evaluate.plots import plot_word_map, project_2d
    from ptm_jax.evaluate.vector_commands import load_word_vectors

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


def cmd_vector_map(args: argparse.Namespace) -> int:
    print(json.dumps(vector_map(args.model, args.words, args.out, neighbors=args.neighbors,
                                background=args.background, method=args.method, ignore_case=args.ignore_case),
                     indent=2))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "context-neighbors", help="nearest neighbours of a word in context, over a reference text's words",
        description="Ranks every word occurrence of --reference (one sentence per line) by the cosine of its "
        "layer --layer features with WORD's in the --context sentence, and prints the top K with their sentences.")
    p.add_argument("model", help="params directory, training run or Hugging Face folder")
    p.add_argument("--context", required=True, help="the sentence (words split on whitespace)")
    p.add_argument("--word", required=True, help="the query word (its first occurrence in --context)")
    p.add_argument("--reference", required=True, help="text file, one sentence per line ('-' = stdin)")
    p.add_argument("--max-sentences", type=int, default=2000, help="first N reference lines (0 = all; 2000)")
    p.add_argument("--layer", type=int, default=-1, help="feature layer (0 = embeddings, -1 = last; default -1)")
    p.add_argument("-k", type=int, default=10, help="neighbours to print (default 10)")
    p.add_argument("--center", action="store_true", help="subtract the reference words' mean feature before the "
                   "cosine (compares what occurrences do not share; for anisotropic features)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_context_neighbors)

    p = subparsers.add_parser(
        "vector-map", help="2-D PCA / t-SNE map of static word vectors with chosen words labelled",
        description="Projects the chosen WORDs, their --neighbors nearest words and the --background most "
        "frequent words to 2-D (PCA with numpy; t-SNE needs scikit-learn) and writes a PNG with the chosen "
        "words and their neighbours labelled.")
    p.add_argument("model", help="run or params directory of a static-vector family, or a vector file")
    p.add_argument("words", nargs="+", metavar="WORD")
    p.add_argument("--neighbors", type=int, default=5, help="nearest words added per WORD (default 5)")
    p.add_argument("--background", type=int, default=300, help="most frequent words drawn unlabelled (300)")
    p.add_argument("--method", choices=("pca", "tsne"), default="pca")
    p.add_argument("--ignore-case", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="vector_map.png", help="PNG path (default ./vector_map.png)")
    p.set_defaults(handler=cmd_vector_map)
