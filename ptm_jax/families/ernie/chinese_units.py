"""ERNIE 1.0's Chinese knowledge units from a word segmenter: the unit source ``jieba`` (``data.unit_sources``).

ERNIE (Sun et al. 2019, Sec. 3.2 and 4.1) segments its Chinese corpus into words, then masks whole phrases and
entities instead of single characters (a character being a basic unit). Here the segmenter is jieba (PyPI
``jieba==0.42.1``, MIT) with its own dictionary (``jieba/dict.txt``: word, frequency, part-of-speech tag per line):

* The WordPiece pre-tokenizer makes every CJK ideograph a word of its own (``data/tokenizers.py``), so in the
  token cache a Chinese sentence is a run of one-character tokens. Each maximal run of tokens that are one CJK
  character each is joined back into text and cut by jieba's dictionary-based segmentation (``cut(text,
  HMM=False)``: the maximum-probability path over the dictionary's words; no HMM guesses for words outside it,
  so every unit is a dictionary word and the result is a function of the text and the dictionary alone).
* A word of two or more characters becomes a unit over its characters' tokens: an *entity* when the dictionary
  tags it as a person (nr), place (ns), organisation (nt) or other proper noun (nz), ERNIE's entity kinds
  (persons, locations, organisations, products), else a *phrase*. One-character words stay basic units.

Tokens that are not single CJK characters (Latin words, digits, punctuation, [UNK]) end a run. The units are
claimed in ``units.annotate`` after the span file and the lexicon and before PMI phrases, and cached with the
others (``units.build_units``; the fingerprint holds jieba's version and the dictionary's hash).
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np

from ptm_jax.errors import DataError

ENTITY_TAGS = frozenset({"nr", "ns", "nt", "nz"})
"""jieba's dictionary tags read as entities: person, place, organisation, other proper noun."""
INSTALL = "pip install jieba==0.42.1"
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk_char(text: str) -> bool:
    """One character in the reference BasicTokenizer's CJK ranges (``_is_chinese_char``)."""
    return len(text) == 1 and any(a <= ord(text) <= b for a, b in _CJK_RANGES)


def _jieba():
    try:
        import jieba
    except ImportError:
        raise DataError(f"data.unit_sources names 'jieba' but jieba is not installed: {INSTALL}") from None
    return jieba


class Segmenter:
    """jieba's dictionary segmentation and the dictionary's tags, loaded once."""

    def __init__(self):
        jieba = _jieba()
        jieba.setLogLevel(logging.WARNING)
        self.version = jieba.__version__
        self._tokenizer = jieba.Tokenizer()
        with self._tokenizer.get_dict_file() as f:
            raw = f.read()
        self.dictionary_sha256 = hashlib.sha256(raw).hexdigest()
        self.tags: dict[str, str] = {}
        for line in raw.decode("utf-8").splitlines():
            fields = line.split()
            if len(fields) == 3:
                self.tags[fields[0]] = fields[2]

    def cut(self, text: str) -> list[str]:
        return list(self._tokenizer.cut(text, HMM=False))

    def kind(self, word: str) -> str:
        """'entity' or 'phrase' (``units.KINDS``) by the word's tag in the dictionary."""
        return "entity" if self.tags.get(word) in ENTITY_TAGS else "phrase"


def cjk_token_chars(tokenizer: Any) -> list[str | None]:
    """Per token id: its character when the token is one CJK character (not a '##' piece), else None."""
    out: list[str | None] = []
    for i in range(tokenizer.vocab_size):
        text = tokenizer.id_to_token(i) or ""
        out.append(text if is_cjk_char(text) else None)
    return out


def segment_units(tokens: np.ndarray, chars: list[str | None], seg: Segmenter) -> list[tuple[int, int, str]]:
    """(start, end, kind name) token spans of the multi-character words of one sentence's CJK runs."""
    out = []
    toks = tokens.tolist()
    i, n = 0, len(toks)
    while i < n:
        if chars[toks[i]] is None:
            i += 1
            continue
        j = i
        while j < n and chars[toks[j]] is not None:
            j += 1
        text = "".join(chars[t] for t in toks[i:j])  # type: ignore[misc]
        pos = i
        for word in seg.cut(text):
            if len(word) > 1:
                out.append((pos, pos + len(word), seg.kind(word)))
            pos += len(word)
        if pos != j:  # jieba's words always cover the text; anything else is a broken install
            raise DataError(f"jieba segmented {text[:40]!r} into words of {pos - i} characters, not {j - i}; "
                            f"reinstall it: {INSTALL}")
        i = j
    return out
