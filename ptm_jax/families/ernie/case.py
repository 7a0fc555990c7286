"""Capitalisation labels for ERNIE 2.0's capitalisation-prediction task (Sun et al. 2020 Sec. 4.2.1: "predict
whether the word is capitalized or not"; the input stays lower-cased, so the case must be recovered from context).

A word is what BERT's pre-tokenizer makes of the original sentence (``data/tokenizers.py:bert_pre_tokenizer``:
whitespace split, punctuation and CJK ideographs on their own). Its label, given to each of its pieces:
``CAPITALISED`` (1) when ``word.istitle() or word.isupper()`` ("Romeo", "ROMEO", "I", "O'er"), else
``LOWER`` (0) ("romeo", "mcBeth", ",", "42"). The labels are built once beside the token cache (``Pretraining.artifacts
["case"]``): the corpus is read again chunk by chunk in the cache's order, each sentence's words are tokenized one
by one, and the pieces must equal the cache's tokens of that sentence; a sentence where they do not gets
``UNKNOWN`` (2, never trained on) and is counted in ``case.json``.
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError

LOWER, CAPITALISED, UNKNOWN = 0, 1, 2
FORMAT_VERSION = 1


def capitalised(word: str) -> bool:
    return word.istitle() or word.isupper()


def sentence_labels(sentence: str, tokenizer: Any, pre_tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, labels) of one sentence, tokenized word by word."""
    words = [w for w, _ in pre_tokenizer.pre_tokenize_str(sentence)]
    if not words:
        return np.zeros(0, np.int32), np.zeros(0, np.uint8)
    flat, lengths = tokenizer.encode_batch_flat(words)
    labels = np.repeat(np.array([CAPITALISED if capitalised(w) else LOWER for w in words], np.uint8), lengths)
    return flat.astype(np.int32), labels


def annotate(cfg: Any, cache: Any, tokenizer: Any) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(labels uint8 over the cache's tokens in document order, document token offsets, counts)."""
    from ptm_jax.data.chunks import ChunkLayout
    from ptm_jax.data.tokenizers import bert_pre_tokenizer

    pre = bert_pre_tokenizer()
    doc_len = np.array([int(cache.doc_sentence_lengths(d).sum()) for d in range(cache.num_docs)], np.int64)
    offsets = np.concatenate([[0], np.cumsum(doc_len)])
    labels = np.full(int(offsets[-1]), UNKNOWN, np.uint8)
    counts = {"sentences": 0, "unaligned_sentences": 0, "capitalised_tokens": 0}
    layout = ChunkLayout(cfg.data)
    d = 0
    for c in range(layout.num_chunks):
        for _, doc in layout.documents(c):
            sents = [sentence_labels(s, tokenizer, pre) for s in doc]
            sents = [s for s in sents if len(s[0])]
            if not sents:
                continue
            if d >= cache.num_docs:
                raise ConfigError("the corpus read again has more documents than the token cache; the cache is "
                                  "stale: delete data.cache_dir")
            lengths = cache.doc_sentence_lengths(d)
            base = int(offsets[d])
            for s, (ids, lab) in enumerate(sents):
                counts["sentences"] += 1
                cached = cache.doc_tokens(d, s, s + 1) if s < len(lengths) else None
                if cached is not None and len(cached) == len(ids) and np.array_equal(cached, ids):
                    labels[base:base + len(ids)] = lab
                    counts["capitalised_tokens"] += int(lab.sum())
                else:
                    counts["unaligned_sentences"] += 1
                base += int(lengths[s]) if s < len(lengths) else 0
            d += 1
    return labels, offsets, counts


def build_case(cfg: Any, corpus: Any, directory: Any):
    """``Pretraining.artifacts["case"]``: the labels of the whole token cache as a ``units.UnitSource`` (same
    documents and sentences as the cache), computed once by process 0 into ``<cache_dir>/artifacts/case``."""
    import jax

    from ptm_jax.families.ernie.units import UnitSource
    from ptm_jax.parallel.distributed import barrier

    tok, cache = corpus.tokenizer, corpus.cache
    if tok.kind != "wordpiece":
        raise ConfigError(f"tokenizer.kind={tok.kind!r}: ERNIE 2.0's capitalisation labels read words the way "
                          "BERT's WordPiece pre-tokenizer splits them; set tokenizer.kind='wordpiece'")
    key = hashlib.sha256(json.dumps({"version": FORMAT_VERSION, "cache": getattr(cache, "meta", {}).get(
        "fingerprint"), "docs": cache.num_docs, "tokenizer": tok.fingerprint()}, sort_keys=True).encode()
        ).hexdigest()[:32]
    meta_path, path = directory / "case.json", directory / "case.npz"
    if jax.process_index() == 0 and not (fs.exists(meta_path)
                                         and json.loads(fs.read_text(meta_path)).get("fingerprint") == key):
        labels, offsets, counts = annotate(cfg, cache, tok)
        buf = io.BytesIO()
        np.savez(buf, labels=labels, offsets=offsets)
        fs.makedirs(directory)
        fs.write_bytes_atomic(path, buf.getvalue())
        fs.write_text_atomic(meta_path, json.dumps({"fingerprint": key, **counts}))
    barrier("ernie_case")
    with np.load(io.BytesIO(fs.read_bytes(path))) as z:
        return UnitSource(z["labels"], z["offsets"], cache)
