"""Static word vectors: lookup, cosine neighbours, analogies and word-similarity correlation.

Every family that exports static vectors (``Inspection.word_vectors``) is evaluated and queried through this one
module; ``commands/vectors.py`` puts it on the command line, ``evaluate/vector_loading.py`` loads a model's
vectors and ``export/vector_files.py`` reads and writes the vectors as files.

* :class:`WordVectors`: the words in vocabulary order (for a count-ordered vocabulary, the most frequent first),
  their float32 vectors and, once asked, their L2-normalised copies. Lookup can ignore case: words are folded
  with ``str.upper`` as word2vec.c's ``compute-accuracy.c`` (``toupper``) and gensim's
  ``KeyedVectors.evaluate_word_analogies(case_insensitive=True)`` do, and among the case variants of a word the
  first (most frequent) one stands for it.
* :func:`evaluate_analogies`: the compute-accuracy protocol (Mikolov et al. 2013, "Efficient Estimation of Word
  Representations in Vector Space", Sec. 4.1; word2vec.c ``compute-accuracy.c``): only the first
  ``restrict_vocab`` words (30,000 in the paper's tables) are known, the vectors are L2-normalised, the answer
  is the word whose vector has the largest cosine with ``b - a + c`` among the known words other than the three
  question words, questions with an unknown word are skipped and counted (coverage), and the first five
  sections of the file are semantic, the rest syntactic. The scores of all questions come from batched matrix
  products, not a loop over the vocabulary per question. ``half='tune'`` / ``'report'`` keeps one fixed half of
  the questions (the even / odd positions within each section, so both halves hold every section in equal
  share): choose settings on the tuning half and report on the other, never used to choose.
* :func:`evaluate_similarity`: Spearman's rank correlation (ties get their average rank) between human scores
  of word pairs (WordSim353, Finkelstein et al. 2002; SimLex-999, Hill et al. 2015) and the cosine of the
  pair's vectors; pairs with an unknown word are skipped and counted. This is gensim's
  ``evaluate_word_pairs``.

Protocol notes, measured against the two references:

* The question words are excluded with all their case variants when case is ignored (gensim walks past
  ``APPLE`` when ``apple`` was a question word); compute-accuracy excludes only the three rows it looked up,
  so a case variant of a question word can be its (wrong) answer. With a lower-cased vocabulary the two agree.
* compute-accuracy reads the first ``threshold`` lines of the vector file, which begin with ``</s>``; here
  the specials of the word vocabulary (``<pad>``, ``<unk>``, ``<eos>``) are never words, so the first
  ``restrict_vocab`` *words* are known.
* compute-accuracy answers only when the best candidate's dot product with the query is positive; the argmax
  here always answers. On Gutenberg CBOW vectors the three give the same counts in every section
  (``benchmarks/word_vector_eval.py --compute-accuracy``, docs/benchmarks.md).
* Malformed lines are errors here (a :class:`~ptm_jax.errors.DataError` naming the file and line); both
  references skip them silently.
"""
from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ptm_jax.errors import ConfigError, DataError

SEMANTIC_SECTIONS = 5
"""compute-accuracy.c counts sections 1-5 of questions-words.txt as semantic (``QID <= 5``), the rest syntactic."""
DEFAULT_RESTRICT_VOCAB = 30000
"""Mikolov et al. 2013 Sec. 4.1 and compute-accuracy's documented threshold."""
ANALOGY_HALVES = ("tune", "report")
"""The two fixed halves of an analogy file (:func:`analogy_half`)."""
QUESTION_BATCH = 512
SCORE_ELEMENTS = 1 << 25
"""At most this many question x candidate scores at a time (128 MiB of float32): the question batch shrinks
for vocabularies beyond 65,536 candidates."""


