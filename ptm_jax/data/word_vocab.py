"""A word-level vocabulary with counts: the tokenizer of the pre-subword families (NNLM, word2vec, GloVe,
fastText, ELMo's output softmax).

Words are whitespace-separated strings (``str.split()``), optionally lower-cased. The vocabulary is built
from the words' counts over a corpus and saved as ``vocab.tsv``, one ``word<TAB>count`` line per id:

* ids 0, 1, 2 are the specials ``<pad>``, ``<unk>``, ``<eos>`` (lines 1-3). ``<unk>``'s count is the number
  of running words that map to it (words cut by ``min_count`` / ``max_vocab``, plus the literal ``<unk>`` of
  pre-tokenized corpora such as WikiText, Merity et al. 2016, which then round-trips to the unk id); the other
  two count 0 (``<eos>`` is added by the example streams at document ends, not by the text).
* then every word with ``count >= min_count``, by count descending, ties by the word's UTF-8 bytes ascending,
  cut to ``max_vocab`` entries in all (specials included). So the same corpus and settings always give a
  byte-identical file, in any process and run.

word2vec.c (``SortVocab``: count descending, ``min_count``; ``</s>`` as id 0) and torchtext's ``vocab``
(``min_freq``, ``max_tokens``, specials first) are the models; unlike word2vec.c, ties have a defined order.

A file read back is checked line by line: a line that is not ``word<TAB>count``, a duplicate word or a
negative count is a DataError naming the file and line. Ids are line numbers - 1; the order of the words
after the specials is not checked (a hand-made file may order them as it likes).
"""
from __future__ import annotations

import collections
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ptm_jax.data.tokenizers import Tokenizer
from ptm_jax.errors import ConfigError, DataError

PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
SPECIALS = (PAD, UNK, EOS)
VOCAB_FILE = "vocab.tsv"


def split_words(text: str, lower_case: bool = False) -> list[str]:
    """The words of ``text``: whitespace split (``str.split``), lower-cased when asked."""
    return (text.lower() if lower_case else text).split()


def count_words(texts: Iterable[str], lower_case: bool = False) -> collections.Counter:
    """word -> number of occurrences over ``texts`` (each a line or a sentence)."""
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(split_words(text, lower_case))
    return counts


def ordered_entries(counts: dict[str, int], min_count: int = 1, max_vocab: int = 0) -> list[tuple[str, int]]:
    """The lines of ``vocab.tsv`` for ``counts``: the specials, then the kept words (see the module doc)."""
    if not isinstance(min_count, int) or min_count < 1:
        raise ConfigError(f"min_count={min_count!r} must be an integer >= 1")
    if not isinstance(max_vocab, int) or (max_vocab and max_vocab <= len(SPECIALS)):
        raise ConfigError(f"max_vocab={max_vocab!r} must be 0 (no limit) or more than the {len(SPECIALS)} "
                          "specials")
    words = [(w, int(c)) for w, c in counts.items() if w not in SPECIALS]
    words.sort(key=lambda wc: (-wc[1], wc[0].encode("utf-8")))
    kept = [wc for wc in words if wc[1] >= min_count]
    if max_vocab:
        kept = kept[:max_vocab - len(SPECIALS)]
    unk = int(counts.get(UNK, 0)) + sum(c for _, c in words) - sum(c for _, c in kept)
    return [(PAD, 0), (UNK, unk), (EOS, 0)] + kept


