"""Multilingual corpora: mBERT's exponentially smoothed language sampling (google-research/bert
multilingual.md, "Data Source and Sampling"), for the tokenizer's training sample and for the pretraining stream.

A corpus names the language of each source (``data.corpus = "en=wiki/en/*.txt,zh=wiki/zh.txt"``:
``corpus.language_groups``); ``chunks.ChunkLayout`` cuts it language by language, so the chunk of a document's key
tells its language. With p_i language i's share of the corpus, it is sampled with the share

    q_i = p_i^alpha / sum_j p_j^alpha        (alpha = ``data.language_alpha``; mBERT: 0.7)

which under-samples the large languages and over-samples (repeats) the small ones.

* Tokenizer sample (:func:`smoothed_sample`): p_i over corpus bytes (known before anything is tokenized). Of the
  sample size S (``tokenizer.train_sample_bytes``, or the whole corpus when that is 0 or larger), language i gets
  q_i S bytes: the 1 MiB windows of its files evenly spaced over them, cycled when the language is smaller than
  its share, read sentence by sentence until its bytes are reached. A function of the files' bytes alone.
* Pretraining stream (:func:`smoothed_documents`): p_i over the tokens of the training documents in the token
  cache. The stream's training documents become a multiset of as many tokens as the corpus's, language i taking
  q_i of them: its documents in a permutation keyed on (``data.seed``, i), cycled, whole documents until its
  tokens are reached. The stream then visits that multiset as it visits any corpus (a permutation per pass), so
  it stays the same for any host count. The held-out documents are the last ``ceil(data.eval_documents / L)`` of
  each of the L languages (:func:`split_by_language`), not resampled.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from ptm_jax.errors import DataError

LANGUAGE_STREAM = 0x6C616E67  # "lang": keys the document permutations apart from the stream's own


def smoothed_shares(sizes: list[float] | np.ndarray, alpha: float) -> np.ndarray:
    """q_i = p_i^alpha / sum_j p_j^alpha with p_i = sizes_i / sum(sizes); a language of size 0 gets 0."""
    n = np.asarray(sizes, np.float64)
    if n.sum() <= 0:
        raise DataError("language sampling: every language is empty")
    p = n / n.sum()
    w = np.where(p > 0, p ** alpha, 0.0)
    return w / w.sum()


def smoothed_sample(layout, budget_bytes: int, alpha: float, shares_out: dict | None = None) -> Iterator[str]:
    """The tokenizer's training sentences of a language-tagged corpus (the module docstring's rule); with
    ``shares_out``, fills it with language -> bytes read."""
    from ptm_jax.data.corpus import check_file

    for f in layout.files:
        check_file(f)
    sizes = layout.language_bytes()
    total = sum(sizes)
    sample = total if not budget_bytes or budget_bytes >= total else int(budget_bytes)
    shares = smoothed_shares(sizes, alpha)
    for i, lang in enumerate(layout.languages):
        target = shares[i] * sample
        chunks = layout.language_chunks(i)
        n = len(chunks)
        mean = max(1.0, sizes[i] / n)
        k = max(1, min(n, math.ceil(target / mean)))
        first = [chunks[j * n // k] for j in range(k)]
        order = itertools.chain(first, itertools.cycle(chunks)) if k < n else itertools.cycle(chunks)
        seen = 0
        empty_run = 0
        for c in order:
            if seen >= target:
                break
            before = seen
            for _, doc in layout.documents(c):
                for s in doc:
                    if seen >= target:
                        break
                    yield s
                    seen += len(s.encode("utf-8"))
            empty_run = empty_run + 1 if seen == before else 0
            if empty_run > n:  # a whole pass gave nothing: the language has no text
                raise DataError(f"language {lang!r}: its files hold no sentences; remove it from data.corpus")
        if shares_out is not None:
            shares_out[lang] = seen


def document_languages(cache, layout) -> np.ndarray:
    """int64 [num_docs]: the language index (into ``layout.languages``) of each document of the token cache."""
    chunk_lang = np.array([layout.segment_of_chunk(c) for c in range(layout.num_chunks)], np.int64)
    return chunk_lang[cache.doc_keys() >> 32]


def split_by_language(cache, layout, eval_documents: int) -> tuple[np.ndarray, np.ndarray]:
    """(training documents, held-out documents) of a language-tagged cache: each language holds out its last
    ``ceil(eval_documents / languages)`` documents (never all of them), so every language is evaluated."""
    lang = document_languages(cache, layout)
    per = -(-int(eval_documents) // max(1, len(layout.languages)))
    held = []
    for i in range(len(layout.languages)):
        docs = np.flatnonzero(lang == i)
        held.append(docs[len(docs) - min(per, max(0, len(docs) - 1)):])
    held_docs = np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)
    return np.setdiff1d(np.arange(cache.num_docs), held_docs), held_docs


def smoothed_documents(cache, layout, train_docs: np.ndarray, alpha: float,
                       seed: int) -> tuple[np.ndarray, dict[str, dict]]:
    """(the stream's training documents: a sorted multiset of indices into ``cache``, the per-language report).

    The report holds, per language: training documents and tokens in the corpus, p_i, q_i, and the realised
    token share and document count of the multiset."""
    train_docs = np.asarray(train_docs, np.int64)
    lang = document_languages(cache, layout)[train_docs]
    tokens = cache.doc_num_tokens()[train_docs]
    per_lang = np.array([tokens[lang == i].sum() for i in range(len(layout.languages))], np.float64)
    missing = [layout.languages[i] for i in range(len(per_lang)) if per_lang[i] == 0]
    if missing:
        raise DataError(f"language(s) {', '.join(missing)}: no training tokens after tokenization (too little "
                        "text, or all of it held out by data.eval_documents); add text or drop the language")
    shares = smoothed_shares(per_lang, alpha)
    total = per_lang.sum()
    picked, report = [], {}
    for i, name in enumerate(layout.languages):
        docs = train_docs[lang == i]
        toks = tokens[lang == i]
        target = shares[i] * total
        rng = np.random.default_rng([seed, LANGUAGE_STREAM, i])
        full, rest = divmod(target, per_lang[i])
        chosen = [np.repeat(docs, int(full))] if full else []
        order = rng.permutation(len(docs))
        if rest > 0:
            cum = np.cumsum(toks[order])
            take = int(np.searchsorted(cum, rest)) + 1  # whole documents until the tokens are reached
            chosen.append(docs[order[:take]])
        sel = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
        picked.append(sel)
        report[name] = {"documents": int(len(docs)), "tokens": int(per_lang[i]),
                        "corpus_share": float(per_lang[i] / total), "target_share": float(shares[i]),
                        "stream_documents": int(len(sel))}
    all_tokens = cache.doc_num_tokens()
    got = np.array([all_tokens[s].sum() for s in picked], np.float64)
    for i, name in enumerate(layout.languages):
        report[name]["stream_share"] = float(got[i] / got.sum())
    return np.sort(np.concatenate(picked)), report


def vocab_sample_shares(layout, alpha: float) -> dict[str, dict]:
    """Per language: corpus bytes, p_i and q_i of the tokenizer's training sample (:func:`smoothed_sample`)."""
    sizes = layout.language_bytes()
    q = smoothed_shares(sizes, alpha)
    total = sum(sizes)
    return {lang: {"bytes": int(sizes[i]), "corpus_share": sizes[i] / total, "target_share": float(q[i])}
            for i, lang in enumerate(layout.languages)}