class WordVectors:
    """Words (in vocabulary order) and their vectors, with case-aware lookup and cosine queries."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray, counts: Sequence[int] | None = None,
                 source: str = "these vectors", oov=None, distance=None):
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise DataError(f"{source}: {len(words)} words but vectors of shape {vectors.shape}; expected "
                            f"[{len(words)}, dim]")
        self.words = list(words)
        self.vectors = vectors
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)
        self.source = source
        self.oov = oov
        """None, or words -> float32 [n, dim]: vectors of words outside ``words`` (a subword family's
        ``Inspection.subword_vectors``); ``neighbors`` and ``analogy`` use it for a word ``lookup`` does not find."""
        self.distance = distance
        """None (neighbours by cosine, largest first), or the family's geometry (``Inspection.vector_distance``:
        query [d], vectors [n, d] -> distances [n]): neighbours by that distance, nearest first."""
        self._unit: np.ndarray | None = None
        self._index: dict[bool, dict[str, int]] = {}
        self._variants: dict[str, list[int]] | None = None

    @classmethod
    def from_vocab(cls, matrix: np.ndarray, tokenizer, source: str = "this model", oov=None, distance=None
                   ) -> "WordVectors":
        """A family's ``word_vectors`` matrix (row i = id i) with the words of its tokenizer, the specials
        (``tokenizer.special_ids()``) left out: they are not words. Rows past the tokenizer's ids (a model
        vocabulary padded beyond the words) are unused ids and left out too."""
        matrix = np.asarray(matrix, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] < tokenizer.vocab_size:
            raise DataError(f"{source}: word vectors of shape {matrix.shape} do not cover the tokenizer's "
                            f"{tokenizer.vocab_size} ids")
        special = set(tokenizer.special_ids())
        ids = [i for i in range(tokenizer.vocab_size) if i not in special]
        counts = getattr(tokenizer, "counts", None)
        return cls([tokenizer.id_to_token(i) for i in ids], matrix[ids],
                   None if counts is None else np.asarray(counts)[ids], source=source, oov=oov, distance=distance)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def unit(self) -> np.ndarray:
        """L2-normalised rows (a zero row stays zero)."""
        if self._unit is None:
            norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
            self._unit = self.vectors / np.maximum(norms, np.finfo(np.float32).tiny)
        return self._unit

    def index(self, ignore_case: bool = False, restrict_vocab: int = 0) -> dict[str, int]:
        """key -> row over the first ``restrict_vocab`` words (0: all); with ``ignore_case`` the key is the
        upper-cased word and the first (most frequent) case variant wins."""
        n = _limit(restrict_vocab, len(self.words))
        full = self._index.get(ignore_case)
        if full is None:
            full = {}
            for i, w in enumerate(self.words):
                full.setdefault(w.upper() if ignore_case else w, i)
            self._index[ignore_case] = full
        return full if n == len(self.words) else {k: i for k, i in full.items() if i < n}

    def variants(self) -> dict[str, list[int]]:
        """upper-cased word -> the rows of all its case variants, most frequent first."""
        if self._variants is None:
            self._variants = {}
            for i, w in enumerate(self.words):
                self._variants.setdefault(w.upper(), []).append(i)
        return self._variants

    def lookup(self, word: str, ignore_case: bool = False) -> int:
        """The row of ``word``, or a DataError naming it with close in-vocabulary words."""
        key = word.upper() if ignore_case else word
        row = self.index(ignore_case).get(key)
        if row is None:
            raise DataError(f"word {word!r} is not in the vocabulary of {self.source} ({len(self.words)} words"
                            f"{', case ignored' if ignore_case else ''}){self.suggest(word)}")
        return row

    def suggest(self, word: str, n: int = 5, pool: int = 100000) -> str:
        """'; close in-vocabulary words: ...' over the ``pool`` most frequent words (or '' when none are)."""
        close = difflib.get_close_matches(word, self.words[:pool], n=n, cutoff=0.6)
        if not close:
            lowered = [w for w in self.words[:pool] if w.lower() == word.lower()][:n]
            close = lowered
        return f"; close in-vocabulary words: {', '.join(close)}" if close else ""

    def nearest(self, query: np.ndarray, k: int = 10, exclude: Iterable[int] = (), restrict_vocab: int = 0
                ) -> list[tuple[str, float]]:
        """The ``k`` words with the largest cosine to ``query`` (any vector), ``exclude`` rows left out; with
        ``distance``, the ``k`` nearest by it, with their distances."""
        if k < 1:
            raise ConfigError(f"-k {k}: must be at least 1")
        n = _limit(restrict_vocab, len(self.words))
        q = np.asarray(query, dtype=np.float32)
        if self.distance is not None:   # the family's geometry: nearest first, the distance reported
            scores = -np.asarray(self.distance(q, self.vectors[:n]), np.float64)
            scores[[i for i in exclude if i < n]] = -np.inf
            k = min(k, n)
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
            return [(self.words[i], float(-scores[i])) for i in top if np.isfinite(scores[i])]
        q = q / max(float(np.linalg.norm(q)), float(np.finfo(np.float32).tiny))
        scores = self.unit[:n] @ q
        scores[[i for i in exclude if i < n]] = -np.inf
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in top if np.isfinite(scores[i])]

    def neighbors(self, word: str, k: int = 10, ignore_case: bool = False, restrict_vocab: int = 0
                  ) -> list[tuple[str, float]]:
        """Cosine nearest neighbours of ``word`` (the word itself left out, its case variants kept), as word2vec.c
        ``distance.c`` and gensim's ``most_similar``."""
        row, vec = self.query_vector(word, ignore_case)
        if self.distance is not None and row is not None:
            vec = self.vectors[row]                       # the point itself, not its direction
        return self.nearest(vec, k, exclude=[] if row is None else [row], restrict_vocab=restrict_vocab)

    def query_vector(self, word: str, ignore_case: bool = False) -> tuple[int | None, np.ndarray]:
        """(row, unit vector) of ``word``; a word outside the vocabulary has row None and its vector from
        ``oov`` when set (else ``lookup``'s DataError)."""
        key = word.upper() if ignore_case else word
        row = self.index(ignore_case).get(key)
        if row is not None or self.oov is None:
            row = self.lookup(word, ignore_case)
            return row, self.unit[row]
        vec = np.asarray(self.oov([word]), dtype=np.float32)[0]
        return None, vec / max(float(np.linalg.norm(vec)), float(np.finfo(np.float32).tiny))

    def analogy(self, a: str, b: str, c: str, k: int = 10, ignore_case: bool = False, restrict_vocab: int = 0
                ) -> list[tuple[str, float]]:
        """Words closest to ``b - a + c`` over the unit vectors (a : b :: c : ?), the three left out (with
        ``ignore_case``, all their case variants, as :func:`evaluate_analogies`), as word2vec.c
        ``word-analogy.c``."""
        if self.distance is not None:
            raise ConfigError(f"{self.source}: analogies (b - a + c) are a question of the cosine geometry; these "
                              "vectors are ranked by their family's own distance (ptm neighbors)")
        found = [self.query_vector(w, ignore_case) for w in (a, b, c)]
        rows = [r for r, _ in found if r is not None]
        ua, ub, uc = (v for _, v in found)
        exclude = ([v for w in (a, b, c) for v in self.variants().get(w.upper(), [])] if ignore_case
                   else rows)
        return self.nearest(ub - ua + uc, k, exclude=exclude, restrict_vocab=restrict_vocab)


