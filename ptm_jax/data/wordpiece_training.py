"""WordPiece vocabulary training that gives the same vocabulary in every run and on every process.

The algorithm is Hugging Face ``tokenizers``' WordPieceTrainer (a BPE trainer with the '##' continuation
prefix; tokenizers/src/models/bpe/trainer.rs): count the pre-tokenized words; keep the ``limit_alphabet``
most frequent characters; split each word into characters ('##c' after the first); then repeatedly merge the
most frequent adjacent pair (counts weighted by word frequency) into a new token ``a + b`` minus b's '##',
until the vocabulary has ``vocab_size`` entries or the best pair is seen fewer than ``min_frequency`` times.

The Rust trainer numbers the '##c' tokens in the iteration order of a randomly seeded hash map and breaks
ties between equally frequent pairs by those numbers, so the same text gave different vocabularies in
different calls (three calls, three vocabularies). Here every order is defined: characters by code point
(alphabet ties on count by code point too), '##c' tokens after the alphabet by code point, and ties between
pairs by token id, as the Rust trainer does but with ids that do not depend on hashing.
"""
from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

PREFIX = "##"


def count_words(texts: Iterable[str], normalizer, pre_tokenizer) -> Counter:
    """Words (after ``normalizer`` and ``pre_tokenizer``, Hugging Face components) -> count."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _alphabet(words: Counter, limit: int) -> list[str]:
    chars: Counter = Counter()
    for word, n in words.items():
        for c in word:
            chars[c] += n
    kept = sorted(chars, key=lambda c: (chars[c], c))  # the least frequent first; ties by code point
    if limit and len(kept) > limit:
        kept = kept[len(kept) - limit:]
    return sorted(kept)


def train_vocab(words: Counter, vocab_size: int, specials: Iterable[str], *, min_frequency: int = 2,
                limit_alphabet: int = 1000) -> list[str]:
    """The vocabulary (specials, alphabet, '##' alphabet, merges in merge order) from word counts."""
    vocab = list(dict.fromkeys(specials))
    alphabet = set(_alphabet(words, limit_alphabet))
    vocab += [c for c in sorted(alphabet) if c not in vocab]
    continuation = sorted({c for w in words for c in w[1:] if c in alphabet})
    vocab += [PREFIX + c for c in continuation if PREFIX + c not in vocab]
    ids = {t: i for i, t in enumerate(vocab)}

    seqs: list[list[int]] = []
    freqs: list[int] = []
    for word in sorted(words):  # a fixed order (it decides nothing below, but keeps every step reproducible)
        seq = [ids[c if i == 0 else PREFIX + c] for i, c in enumerate(word) if c in alphabet]
        if seq:
            seqs.append(seq)
            freqs.append(words[word])

    pair_counts: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for i, seq in enumerate(seqs):
        for pair in zip(seq, seq[1:]):
            pair_counts[pair] += freqs[i]
            where.setdefault(pair, set()).add(i)
    heap = [(-n, pair) for pair, n in pair_counts.items()]  # most frequent first, then the smallest ids
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        count = pair_counts.get(pair, 0)
        if count != -neg:
            if count > 0:
                heapq.heappush(heap, (-count, pair))
            continue
        if count < 1 or count < min_frequency:
            break
        a, b = vocab[pair[0]], vocab[pair[1]]
        token = a + b.removeprefix(PREFIX)
        if token not in ids:
            ids[token] = len(vocab)
            vocab.append(token)
        new = ids[token]
        for i in sorted(where.pop(pair, ())):
            seq = seqs[i]
            before = Counter(zip(seq, seq[1:]))
            merged, k = [], 0
            while k < len(seq):
                if k + 1 < len(seq) and seq[k] == pair[0] and seq[k + 1] == pair[1]:
                    merged.append(new)
                    k += 2
                else:
                    merged.append(seq[k])
                    k += 1
            seqs[i] = merged
            after = Counter(zip(merged, merged[1:]))
            for p in before.keys() | after.keys():
                delta = (after[p] - before[p]) * freqs[i]
                if delta:
                    pair_counts[p] += delta
                    if after[p]:
                        where.setdefault(p, set()).add(i)
                    if delta > 0:
                        heapq.heappush(heap, (-pair_counts[p], p))
        pair_counts.pop(pair, None)
    return vocab
