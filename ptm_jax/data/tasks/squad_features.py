"""SQuAD examples -> fixed-length model features with sliding document windows.

Follows google-research/bert run_squad.py (convert_examples_to_features, _improve_answer_span,
_check_is_max_context): each whitespace word is WordPiece-tokenized on its own (keeping
tok_to_orig_index / orig_to_tok_index); the question is cut to `max_query_length` pieces; the
document is covered by windows of `max_seq_length - len(query) - 3` pieces whose start advances by
min(window length, doc_stride); a piece is "max context" in the window where
min(left, right) + 0.01 * window_length is largest (first window on ties). Layout
`[CLS] query [SEP] doc [SEP]`, segment 0 through the first [SEP], 1 after. Training labels point
at the answer pieces inside the window, or start=end=0 ([CLS]) when the answer is not wholly inside
it or the question is impossible. Questions whose answer could not be located are not featurized
in training mode (see squad.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from ptm_jax.data.tasks.squad import SquadExample
from ptm_jax.errors import ConfigError

UNIQUE_ID_START = 1_000_000_000  # run_squad numbers features from here


class PieceTokenizer(Protocol):
    """What the featurizer needs from a WordPiece tokenizer."""

    cls_id: int
    sep_id: int
    pad_id: int

    def tokenize(self, text: str) -> list[str]: ...

    def token_to_id(self, token: str) -> int: ...


@dataclass
class SquadFeature:
    """One window of one example. `token_to_orig[i]` is the word index of position i (-1 outside
    the document part); `token_is_max_context[i]` marks positions whose best window is this one."""

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig: np.ndarray
    token_is_max_context: np.ndarray
    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False
    cls_index: int = 0          # position of the null answer (BERT: [CLS] at 0; XLNet: <cls> after the query)
    sentencepiece: bool = False  # pieces mark word starts with U+2581 instead of continuations with '##'

    @property
    def token_to_orig_map(self) -> dict[int, int]:
        """run_squad's dict form: position -> word index, document positions only."""
        pos = np.flatnonzero(self.token_to_orig >= 0)
        return dict(zip(pos.tolist(), self.token_to_orig[pos].tolist()))


def improve_answer_span(doc_pieces: Sequence[str], start: int, end: int, tokenizer: Any,
                        answer_text: str) -> tuple[int, int]:
    """Narrowest piece span inside [start, end] whose pieces equal the tokenized answer, else the
    input span (run_squad _improve_answer_span: '(1895-1943).' -> '1895')."""
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_pieces[new_start:new_end + 1]) == target:
                return new_start, new_end
    return start, end