def _limit(restrict_vocab: int, n: int) -> int:
    if not isinstance(restrict_vocab, (int, np.integer)) or restrict_vocab < 0:
        raise ConfigError(f"restrict_vocab={restrict_vocab!r}: must be an integer >= 0 (0 = every word)")
    return n if restrict_vocab == 0 else min(int(restrict_vocab), n)


# ----------------------------------------------------------------------------------------------------
# Analogies


@dataclasses.dataclass
class AnalogySection:
    name: str
    questions: list[tuple[str, str, str, str]]
    lines: list[int]


def _read_lines(path) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    try:
        return p.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not UTF-8 ({e.reason} at byte {e.start}); re-encode the file") from None


def read_analogies(path) -> list[AnalogySection]:
    """questions-words.txt: ``: section`` headers, then one ``a b c d`` question a line (a : b :: c : d).
    Blank lines are skipped; anything else is a DataError naming the file and line."""
    sections: list[AnalogySection] = []
    for lineno, line in enumerate(_read_lines(path), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] == ":":
            if len(fields) < 2:
                raise DataError(f"{path}:{lineno}: section header ':' without a name; write ': NAME'")
            sections.append(AnalogySection(" ".join(fields[1:]), [], []))
            continue
        if len(fields) != 4:
            raise DataError(f"{path}:{lineno}: expected an analogy question of 4 words 'a b c d' (a : b :: c : d) "
                            f"or a ': section' header, got {len(fields)} field(s): {line[:80]!r}")
        if not sections:
            raise DataError(f"{path}:{lineno}: question before the first ': section' header; sections 1-5 are "
                            "semantic and the rest syntactic, so every question needs one")
        sections[-1].questions.append(tuple(fields))
        sections[-1].lines.append(lineno)
    if not any(s.questions for s in sections):
        raise DataError(f"{path}: holds no analogy questions ('a b c d' lines under ': section' headers)")
    return sections