def write_vocab(entries: list[tuple[str, int]], path: Path) -> None:
    """Writes ``word<TAB>count`` lines atomically (a temporary sibling, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes("".join(f"{w}\t{c}\n" for w, c in entries).encode("utf-8"))
    os.replace(tmp, path)


def read_vocab_tsv(path: Path) -> list[tuple[str, int]]:
    """``(word, count)`` in id order; every malformed line is a DataError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: word vocabulary not found; build one with "
                        "ptm_jax.data.word_vocab.build_word_vocab or point to an existing vocab.tsv")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e.reason} at byte {e.start}); re-encode the file") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    entries: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        parts = line.rstrip("\r").split("\t")
        if len(parts) != 2 or not parts[0] or parts[0] != parts[0].strip() or any(ch.isspace() for ch in parts[0]):
            raise DataError(f"{path}:{lineno}: expected 'word<TAB>count' with a word without whitespace, got "
                            f"{line[:80]!r}")
        word, count_text = parts
        try:
            count = int(count_text)
        except ValueError:
            raise DataError(f"{path}:{lineno}: count {count_text!r} of {word!r} is not an integer") from None
        if count < 0:
            raise DataError(f"{path}:{lineno}: count {count} of {word!r} is negative; counts are occurrences")
        if word in seen:
            raise DataError(f"{path}:{lineno}: duplicate word {word!r} (first on line {seen[word]}); every word "
                            "must appear once")
        seen[word] = lineno
        entries.append((word, count))
    for i, special in enumerate(SPECIALS):
        if i >= len(entries) or entries[i][0] != special:
            got = entries[i][0] if i < len(entries) else "end of file"
            raise DataError(f"{path}:{i + 1}: expected the special {special!r} (lines 1-3 are "
                            f"{', '.join(SPECIALS)}), got {got!r}")
    return entries


class WordVocab(Tokenizer):
    """A ``vocab.tsv`` as a :class:`Tokenizer` (``kind='word'``), so the token cache (``data/cache.py``)
    tokenizes a corpus with it. A word vocabulary has no [CLS]/[SEP]/[MASK]: ``sep_id`` and ``cls_id`` are
    ``eos_id`` (a document's end) and ``mask_id`` is ``unk_id``, for code that asks for them."""

    kind = "word"
    read_entries = staticmethod(read_vocab_tsv)
    """The vocabulary file's reader: ``path -> [(entry, count)]`` in id order, the three specials first."""

    def __init__(self, vocab_file, lower_case: bool = False):
        self.path = Path(vocab_file)
        self.lower_case = bool(lower_case)
        entries = self.read_entries(self.path)
        self._tokens = [w for w, _ in entries]
        self.counts = np.array([c for _, c in entries], dtype=np.int64)
        self._vocab = {w: i for i, w in enumerate(self._tokens)}
        self.vocab_size = len(self._tokens)
        self.pad_id, self.unk_id, self.eos_id = (self._vocab[s] for s in SPECIALS)
        self.cls_id = self.sep_id = self.eos_id
        self.mask_id = self.unk_id

    def tokenize(self, text: str) -> list[str]:
        return [w if w in self._vocab else UNK for w in split_words(text, self.lower_case)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        get, unk = self._vocab.get, self.unk_id
        return [[get(w, unk) for w in split_words(t, self.lower_case)] for t in texts]

    def decode(self, ids) -> str:
        return " ".join(self._tokens[int(i)] for i in ids if int(i) != self.pad_id)

    def token_to_id(self, tok: str) -> int:
        return self._vocab.get(tok, self.unk_id)

    def id_to_token(self, i: int) -> str:
        return self._tokens[int(i)]

    def special_ids(self) -> list[int]:
        return [self.pad_id, self.unk_id, self.eos_id]

    def _continuation_mask(self) -> np.ndarray:
        return np.zeros(self.vocab_size, dtype=bool)  # every word is one id

    def save(self, directory) -> list[Path]:
        out = Path(directory) / VOCAB_FILE
        write_vocab(list(zip(self._tokens, self.counts.tolist())), out)
        return [out]

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.path.read_bytes())
        h.update(f"lower_case={self.lower_case}".encode())
        return f"{self.kind}-{h.hexdigest()}"


def build_word_vocab(texts: Iterable[str], out_dir, *, min_count: int = 1, max_vocab: int = 0,
                     lower_case: bool = False) -> WordVocab:
    """Counts the words of ``texts``, writes ``out_dir/vocab.tsv`` and returns it loaded."""
    entries = ordered_entries(count_words(texts, lower_case), min_count, max_vocab)
    if len(entries) == len(SPECIALS):
        raise DataError(f"no word of the corpus occurs at least min_count={min_count} times; the vocabulary "
                        "would hold only the specials: lower min_count or check the corpus")
    path = Path(out_dir) / VOCAB_FILE
    write_vocab(entries, path)
    return WordVocab(path, lower_case=lower_case)