def doc_windows(num_pieces: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each sliding window over `num_pieces` document pieces."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < num_pieces:
        length = min(num_pieces - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def max_context_window(spans: list[tuple[int, int]], num_pieces: int) -> np.ndarray:
    """For each document piece, the index of the window that gives it the most context."""
    if not spans:
        return np.zeros(0, dtype=np.int64)
    starts = np.array([s for s, _ in spans], dtype=np.int64)[:, None]
    lengths = np.array([n for _, n in spans], dtype=np.int64)[:, None]
    pos = np.arange(num_pieces, dtype=np.int64)[None, :]
    ends = starts + lengths - 1
    score = np.minimum(pos - starts, ends - pos) + 0.01 * lengths
    score = np.where((pos >= starts) & (pos <= ends), score, -np.inf)
    return np.argmax(score, axis=0)  # first maximum = run_squad's strict '>' over windows in order


def _pieces(tokenizer: Any, doc_tokens: list[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    pieces: list[str] = []
    tok_to_orig: list[int] = []
    orig_to_tok = np.zeros(len(doc_tokens), dtype=np.int64)
    for i, word in enumerate(doc_tokens):
        orig_to_tok[i] = len(pieces)
        sub = tokenizer.tokenize(word)
        pieces.extend(sub)
        tok_to_orig.extend([i] * len(sub))
    ids = np.array([tokenizer.token_to_id(p) for p in pieces], dtype=np.int32)
    return pieces, np.array(tok_to_orig, dtype=np.int32), orig_to_tok, ids


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer: Any,
                                 max_seq_length: int = 384, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool = False,
                                 unique_id_start: int = UNIQUE_ID_START, layout: str = "question_first"
                                 ) -> list[SquadFeature]:
    """Featurize examples in order. In training mode, examples whose answer was not found in the
    context (`not example.trainable`) are skipped, as run_squad drops them. ``layout``: 'question_first'
    (google-research/bert run_squad.py: ``[CLS] q [SEP] d [SEP]``) or 'document_first' (zihangdai/xlnet run_squad.py: ``d <sep> q <sep> <cls>``)."""
    if layout not in ("question_first", "document_first"):
        raise ConfigError(f"SQuAD feature layout must be 'question_first' or 'document_first', got {layout!r}")
    if max_seq_length <= max_query_length + 3:
        raise ConfigError(f"max_seq_length ({max_seq_length}) must be greater than "
                          f"max_query_length ({max_query_length}) + 3")
    if doc_stride <= 0:
        raise ConfigError(f"doc_stride must be positive, got {doc_stride}")
    features: list[SquadFeature] = []
    unique_id = unique_id_start
    sentencepiece = any(p.startswith("\u2581") for p in tokenizer.tokenize("a b"))
    cache_key: tuple[int, str] | None = None
    pieces: list[str] = []
    tok_to_orig = orig_to_tok = doc_ids = np.zeros(0, dtype=np.int32)
    for example_index, ex in enumerate(examples):
        if is_training and not ex.trainable:
            continue
        key = (id(ex.doc_tokens), ex.context_text)
        if key != cache_key:  # questions on one paragraph share its tokenization
            pieces, tok_to_orig, orig_to_tok, doc_ids = _pieces(tokenizer, ex.doc_tokens)
            cache_key = key
        query = tokenizer.tokenize(ex.question_text)[:max_query_length]
        query_ids = [tokenizer.token_to_id(t) for t in query]

        tok_start = tok_end = -1
        if is_training and not ex.is_impossible:
            tok_start = int(orig_to_tok[ex.start_position])
            if ex.end_position < len(ex.doc_tokens) - 1:
                tok_end = int(orig_to_tok[ex.end_position + 1]) - 1
            else:
                tok_end = len(pieces) - 1
            tok_start, tok_end = improve_answer_span(pieces, tok_start, tok_end, tokenizer,
                                                     ex.orig_answer_text)

        max_tokens_for_doc = max_seq_length - len(query) - 3
        spans = doc_windows(len(pieces), max_tokens_for_doc, doc_stride)
        best_window = max_context_window(spans, len(pieces))
        columns = _document_first_columns if layout == "document_first" else _question_first_columns
        for span_index, (start, length) in enumerate(spans):
            tokens, input_ids, input_mask, segment_ids, doc_offset, cls_index = columns(
                tokenizer, query, query_ids, pieces[start:start + length], doc_ids[start:start + length],
                max_seq_length)
            to_orig = np.full(max_seq_length, -1, dtype=np.int32)
            to_orig[doc_offset:doc_offset + length] = tok_to_orig[start:start + length]
            is_max = np.zeros(max_seq_length, dtype=bool)
            is_max[doc_offset:doc_offset + length] = best_window[start:start + length] == span_index

            start_position = end_position = None
            if is_training:
                start_position = end_position = cls_index
                if not ex.is_impossible and start <= tok_start and tok_end <= start + length - 1:
                    start_position = tok_start - start + doc_offset
                    end_position = tok_end - start + doc_offset
            features.append(SquadFeature(
                unique_id=unique_id, example_index=example_index, doc_span_index=span_index,
                tokens=tokens, token_to_orig=to_orig, token_is_max_context=is_max,
                input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                start_position=start_position, end_position=end_position,
                is_impossible=ex.is_impossible, cls_index=cls_index, sentencepiece=sentencepiece))
            unique_id += 1
    return features


def _question_first_columns(tokenizer, query, query_ids, doc_pieces, doc_ids, max_seq_length):
    """`[CLS] query [SEP] doc [SEP]` -> (tokens, ids, mask, segments, doc offset, null position)."""
    doc_offset = len(query) + 2
    n = doc_offset + len(doc_ids) + 1
    input_ids = np.full(max_seq_length, tokenizer.pad_id, dtype=np.int32)
    input_ids[0] = tokenizer.cls_id
    input_ids[1:doc_offset - 1] = query_ids
    input_ids[doc_offset - 1] = tokenizer.sep_id
    input_ids[doc_offset:n - 1] = doc_ids
    input_ids[n - 1] = tokenizer.sep_id
    input_mask = np.zeros(max_seq_length, dtype=np.int32)
    input_mask[:n] = 1
    segment_ids = np.zeros(max_seq_length, dtype=np.int32)
    segment_ids[doc_offset:n] = 1
    return ["[CLS]", *query, "[SEP]", *doc_pieces, "[SEP]"], input_ids, input_mask, segment_ids, doc_offset, 0


def _document_first_columns(tokenizer, query, query_ids, doc_pieces, doc_ids, max_seq_length):
    """`doc <sep> query <sep> <cls>` (xlnet run_squad.py) -> as ``_question_first_columns``; the null position is <cls>."""
    d, q = len(doc_ids), len(query_ids)
    cls_index = d + q + 2
    input_ids = np.full(max_seq_length, tokenizer.pad_id, dtype=np.int32)
    input_ids[:d] = doc_ids
    input_ids[d] = tokenizer.sep_id
    input_ids[d + 1:d + 1 + q] = query_ids
    input_ids[d + 1 + q] = tokenizer.sep_id
    input_ids[cls_index] = tokenizer.cls_id
    input_mask = np.zeros(max_seq_length, dtype=np.int32)
    input_mask[:cls_index + 1] = 1
    segment_ids = np.zeros(max_seq_length, dtype=np.int32)
    segment_ids[d + 1:cls_index] = 1
    segment_ids[cls_index] = 2
    tokens = [*doc_pieces, "<sep>", *query, "<sep>", "<cls>"]
    return tokens, input_ids, input_mask, segment_ids, 0, cls_index


def features_to_arrays(features: Sequence[SquadFeature]) -> dict[str, np.ndarray]:
    """Stack features into model inputs: unique_ids, input_ids, input_mask, segment_ids [N, L] and,
    when labelled, start_positions, end_positions, is_impossible [N]."""
    if not features:
        raise ConfigError("no SQuAD features to stack (empty example list?)")
    out = {
        "unique_ids": np.array([f.unique_id for f in features], dtype=np.int64),
        "input_ids": np.stack([f.input_ids for f in features]),
        "input_mask": np.stack([f.input_mask for f in features]),
        "segment_ids": np.stack([f.segment_ids for f in features]),
    }
    if features[0].start_position is not None:
        out["start_positions"] = np.array([f.start_position for f in features], dtype=np.int32)
        out["end_positions"] = np.array([f.end_position for f in features], dtype=np.int32)
        out["is_impossible"] = np.array([f.is_impossible for f in features], dtype=np.int32)
    return out
