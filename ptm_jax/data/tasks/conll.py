"""CoNLL-2003 NER: file and TFDS readers, IOB1 -> IOB2 conversion, sub-word label alignment.

File format (Tjong Kim Sang & De Meulder 2003): one token per line as `word POS chunk NER`
separated by single spaces, a blank line between sentences, `-DOCSTART-` lines between documents.
The original files use IOB1 (I- opens a chunk; B- only separates two adjacent chunks of one type);
IOB2 marks every chunk start with B-. Labels for a tagger are put on the first sub-word of each
word and the ignore index on the others (BERT paper sec. 5.3, "first sub-token" NER setup).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ptm_jax.data.tasks.glue import utf8_error
from ptm_jax.errors import ConfigError, DataError

IGNORE_INDEX = -100
_TAG = re.compile(r"^(O|[BI]-\S+)$")
# TFDS conll2003 'ner' ClassLabel names, in TFDS order (IOB2).
TFDS_NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


@dataclass
class ConllSentence:
    """One sentence; `tags` are in the scheme the reader was asked for (IOB2 by default)."""

    words: list[str]
    tags: list[str]
    pos: list[str] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)
    line: int = 0  # 1-based line of the first token (0 for TFDS records)


@dataclass
class ConllReadReport:
    path: str
    scheme: str = ""  # scheme of the file: 'iob1' or 'iob2'
    sentences: int = 0
    tokens: int = 0
    documents: int = 0
    converted_tags: int = 0  # tags changed by IOB1 -> IOB2
    labels: list[str] = field(default_factory=list)


def _opens_with_i(prev: str, tag: str) -> bool:
    """True when an I- tag opens a chunk (previous tag O, or of another type)."""
    return tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:])


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """Rewrite every I- that opens a chunk as B-; other tags are unchanged."""
    out, prev = [], "O"
    for tag in tags:
        out.append("B-" + tag[2:] if _opens_with_i(prev, tag) else tag)
        prev = tag
    return out


def detect_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """'iob1' if some I- tag opens a chunk, else 'iob2'."""
    for tags in tag_sequences:
        prev = "O"
        for tag in tags:
            if _opens_with_i(prev, tag):
                return "iob1"
            prev = tag
    return "iob2"


def label_list(sentences: Iterable[ConllSentence]) -> list[str]:
    """Labels seen in the data: 'O' first, then by entity type with B- before I-."""
    seen = {t for s in sentences for t in s.tags}
    rest = sorted((t for t in seen if t != "O"), key=lambda t: (t[2:], t[:1]))
    return ["O", *rest]


def read_conll(path: str | os.PathLike, scheme: str = "auto",
               to_iob2: bool = True) -> tuple[list[ConllSentence], ConllReadReport]:
    """Read a CoNLL-2003 file. `scheme` names the file's scheme ('iob1', 'iob2' or 'auto');
    with `to_iob2` IOB1 tags are converted. A file declared 'iob2' whose I- tag opens a chunk is
    an error (it is IOB1: pass scheme='iob1' or 'auto'). Invalid UTF-8 is a DataError naming its line."""
    if scheme not in ("iob1", "iob2", "auto"):
        raise ConfigError(f"scheme must be 'iob1', 'iob2' or 'auto', got {scheme!r}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: CoNLL file not found; pass eng.train/eng.testa/eng.testb or "
                        f"train/valid/test.txt of CoNLL-2003")
    report = ConllReadReport(path=path)
    sentences: list[ConllSentence] = []
    rows: list[list[str]] = []
    first_line = 0
    ncols = 0

    def flush() -> None:
        if rows:
            sentences.append(ConllSentence(
                words=[r[0] for r in rows], tags=[r[-1] for r in rows],
                pos=[r[1] for r in rows] if ncols >= 3 else [],
                chunks=[r[2] for r in rows] if ncols >= 4 else [], line=first_line))
            rows.clear()

    with open(path, encoding="utf-8") as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                parts = raw.split()
                if not parts:
                    flush()
                    continue
                if parts[0] == "-DOCSTART-":
                    flush()
                    report.documents += 1
                    continue
                if ncols == 0:
                    ncols = len(parts)
                    if ncols < 2:
                        raise DataError(f"{path}:{lineno}: expected 'word ... NER-tag' columns, got "
                                        f"{raw.strip()!r}")
                if len(parts) != ncols:
                    raise DataError(f"{path}:{lineno}: {len(parts)} columns where the file has {ncols}; "
                                    f"fix the line (tokens must not contain spaces)")
                if not _TAG.match(parts[-1]):
                    raise DataError(f"{path}:{lineno}: NER tag {parts[-1]!r} is not O, B-TYPE or I-TYPE; fix the "
                                    "line (the tag is the last column)")
                if not rows:
                    first_line = lineno
                rows.append(parts)
        except UnicodeDecodeError:
            raise utf8_error(path, "CoNLL") from None
    flush()

    found = detect_scheme(s.tags for s in sentences)
    if scheme == "iob2" and found == "iob1":
        for s in sentences:
            prev = "O"
            for k, tag in enumerate(s.tags):
                if _opens_with_i(prev, tag):
                    raise DataError(f"{path}:{s.line + k}: {tag} opens an entity, which IOB2 does not "
                                    f"allow; the file is IOB1: read it with scheme='iob1' or 'auto'")
                prev = tag
    report.scheme = "iob1" if scheme == "iob1" else found
    if to_iob2 and report.scheme == "iob1":
        for s in sentences:
            new = iob1_to_iob2(s.tags)
            report.converted_tags += sum(a != b for a, b in zip(new, s.tags))
            s.tags = new
    report.sentences = len(sentences)
    report.tokens = sum(len(s.words) for s in sentences)
    report.labels = label_list(sentences)
    return sentences, report


def _s(value: Any) -> str:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def examples_from_conll_records(records: Iterable[Mapping[str, Any]]) -> list[ConllSentence]:
    """Convert TFDS `conll2003` records (tokens, ner as ClassLabel ids or strings) to sentences."""
    out = []
    for n, rec in enumerate(records):
        try:
            words = [_s(w) for w in rec["tokens"]]
            ner = list(rec["ner"])
        except KeyError as e:
            raise DataError(f"TFDS conll2003 record {n}: missing feature {e}") from None
        tags = []
        for t in ner:
            t = t.item() if hasattr(t, "item") else t
            if isinstance(t, (int, np.integer)):
                if not 0 <= int(t) < len(TFDS_NER_TAGS):
                    raise DataError(f"TFDS conll2003 record {n}: ner id {t} out of range")
                tags.append(TFDS_NER_TAGS[int(t)])
            else:
                tags.append(_s(t))
        if len(tags) != len(words):
            raise DataError(f"TFDS conll2003 record {n}: {len(words)} tokens but {len(tags)} tags")
        out.append(ConllSentence(words=words, tags=tags))
    return out


def conll_from_tfds(split: str = "train", data_dir: str | None = None) -> list[ConllSentence]:
    """Load TFDS `conll2003` (splits train/dev/test; needs the prepared dataset or network)."""
    import tensorflow_datasets as tfds  # lazy: heavy import, offline it only reads prepared data

    ds = tfds.load("conll2003", split=split, data_dir=data_dir)
    return examples_from_conll_records(tfds.as_numpy(ds))


@dataclass
class AlignedExample:
    """Model inputs for one sentence: `[CLS] pieces [SEP]` padded to max_seq_length.
    `first_piece[w]` is the position of word w's first piece, -1 when truncated away."""

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    label_ids: np.ndarray
    first_piece: np.ndarray
    truncated_words: int


