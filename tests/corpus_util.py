"""Small real-text corpora for loop/sharding tests: whitespace words of a real file -> ids (no tokenizer)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ptm_jax.data.pretraining.source import ArraySource, SpecialIds

PAD, UNK, CLS, SEP, MASK = range(5)


def word_source(path: Path, vocab_size: int, max_docs: int = 60) -> tuple[ArraySource, SpecialIds]:
    """Documents = blank-line separated blocks, sentences = lines; the vocab_size-5 commonest words get ids."""
    blocks, cur = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            cur.append(line.lower().split())
        elif cur:
            blocks.append(cur)
            cur = []
            if len(blocks) >= max_docs:
                break
    words, counts = np.unique([w for b in blocks for s in b for w in s], return_counts=True)
    top = words[np.argsort(-counts, kind="stable")[: vocab_size - 5]]
    ids = {w: i + 5 for i, w in enumerate(top)}
    docs = [[np.array([ids.get(w, UNK) for w in s], np.int32) for s in b] for b in blocks]
    return ArraySource(docs), SpecialIds(pad=PAD, cls=CLS, sep=SEP, mask=MASK, vocab_size=vocab_size,
                                         continuation=None)
