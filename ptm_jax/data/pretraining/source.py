"""Documents of token ids as the pretraining example builders see them.

Layout follows google-research/bert create_pretraining_data.py: a corpus is a list of documents, a document a
list of sentences, a sentence a non-empty list of token ids; empty sentences and empty documents do not exist
(the reference drops them while reading text). Builders only ever ask for sentence *lengths* (to plan
instances) and for the flat tokens of a run of consecutive sentences (to build one segment), so a source can
be an in-memory array (:class:`ArraySource`), a memory-mapped cache (``ptm_jax.data.cache.TokenCache``) or a
view of either (:class:`SubsetSource`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ptm_jax.errors import ConfigError, DataError


@runtime_checkable
class DocumentSource(Protocol):
    """Random access to documents of token ids, one sentence boundary at a time."""

    num_docs: int

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        """int32 token count of every sentence of document ``d`` (all >= 1)."""
        ...

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        """int32 tokens of sentences ``[first_sentence, last_sentence)`` of document ``d``, concatenated."""
        ...


@dataclass(frozen=True, eq=False)
class SpecialIds:
    """Special-token ids an example builder writes or avoids (BERT: [PAD]=0, [CLS], [SEP], [MASK]).

    Only the specials the family declares (``Pretraining.specials``) are set; the others stay None
    (``train/stages.py:prepare_corpus``). ``eos`` ends a document (a word vocabulary's ``<eos>``, GPT-2's
    ``<|endoftext|>``). ``continuation[v]`` is True when token ``v`` continues the previous word (a WordPiece
    ``##`` piece, or a SentencePiece piece without the word-start marker); it is needed only for whole-word
    masking.
    """

    pad: int | None = None
    cls: int | None = None
    sep: int | None = None
    mask: int | None = None
    vocab_size: int = 0
    continuation: np.ndarray | None = None
    eos: int | None = None

    def __post_init__(self) -> None:
        if self.vocab_size <= 0:
            raise DataError(f"SpecialIds.vocab_size={self.vocab_size} must be positive")
        for name in ("pad", "cls", "sep", "mask", "eos"):
            v = getattr(self, name)
            if v is not None and not 0 <= int(v) < self.vocab_size:
                raise DataError(f"special id {name}={v} is outside the vocabulary [0, {self.vocab_size}); "
                                "check the tokenizer's vocabulary file")
        marks = {n: getattr(self, n) for n in ("cls", "sep", "mask") if getattr(self, n) is not None}
        if len(set(marks.values())) != len(marks):
            raise DataError("special ids must differ, got " + " ".join(f"{n}={v}" for n, v in marks.items()))
        if self.continuation is not None:
            cont = np.asarray(self.continuation, dtype=bool)
            if cont.shape != (self.vocab_size,):
                raise DataError(f"continuation flags have shape {cont.shape}, expected ({self.vocab_size},): "
                                "one flag per vocabulary entry")
            object.__setattr__(self, "continuation", cont)


class ArraySource:
    """In-memory :class:`DocumentSource` from ``docs[d][s] = token ids of sentence s of document d``.

    Tokens are stored once, flat, with sentence offsets, so ``doc_tokens`` is a slice (no copy).
    """

    def __init__(self, docs: Sequence[Sequence[np.ndarray | Sequence[int]]]):
        sent_lengths: list[int] = []
        doc_first_sentence = [0]
        pieces: list[np.ndarray] = []
        for d, doc in enumerate(docs):
            if len(doc) == 0:
                raise DataError(f"document {d} has no sentences; drop empty documents before building "
                                "an ArraySource (google-research/bert drops them while reading)")
            for s, sent in enumerate(doc):
                arr = np.asarray(sent)
                if arr.ndim != 1 or arr.size == 0:
                    raise DataError(f"document {d}, sentence {s}: expected a non-empty 1-D list of token ids, "
                                    f"got shape {arr.shape}; drop empty sentences before building the source")
                if not np.issubdtype(arr.dtype, np.integer):
                    raise DataError(f"document {d}, sentence {s}: token ids must be integers, got {arr.dtype}")
                pieces.append(arr)
                sent_lengths.append(arr.size)
            doc_first_sentence.append(len(sent_lengths))
        self.num_docs = len(doc_first_sentence) - 1
        self._lengths = np.asarray(sent_lengths, dtype=np.int32)
        self._sent_offsets = np.zeros(len(sent_lengths) + 1, dtype=np.int64)
        np.cumsum(self._lengths, out=self._sent_offsets[1:])
        self._doc_first = np.asarray(doc_first_sentence, dtype=np.int64)
        flat = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        bad = np.flatnonzero((flat < 0) | (flat > np.iinfo(np.int32).max))
        if bad.size:
            s = int(np.searchsorted(self._sent_offsets, bad[0], side="right")) - 1
            d = int(np.searchsorted(self._doc_first, s, side="right")) - 1
            raise DataError(f"document {d}, sentence {s - self._doc_first[d]}: token id {flat[bad[0]]} is "
                            "outside [0, 2^31)")
        self._tokens = flat.astype(np.int32, copy=False)

    @property
    def num_tokens(self) -> int:
        return int(self._tokens.size)

    @property
    def max_token_id(self) -> int:
        return int(self._tokens.max()) if self._tokens.size else -1

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        return self._lengths[self._doc_first[d]:self._doc_first[d + 1]]

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        base = self._doc_first[d]
        end = self._doc_first[d + 1] if last_sentence is None else base + last_sentence
        return self._tokens[self._sent_offsets[base + first_sentence]:self._sent_offsets[end]]


class SubsetSource:
    """The documents ``doc_indices`` of ``source``, renumbered 0..n-1 (e.g. a train/eval split by document)."""

    def __init__(self, source: DocumentSource, doc_indices: Sequence[int] | np.ndarray):
        idx = np.asarray(doc_indices, dtype=np.int64)
        if idx.ndim != 1:
            raise DataError(f"SubsetSource: doc_indices must be 1-D, got shape {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= source.num_docs):
            raise DataError(f"SubsetSource: document indices must be in [0, {source.num_docs}), got "
                            f"[{idx.min()}, {idx.max()}]")
        self.source = source
        self.doc_indices = idx
        self.num_docs = int(idx.size)

    @property
    def max_token_id(self) -> int:
        """The parent's largest id (an upper bound for the subset); AttributeError if the parent has none."""
        return self.source.max_token_id  # type: ignore[attr-defined]

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        return self.source.doc_sentence_lengths(int(self.doc_indices[d]))

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        return self.source.doc_tokens(int(self.doc_indices[d]), first_sentence, last_sentence)


def split_train_eval(source: DocumentSource, eval_documents: int) -> tuple[SubsetSource, SubsetSource]:
    """Holds out the last ``eval_documents`` documents (``DataConfig.eval_documents``) for evaluation."""
    n = source.num_docs
    if not 0 <= eval_documents < n:
        raise DataError(f"data.eval_documents={eval_documents} must be in [0, {n}) for a corpus of {n} "
                        "documents; lower it or add documents")
    cut = n - eval_documents
    return SubsetSource(source, np.arange(cut)), SubsetSource(source, np.arange(cut, n))


def check_share(start_index: int, global_batch: int, process_index: int, process_count: int) -> None:
    """The stream position every example builder takes: this process's share of global batches that start
    at a multiple of the global batch (the loop's data cursor is step * global_batch)."""
    if process_count < 1 or not 0 <= process_index < process_count:
        raise ConfigError(f"process_index={process_index} must be in [0, process_count={process_count})")
    if global_batch < 1 or global_batch % process_count:
        raise ConfigError(f"global batch {global_batch} must be a positive multiple of the process count "
                          f"{process_count}")
    if start_index < 0 or start_index % global_batch:
        raise ConfigError(f"start_index={start_index} must be a non-negative multiple of the global batch "
                          f"{global_batch} (the data cursor is step * global_batch)")


def share_rows(start_index: int, global_batch: int, process_index: int, process_count: int,
               rows: np.ndarray | None = None) -> np.ndarray:
    """The rows of every global batch that a stream yields, checked: ``rows`` (ascending, distinct, in
    [0, global_batch): a host whose devices hold several blocks of the batch, as on TPU meshes) or, without
    it, share ``process_index`` of ``process_count`` equal blocks, rows [p*B/P, (p+1)*B/P)."""
    if rows is None:
        check_share(start_index, global_batch, process_index, process_count)
        per = global_batch // process_count
        return np.arange(process_index * per, (process_index + 1) * per, dtype=np.int64)
    check_share(start_index, global_batch, 0, 1)
    rows = np.asarray(rows, np.int64)
    if rows.ndim != 1 or rows.size == 0 or rows[0] < 0 or rows[-1] >= global_batch or np.any(np.diff(rows) <= 0):
        raise ConfigError(f"rows must be ascending distinct row indices of a global batch of {global_batch}, "
                          f"got {rows.size} rows from {rows[:1].tolist()} to {rows[-1:].tolist()}")
    return rows


def row_runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """``(first, count)`` of each run of consecutive rows (one run for a host-ordered share)."""
    rows = np.asarray(rows, np.int64)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks]).astype(np.int64)
    ends = np.concatenate([breaks, [rows.size]]).astype(np.int64)
    return [(int(rows[s]), int(e - s)) for s, e in zip(starts, ends)]
