"""`ptm neighbors | analogy | eval-vectors`: static word vectors on the command line, for every family with the
``Inspection.word_vectors`` hook, and for vector files trained by other tools.

MODEL is what ``evaluate/vector_loading.load_word_vectors`` reads (a run or params directory, or a word2vec.c /
GloVe vector file); the queries and scores are ``evaluate/word_vectors.py``. Here are the handlers, their arguments
and the printing of the results.
"""
from __future__ import annotations

import argparse
import json

from ptm_jax.errors import ConfigError
from ptm_jax.evaluate.vector_loading import load_word_vectors
from ptm_jax.evaluate.word_vectors import DEFAULT_RESTRICT_VOCAB


def _print(rows: list[tuple[str, float]], title: str, as_json: bool, out: list, measure: str = "cosine") -> None:
    if as_json:
        out.append({"query": title, "neighbors": [{"word": w, measure: round(c, 6)} for w, c in rows]})
    else:
        print(title)
        for w, c in rows:
            print(f"  {c:.4f}\t{w}")


def cmd_neighbors(args: argparse.Namespace) -> int:
    wv = load_word_vectors(args.model)
    out: list = []
    for word in args.words:
        _print(wv.neighbors(word, args.k, ignore_case=args.ignore_case, restrict_vocab=args.restrict_vocab),
               word, args.json, out, "cosine" if wv.distance is None else "distance")
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def cmd_analogy(args: argparse.Namespace) -> int:
    wv = load_word_vectors(args.model)
    out: list = []
    rows = wv.analogy(args.a, args.b, args.c, args.k, ignore_case=args.ignore_case,
                      restrict_vocab=args.restrict_vocab)
    _print(rows, f"{args.b} - {args.a} + {args.c}", args.json, out)
    if args.json:
        print(json.dumps(out[0], indent=2))
    return 0


def cmd_eval_vectors(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.word_vectors import evaluate_analogies, evaluate_similarity

    if not args.analogies and not args.similarity:
        raise ConfigError("ptm eval-vectors: give --analogies FILE and/or --similarity FILE (e.g. "
                          "../shared/data/word2vec/questions-words.txt, wordsim353.tsv, simlex999.txt)")
    wv = load_word_vectors(args.model)
    result: dict = {"model": str(args.model), "words": len(wv), "dim": wv.dim}
    if args.analogies:
        result["analogies"] = evaluate_analogies(wv, args.analogies, restrict_vocab=args.restrict_vocab,
                                                 ignore_case=args.ignore_case, half=args.analogy_half)
    result["similarity"] = [evaluate_similarity(wv, f, restrict_vocab=args.similarity_restrict_vocab,
                                                ignore_case=args.ignore_case) for f in args.similarity or []]
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        from ptm_jax import fs

        fs.write_text_atomic(args.json, text)
    return 0


def _common(p: argparse.ArgumentParser, restrict_default: int) -> None:
    p.add_argument("model", help="run directory, params directory, or a vector file (word2vec.c's text format "
                   "with its '<words> <dim>' header or its binary format, or GloVe's headerless vectors.txt)")
    p.add_argument("--restrict-vocab", type=int, default=restrict_default, metavar="N",
                   help="only the first N words (the most frequent in a count-ordered vocabulary) are candidates "
                   f"and known (0 = all; default {restrict_default})")
    p.add_argument("--ignore-case", action=argparse.BooleanOptionalAction, default=True,
                   help="compare words upper-cased, the most frequent case variant standing for a word, as "
                   "compute-accuracy and gensim do (default: on)")


def register(subparsers) -> None:
    p = subparsers.add_parser("neighbors", help="cosine nearest neighbours of words in static word vectors",
                              description="Prints the K words whose vectors have the largest cosine with each "
                              "WORD's (the word itself left out), as word2vec.c's distance tool; for a family "
                              "with a geometry of its own (Poincare embeddings: the hyperbolic distance) the K "
                              "nearest by its distance.")
    _common(p, 0)
    p.add_argument("words", nargs="+", metavar="WORD")
    p.add_argument("-k", type=int, default=10, help="neighbours per word (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_neighbors)

    p = subparsers.add_parser("analogy", help="a : b :: c : ? in static word vectors (b - a + c)",
                              description="Prints the K words closest to b - a + c over the L2-normalised "
                              "vectors, the three question words left out (word2vec.c word-analogy).")
    _common(p, 0)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("c")
    p.add_argument("-k", type=int, default=10, help="answers to print (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_analogy)

    p = subparsers.add_parser("eval-vectors", help="analogy accuracy and word-similarity Spearman of static "
                              "word vectors, as JSON",
                              description="Analogies with word2vec.c's compute-accuracy protocol (top "
                              f"--restrict-vocab words, default {DEFAULT_RESTRICT_VOCAB}; L2-normalised; the "
                              "three question words excluded; questions with unknown words skipped and counted "
                              "as coverage; sections 1-5 semantic, the rest syntactic) and the Spearman "
                              "correlation of cosines with human scores (WordSim353, SimLex-999).")
    _common(p, DEFAULT_RESTRICT_VOCAB)
    p.add_argument("--analogies", default=None, metavar="FILE",
                   help="questions-words.txt layout: ': section' headers, then 'a b c d' lines")
    p.add_argument("--analogy-half", choices=("tune", "report"), default=None,
                   help="only one fixed half of the questions (tune: even positions within each section, report: "
                   "odd ones): choose settings on 'tune', report on 'report' (default: all questions)")
    p.add_argument("--similarity", action="append", default=None, metavar="FILE",
                   help="'word1<TAB>word2<TAB>score' lines, '#' comments (repeatable: WordSim353, SimLex-999)")
    p.add_argument("--similarity-restrict-vocab", type=int, default=0, metavar="N",
                   help="words known to the similarity evaluation (0 = all, the default)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the report to this file")
    p.set_defaults(handler=cmd_eval_vectors)

