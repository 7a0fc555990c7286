"""fastText's character n-grams and their hashed bucket ids (Bojanowski et al. 2017, "Enriching Word Vectors
with Subword Information", Sec. 3.2; facebookresearch/fastText ``src/dictionary.cc`` ``computeSubwords``,
``hash``, ``initNgrams``).

The rules, checked against the reference source and against gensim's ``compute_ngrams_bytes`` /
``ft_ngram_hashes`` (``tests/test_fasttext.py``):

* The word is wrapped in ``<`` and ``>`` and read as UTF-8 bytes. An n-gram starts at every byte that is not a
  UTF-8 continuation byte (``b & 0xC0 == 0x80``) and grows one character (a lead byte with its continuation
  bytes) at a time, so n counts characters, not bytes; n runs over ``minn .. maxn``.
* The two one-character n-grams ``<`` and ``>`` are never taken (``n == 1`` at the first or last character);
  other one-character n-grams are, when ``minn`` is 1.
* The whole wrapped word ``<word>`` is an n-gram like any other when it has at most ``maxn`` characters, so a
  short word's hashed bucket sits beside its own vocabulary row; repeats are kept (no deduplication).
* The hash is 32-bit FNV-1a in which each byte is first sign-extended (the reference casts it to ``int8_t``
  before widening to ``uint32_t``): bytes >= 0x80, every non-ASCII character, mix in as 0xFFFFFFxx. The bucket
  is ``hash % bucket`` and the row of the n-gram in the input table is ``nwords + bucket_id``.
* A vocabulary word's input units are its own row first, then its n-grams (``initNgrams``); the end-of-sentence
  token ``</s>`` gets no n-grams, and here neither do the word vocabulary's specials.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ptm_jax.errors import ConfigError

BOW, EOW = "<", ">"
FNV_OFFSET = 2166136261
FNV_PRIME = 16777619
_MASK = 0xFFFFFFFF


def fnv1a(data: bytes) -> int:
    """fastText's ``Dictionary::hash``: 32-bit FNV-1a over the sign-extended bytes of ``data``."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ ((b | 0xFFFFFF00) if b >= 0x80 else b)) * FNV_PRIME) & _MASK
    return h


def check_range(minn: int, maxn: int, bucket: int, where: str = "model") -> None:
    """A ConfigError naming the field unless 1 <= minn <= maxn and bucket >= 1."""
    for name, v in (("minn", minn), ("maxn", maxn), ("bucket", bucket)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{where}.{name}={v!r} must be an integer >= 1 (fastText: minn 3, maxn 6, "
                              f"bucket 2000000)")
    if minn > maxn:
        raise ConfigError(f"{where}.minn={minn} is larger than {where}.maxn={maxn}: the character n-grams run "
                          f"over minn..maxn, so set minn <= maxn (fastText: 3 and 6)")


def char_ngrams(word: str, minn: int, maxn: int) -> list[bytes]:
    """The character n-grams of ``word`` as UTF-8 byte strings, in the reference's order (module doc)."""
    data = (BOW + word + EOW).encode("utf-8")
    size = len(data)
    out = []
    for i in range(size):
        if (data[i] & 0xC0) == 0x80:
            continue
        j, n = i, 1
        while j < size and n <= maxn:
            j += 1
            while j < size and (data[j] & 0xC0) == 0x80:
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == size)):
                out.append(data[i:j])
            n += 1
    return out


def ngram_buckets(word: str, minn: int, maxn: int, bucket: int) -> list[int]:
    """Bucket ids (``hash % bucket``) of ``word``'s n-grams: gensim's ``ft_ngram_hashes``."""
    return [fnv1a(g) % bucket for g in char_ngrams(word, minn, maxn)]


def subword_table(words: Sequence[str], specials: Iterable[int], *, nwords: int, minn: int, maxn: int,
                  bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32 [len(words), N], lengths int32 [len(words)]): row i holds word i's own id, then
    ``nwords + bucket_id`` of each of its n-grams, padded with 0 up to N, the longest row; the ``specials``
    (ids) have their own id only."""
    check_range(minn, maxn, bucket)
    special = set(int(i) for i in specials)
    rows = []
    for i, w in enumerate(words):
        rows.append([i] if i in special else [i] + [nwords + b for b in ngram_buckets(w, minn, maxn, bucket)])
    lengths = np.array([len(r) for r in rows], np.int32)
    ids = np.zeros((len(rows), int(lengths.max(initial=1))), np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    return ids, lengths
