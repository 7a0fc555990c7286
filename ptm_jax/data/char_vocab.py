"""A character vocabulary with counts: the tokenizer of character-level language models (``tokenizer.kind =
"char"``; Flair's forward and backward LMs, Akbik et al. 2018, read text one character at a time, over a
dictionary of characters as flair's ``Dictionary.load("chars")``).

A text is its characters (Unicode code points, whitespace included: the space between words is what a word's
embedding is read at), optionally lower-cased. The vocabulary is saved as ``chars.json``::

    {"format": "ptm-char-vocab", "version": 1, "entries": [["<pad>", 0], ["<unk>", n], ["<eos>", 0], ["e", 91234], ...]}

* ids 0, 1, 2 are the specials ``<pad>``, ``<unk>`` (its count: the characters that map to it), ``<eos>`` (added by
  the example streams at document ends, as flair's document delimiter);
* then every character with ``count >= min_count`` by count descending, ties by code point ascending, cut to
  ``max_vocab`` entries in all (specials included): the same corpus and settings give a byte-identical file.

JSON, not word_vocab's TSV, because a character may be whitespace. A file read back is checked entry by entry: an
entry that is not ``[one character, count >= 0]`` (after the specials) or a duplicate is a DataError naming the
file and entry. The sentences of a document are joined by a space in the token cache
(``data/cache.sentence_joiner``), so the characters of two sentences never touch.
"""
from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ptm_jax.data.word_vocab import WordVocab
from ptm_jax.errors import ConfigError, DataError

PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
SPECIALS = (PAD, UNK, EOS)
CHARS_FILE = "chars.json"
FORMAT = "ptm-char-vocab"


def count_chars(texts: Iterable[str], lower_case: bool = False) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(text.lower() if lower_case else text)
    return counts


def ordered_entries(counts: dict[str, int], min_count: int = 1, max_vocab: int = 0) -> list[tuple[str, int]]:
    """The entries of ``chars.json`` for ``counts`` (module doc)."""
    if not isinstance(min_count, int) or min_count < 1:
        raise ConfigError(f"tokenizer.min_count={min_count!r} must be an integer >= 1")
    if not isinstance(max_vocab, int) or (max_vocab and max_vocab <= len(SPECIALS)):
        raise ConfigError(f"tokenizer.vocab_size={max_vocab!r} must be 0 (no limit) or more than the "
                          f"{len(SPECIALS)} specials")
    chars = sorted(((c, int(n)) for c, n in counts.items() if len(c) == 1), key=lambda cn: (-cn[1], ord(cn[0])))
    kept = [cn for cn in chars if cn[1] >= min_count]
    if max_vocab:
        kept = kept[:max_vocab - len(SPECIALS)]
    unk = sum(n for _, n in chars) - sum(n for _, n in kept)
    return [(PAD, 0), (UNK, unk), (EOS, 0)] + kept


def write_chars(entries: list[tuple[str, int]], path: Path) -> None:
    """Writes ``chars.json`` atomically (a temporary sibling, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"format": FORMAT, "version": 1, "entries": [list(e) for e in entries]},
                              ensure_ascii=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_chars(path: Path) -> list[tuple[str, int]]:
    """``(character, count)`` in id order; a malformed file or entry is a DataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: character vocabulary not found; train one (tokenizer.kind='char' with an empty "
                        "tokenizer.vocab_file) or point tokenizer.vocab_file to a chars.json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{path}: not a JSON character vocabulary ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("entries"), list):
        raise DataError(f"{path}: expected {{'format': '{FORMAT}', 'version': 1, 'entries': [[char, count], ...]}}")
    entries, seen = [], {}
    for i, entry in enumerate(doc["entries"]):
        ok = (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
              and isinstance(entry[1], int) and entry[1] >= 0
              and (len(entry[0]) == 1 or (i < len(SPECIALS) and entry[0] == SPECIALS[i])))
        if not ok:
            raise DataError(f"{path}: entry {i} is {entry!r}; expected [one character, count >= 0]")
        if entry[0] in seen:
            raise DataError(f"{path}: entry {i} repeats {entry[0]!r} (first at entry {seen[entry[0]]})")
        seen[entry[0]] = i
        entries.append((entry[0], entry[1]))
    if [c for c, _ in entries[:len(SPECIALS)]] != list(SPECIALS):
        raise DataError(f"{path}: entries 0-2 must be the specials {', '.join(SPECIALS)}")
    return entries


class CharVocab(WordVocab):
    """A ``chars.json`` as a :class:`Tokenizer` (``kind='char'``): one id per character, ``<unk>`` for one the
    vocabulary lacks. The id maps, specials and fingerprint are the word vocabulary's (no [CLS]/[SEP]/[MASK]:
    ``cls_id`` and ``sep_id`` are ``eos_id``, ``mask_id`` is ``unk_id``)."""

    kind = "char"
    read_entries = staticmethod(read_chars)

    def _ids(self, text: str) -> np.ndarray:
        """int32 ids of ``text``'s characters: one lookup per distinct character."""
        if self.lower_case:
            text = text.lower()
        codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        uniq, inverse = np.unique(codes, return_inverse=True)
        get, unk = self._vocab.get, self.unk_id
        table = np.fromiter((get(chr(u), unk) for u in uniq.tolist()), np.int32, count=len(uniq))
        return table[inverse].astype(np.int32)

    def tokenize(self, text: str) -> list[str]:
        return [self._tokens[i] for i in self._ids(text).tolist()]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        flat, lengths = self.encode_batch_flat(texts)
        return [part.tolist() for part in np.split(flat, np.cumsum(lengths)[:-1])] if texts else []

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.fromiter((len(t) for t in texts), np.int64, count=len(texts))
        return self._ids("".join(texts)), lengths

    def decode(self, ids) -> str:
        """The characters of ``ids`` (``<eos>`` as a line break, padding dropped)."""
        return "".join("\n" if int(i) == self.eos_id else self._tokens[int(i)] for i in ids if int(i) != self.pad_id)

    def save(self, directory) -> list[Path]:
        out = Path(directory) / CHARS_FILE
        write_chars(list(zip(self._tokens, self.counts.tolist())), out)
        return [out]


def build_char_vocab(texts: Iterable[str], out_dir, *, min_count: int = 1, max_vocab: int = 0,
                     lower_case: bool = False) -> CharVocab:
    """Counts the characters of ``texts``, writes ``out_dir/chars.json`` and returns it loaded."""
    entries = ordered_entries(count_chars(texts, lower_case), min_count, max_vocab)
    if len(entries) == len(SPECIALS):
        raise DataError(f"no character of the corpus occurs at least min_count={min_count} times; the vocabulary "
                        "would hold only the specials: lower tokenizer.min_count or check the corpus")
    path = Path(out_dir) / CHARS_FILE
    write_chars(entries, path)
    return CharVocab(path, lower_case=lower_case)
