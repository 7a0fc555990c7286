"""The parallel corpus of the translation objective and the fixed input vectors of its source words (McCann et
al. 2017 Sec. 3: the encoder reads GloVe(w^x), the decoder predicts the target words).

A parallel corpus is two line-aligned files: line i of the source file translates into line i of the target file
(Multi30k's ``train.en`` / ``train.de``). Both are read whole and checked before anything else: a missing file, a
source with no target side or two sides of different line counts is a DataError of one line naming the files and
their counts. 'generated' is a small synthetic pair for tests: sentences of Python's own ``pydoc_data`` topics,
and as their "translation" the same words in reverse order, each spelt backwards.

Input vectors (``model.input_vectors``): a run, params directory or vector file read by
``evaluate/vector_loading.py``, or 'random:DIM' (a fixed normal vector per word, seeded by the word's MD5). A
word the vectors lack reads zeros (as torchtext's GloVe gives CoVe's reference an unknown word).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import ConfigError, DataError

_WORDS_PUNCT = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]", re.UNICODE)
GENERATED_SENTENCES = 600


def tokenize(line: str, how: str = "words_punct") -> list[str]:
    """The words of one line: runs of word characters (an apostrophe inside a word kept) and single punctuation
    marks ('words_punct'), or whitespace-separated ('split')."""
    return line.split() if how == "split" else _WORDS_PUNCT.findall(line)


def _read_lines(path: str, side: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"parallel corpus: the {side} file {path} does not exist; give a file of one sentence per "
                        "line")
    try:
        return p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"parallel corpus: {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_parallel(source: str, target: str) -> tuple[list[str], list[str]]:
    """The two sides' lines, checked to be line-aligned (module doc)."""
    if not target:
        n = len(_read_lines(source, "source"))
        raise DataError(f"parallel corpus: {source} ({n} lines) has no target side; give the line-aligned "
                        "translation file (data.target_train / data.target_eval)")
    src, tgt = _read_lines(source, "source"), _read_lines(target, "target")
    if len(src) != len(tgt):
        raise DataError(f"parallel corpus: {source} has {len(src)} lines but {target} has {len(tgt)}; the two "
                        "sides must be line-aligned (line i of one translates line i of the other)")
    if not src:
        raise DataError(f"parallel corpus: {source} and {target} are empty")
    return src, tgt


def generated_pairs(n: int = GENERATED_SENTENCES) -> tuple[list[str], list[str]]:
    """(source, target) lines of the synthetic pair (module doc): the first ``n`` sentences of 3 to 16 words."""
    from pydoc_data.topics import topics

    from ptm_jax.data.corpus import split_sentences

    src: list[str] = []
    for name in sorted(topics):
        for para in topics[name].split("\n\n"):
            for s in split_sentences(para):
                words = tokenize(s.lower())
                if 3 <= len(words) <= 16:
                    src.append(" ".join(words))
                if len(src) == n:
                    break
            if len(src) == n:
                break
        if len(src) == n:
            break
    tgt = [" ".join(w[::-1] for w in reversed(s.split())) for s in src]
    return src, tgt


@dataclass
class Pairs:
    """Tokenized sentence pairs (the corpus's train or eval source): ``source`` and ``target`` word lists."""

    source: list[list[str]]
    target: list[list[str]]

    @property
    def num_docs(self) -> int:
        return len(self.source)

    num_sentences = num_docs

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.source) + sum(len(t) for t in self.target)


def load_pairs(data_cfg: Any, split: str) -> Pairs | None:
    """The tokenized pairs of ``split`` ('train' or 'eval'; None where the config gives no eval pair). A pair
    with an empty side is left out."""
    d = data_cfg
    if d.source_train == "generated":
        src, tgt = generated_pairs()
        cut = len(src) * 9 // 10
        src, tgt = (src[:cut], tgt[:cut]) if split == "train" else (src[cut:], tgt[cut:])
    elif split == "train":
        src, tgt = read_parallel(d.source_train, d.target_train)
    elif d.source_eval:
        src, tgt = read_parallel(d.source_eval, d.target_eval)
    else:
        return None
    pairs = [(tokenize(s, d.tokenize), tokenize(t, d.tokenize)) for s, t in zip(src, tgt)]
    pairs = [(s, t) for s, t in pairs if s and t]
    if not pairs:
        raise DataError(f"parallel corpus ({split}): no line pair with words on both sides")
    return Pairs([s for s, _ in pairs], [t for _, t in pairs])


# ------------------------------------------------------------------------------------------------ input vectors
_LOADED: dict[str, Any] = {}


def _random_rows(words: list[str], dim: int) -> np.ndarray:
    out = np.empty((len(words), dim), np.float32)
    for i, w in enumerate(words):
        seed = int.from_bytes(hashlib.md5(w.encode("utf-8")).digest()[:8], "little")
        out[i] = np.random.default_rng(seed).normal(0.0, dim ** -0.5, dim)
    return out


def input_vectors(model_cfg: Any, words: list[str]) -> np.ndarray:
    """float32 [len(words), model.input_dim]: each word's fixed input vector (module doc), looked up lower-cased
    when ``model.lower_case``; zeros for a word the vectors lack."""
    spec, dim = model_cfg.input_vectors, int(model_cfg.input_dim)
    keys = [w.lower() for w in words] if model_cfg.lower_case else list(words)
    if not spec:
        raise ConfigError("model.input_vectors is empty: name a GloVe/word2vec run, params directory or vector "
                          "file, or 'random:DIM'")
    if spec.startswith("random:"):
        try:
            want = int(spec.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"model.input_vectors={spec!r}: write 'random:DIM' with an integer DIM") from None
        if want != dim:
            raise ConfigError(f"model.input_vectors={spec!r} but model.input_dim={dim}; make them equal")
        return _random_rows(keys, dim)
    if spec not in _LOADED:
        if not Path(spec).exists():
            raise ConfigError(f"model.input_vectors={spec!r} does not exist; give a GloVe/word2vec run, params "
                              "directory or vector file, or 'random:DIM'")
        from ptm_jax.evaluate.vector_loading import load_word_vectors

        wv = load_word_vectors(spec)
        _LOADED[spec] = (wv.index(), wv.vectors)
    index, table = _LOADED[spec]
    if table.shape[1] != dim:
        raise ConfigError(f"model.input_vectors={spec!r} has {table.shape[1]}-dimensional vectors but "
                          f"model.input_dim={dim}; set model.input_dim={table.shape[1]}")
    rows = np.asarray([index.get(k, -1) for k in keys], np.int64)
    out = np.zeros((len(keys), dim), np.float32)
    hit = rows >= 0
    out[hit] = table[rows[hit]]
    return out