def analogy_half(sections: list[AnalogySection], half: str | None) -> list[AnalogySection]:
    """One fixed half of the questions: ``'tune'`` keeps positions 0, 2, 4, ... of every section, ``'report'``
    positions 1, 3, 5, ...; ``None`` keeps all. The halves are disjoint, together the whole file, and each holds
    every section in equal share (within one question), so semantic and syntactic accuracies stay comparable."""
    if half is None:
        return sections
    if half not in ANALOGY_HALVES:
        raise ConfigError(f"analogy half {half!r}: choose one of {', '.join(ANALOGY_HALVES)} (tune: choose "
                          "settings on it; report: the other half, never used to choose)")
    keep = ANALOGY_HALVES.index(half)
    return [AnalogySection(s.name, s.questions[keep::2], s.lines[keep::2]) for s in sections]


def evaluate_analogies(wv: WordVectors, path, restrict_vocab: int = DEFAULT_RESTRICT_VOCAB,
                       ignore_case: bool = True, batch_size: int = QUESTION_BATCH, half: str | None = None) -> dict:
    """Accuracy on an analogy file with the compute-accuracy protocol (module doc), on all its questions or on
    one fixed ``half`` of them (:func:`analogy_half`).

    Returns ``{'accuracy', 'semantic_accuracy', 'syntactic_accuracy', 'correct', 'seen', 'questions',
    'coverage', 'restrict_vocab', 'half', 'sections': [{'section', 'kind', 'correct', 'seen', 'questions',
    'accuracy'}]}``; accuracies are fractions over the questions seen (None where none was)."""
    sections = analogy_half(read_analogies(path), half)
    n = _limit(restrict_vocab, len(wv))
    index = wv.index(ignore_case, n)
    key = (lambda w: w.upper()) if ignore_case else (lambda w: w)
    variants = wv.variants() if ignore_case else {}
    unit = wv.unit[:n]
    batch_size = max(1, min(batch_size, SCORE_ELEMENTS // max(n, 1)))
    keys_of_rows = [key(w) for w in wv.words[:n]]
    report = []
    for s_i, section in enumerate(sections):
        rows, excluded = [], []
        for q in section.questions:
            ks = [key(w) for w in q]
            ids = [index.get(k) for k in ks]
            if None in ids:
                continue
            rows.append(ids)
            excluded.append([r for k in ks[:3] for r in variants[k] if r < n] if ignore_case else ids[:3])
        correct = 0
        for start in range(0, len(rows), batch_size):
            ids = np.array(rows[start:start + batch_size], dtype=np.int64)
            queries = unit[ids[:, 1]] - unit[ids[:, 0]] + unit[ids[:, 2]]
            scores = queries @ unit.T
            ex = excluded[start:start + batch_size]
            qi = np.repeat(np.arange(len(ex)), [len(e) for e in ex])
            scores[qi, np.concatenate([np.asarray(e, np.int64) for e in ex])] = -np.inf
            best = np.argmax(scores, axis=1)
            correct += sum(keys_of_rows[b] == keys_of_rows[d] for b, d in zip(best, ids[:, 3]))
        report.append({"section": section.name, "kind": "semantic" if s_i < SEMANTIC_SECTIONS else "syntactic",
                       "correct": int(correct), "seen": len(rows), "questions": len(section.questions),
                       "accuracy": correct / len(rows) if rows else None})

    def total(kind=None):
        part = [r for r in report if kind is None or r["kind"] == kind]
        c, s = sum(r["correct"] for r in part), sum(r["seen"] for r in part)
        return c, s, sum(r["questions"] for r in part), (c / s if s else None)

    c, s, q, acc = total()
    return {"file": str(path), "restrict_vocab": n, "ignore_case": ignore_case, "half": half, "accuracy": acc,
            "semantic_accuracy": total("semantic")[3], "syntactic_accuracy": total("syntactic")[3],
            "correct": c, "seen": s, "questions": q, "coverage": s / q if q else 0.0, "sections": report}


# ----------------------------------------------------------------------------------------------------
# Word similarity


def read_word_pairs(path) -> list[tuple[str, str, float, int]]:
    """WordSim353 / SimLex-999 files: ``word1 word2 score`` a line (tab- or space-separated), ``#`` comments
    and blank lines skipped; ``(word1, word2, score, line)``. A malformed line is a DataError naming it."""
    pairs = []
    for lineno, line in enumerate(_read_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 3:
            raise DataError(f"{path}:{lineno}: expected 'word1<TAB>word2<TAB>score', got {len(fields)} "
                            f"field(s): {line[:80]!r}")
        try:
            score = float(fields[2])
        except ValueError:
            raise DataError(f"{path}:{lineno}: score {fields[2]!r} of ({fields[0]}, {fields[1]}) is not a "
                            "number") from None
        if not np.isfinite(score):
            raise DataError(f"{path}:{lineno}: score {fields[2]!r} is not finite")
        pairs.append((fields[0], fields[1], score, lineno))
    if not pairs:
        raise DataError(f"{path}: holds no word pairs ('word1<TAB>word2<TAB>score' lines)")
    return pairs


def rank(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their average rank (Spearman 1904; scipy.stats.rankdata 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    starts = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1]])
    ends = np.r_[starts[1:], len(x)]
    avg = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    out = np.empty(len(x))
    out[order] = np.repeat(avg, ends - starts)
    return out


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x = np.asarray(x, np.float64) - np.mean(x)
    y = np.asarray(y, np.float64) - np.mean(y)
    denom = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denom) if denom > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation of the tie-averaged ranks."""
    return pearson(rank(x), rank(y))


def evaluate_similarity(wv: WordVectors, path, restrict_vocab: int = 0, ignore_case: bool = True) -> dict:
    """Spearman (and Pearson) correlation of the pairs' cosines with the human scores of ``path``; pairs with
    a word outside the first ``restrict_vocab`` words (0: all) are skipped and counted."""
    pairs = read_word_pairs(path)
    index = wv.index(ignore_case, restrict_vocab)
    key = (lambda w: w.upper()) if ignore_case else (lambda w: w)
    kept = [(index.get(key(a)), index.get(key(b)), s) for a, b, s, _ in pairs]
    kept = [(i, j, s) for i, j, s in kept if i is not None and j is not None]
    result = {"file": str(path), "pairs": len(pairs), "seen": len(kept), "oov_pairs": len(pairs) - len(kept),
              "coverage": len(kept) / len(pairs), "spearman": None, "pearson": None}
    if len(kept) >= 2:
        i, j, gold = (np.array(c) for c in zip(*kept))
        cos = np.sum(wv.unit[i] * wv.unit[j], axis=1)
        result.update(spearman=spearman(gold, cos), pearson=pearson(gold, cos))
    return result