def align_labels(words: Sequence[str], word_labels: Sequence[int], tokenizer: Any,
                 max_seq_length: int, ignore_index: int = IGNORE_INDEX) -> AlignedExample:
    """Tokenize each word and put its label on its first piece, `ignore_index` elsewhere.

    `tokenizer` needs tokenize(text), token_to_id(token), cls_id, sep_id, pad_id. A word that
    tokenizes to nothing becomes one [UNK] piece so that it keeps a position. Pieces beyond
    max_seq_length - 2 are cut; the words they belonged to are counted in `truncated_words`.
    """
    if len(words) != len(word_labels):
        raise DataError(f"{len(words)} words but {len(word_labels)} labels")
    if max_seq_length < 3:
        raise ConfigError(f"max_seq_length must be at least 3, got {max_seq_length}")
    budget = max_seq_length - 2
    ids: list[int] = []
    labels: list[int] = []
    first = np.full(len(words), -1, dtype=np.int32)
    for w, (word, label) in enumerate(zip(words, word_labels)):
        pieces = tokenizer.tokenize(word) or ["[UNK]"]
        if len(ids) + len(pieces) > budget:
            break
        first[w] = len(ids) + 1
        ids.extend(tokenizer.token_to_id(p) for p in pieces)
        labels.append(int(label))
        labels.extend([ignore_index] * (len(pieces) - 1))
    n = len(ids) + 2
    input_ids = np.full(max_seq_length, tokenizer.pad_id, dtype=np.int32)
    input_ids[0], input_ids[1:n - 1], input_ids[n - 1] = tokenizer.cls_id, ids, tokenizer.sep_id
    label_ids = np.full(max_seq_length, ignore_index, dtype=np.int32)
    label_ids[1:n - 1] = labels
    mask = np.zeros(max_seq_length, dtype=np.int32)
    mask[:n] = 1
    return AlignedExample(input_ids=input_ids, input_mask=mask,
                          segment_ids=np.zeros(max_seq_length, dtype=np.int32), label_ids=label_ids,
                          first_piece=first, truncated_words=int(np.sum(first < 0)))


def word_predictions(piece_predictions: Sequence[int] | np.ndarray, first_piece: np.ndarray,
                     id_to_label: Sequence[str], fill: str = "O") -> list[str]:
    """Inverse of align_labels: each word takes the prediction at its first piece; words cut by
    truncation get `fill`."""
    pred = np.asarray(piece_predictions)
    if pred.ndim == 2:  # [L, num_labels] logits
        pred = pred.argmax(axis=-1)
    kept = first_piece >= 0
    out = np.full(len(first_piece), -1, dtype=np.int64)
    out[kept] = pred[first_piece[kept]]
    return [id_to_label[i] if i >= 0 else fill for i in out.tolist()]
