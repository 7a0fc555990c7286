"""SQuAD v1.1 / v2.0 readers: the official JSON files and TFDS `squad/*` records.

Follows google-research/bert run_squad.py (read_squad_examples): the context is split into words
on the characters space, tab, CR, LF and U+202F; `char_to_word_offset[c]` is the index of the word
that character c belongs to (whitespace maps to the word before it, -1 before the first word). The
first gold answer gives the training span in words; when the words it covers, joined by single
spaces, do not contain the answer text (whitespace-collapsed), run_squad logs "Could not find
answer" and drops the question from training. Here such a question is kept for evaluation, marked
`start_position=None`, counted and named in the report, and skipped by the training featurizer.
v2.0 `plausible_answers` are ignored.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ptm_jax.errors import DataError

_WORD = re.compile(r"[^ \t\r\n\u202f]+")


@dataclass
class SquadExample:
    """One question on one paragraph. Positions are word indices of the first gold answer:
    -1/-1 for an impossible (v2) question, None/None when the answer cannot be recovered."""

    qas_id: str
    question_text: str
    context_text: str
    doc_tokens: list[str]
    char_to_word_offset: np.ndarray
    answers: list[tuple[str, int]]
    is_impossible: bool = False
    start_position: int | None = None
    end_position: int | None = None
    title: str = ""

    @property
    def orig_answer_text(self) -> str:
        """Text of the first gold answer ('' for impossible questions)."""
        return "" if self.is_impossible or not self.answers else self.answers[0][0]

    @property
    def trainable(self) -> bool:
        """Usable for training: impossible, or its first answer maps onto the words."""
        return self.is_impossible or self.start_position is not None


@dataclass
class SquadReadReport:
    """Counts of a SQuAD read; `unmatched` names questions whose answer run_squad could not find."""

    path: str
    version: str = ""
    articles: int = 0
    paragraphs: int = 0
    questions: int = 0
    answers: int = 0
    impossible: int = 0
    unmatched: list[str] = field(default_factory=list)

    @property
    def trainable(self) -> int:
        return self.questions - len(self.unmatched)


def split_context(context: str) -> tuple[list[str], np.ndarray]:
    """Whitespace words of `context` and the char -> word index map (run_squad's rule, vectorised)."""
    matches = list(_WORD.finditer(context))
    words = [m.group(0) for m in matches]
    starts = np.fromiter((m.start() for m in matches), dtype=np.int64, count=len(matches))
    c2w = np.searchsorted(starts, np.arange(len(context)), side="right") - 1
    return words, c2w.astype(np.int32)


def locate_answer(doc_tokens: list[str], char_to_word_offset: np.ndarray, text: str,
                  start_char: int) -> tuple[int, int] | None:
    """Word span (start, end) of an answer, or None when run_squad would not find it."""
    n = len(text)
    if n == 0 or start_char < 0 or start_char + n > len(char_to_word_offset):
        return None
    start = int(char_to_word_offset[start_char])
    end = int(char_to_word_offset[start_char + n - 1])
    if start < 0 or end < start:
        return None
    actual = " ".join(doc_tokens[start:end + 1])
    cleaned = " ".join(text.split())
    if actual.find(cleaned) == -1:
        return None
    return start, end


def _make_example(qas_id: str, question: str, context: str, words: list[str], c2w: np.ndarray,
                  answers: list[tuple[str, int]], is_impossible: bool, title: str) -> SquadExample:
    ex = SquadExample(qas_id=qas_id, question_text=question, context_text=context, doc_tokens=words,
                      char_to_word_offset=c2w, answers=answers, is_impossible=is_impossible,
                      title=title)
    if is_impossible:
        ex.start_position, ex.end_position = -1, -1
    elif answers:
        span = locate_answer(words, c2w, answers[0][0], answers[0][1])
        if span is not None:
            ex.start_position, ex.end_position = span
    return ex


def _need(obj: Any, key: str, kind: type, where: str, path: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{path}: {where}: missing key {key!r}; is this an official SQuAD v1.1/v2.0 "
                        f"JSON file?")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DataError(f"{path}: {where}.{key}: expected {kind.__name__}, got {type(value).__name__}; is this "
                        "an official SQuAD v1.1/v2.0 JSON file? Fix or re-download it")
    return value


def _load_json(path: str) -> Any:
    """The parsed JSON of ``path`` (UTF-8, a BOM tolerated); every failure is a DataError with the line."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at file offset {e.start}); "
                        "SQuAD files are UTF-8 JSON: re-download the file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg}); re-download the file") from None
    except ValueError as e:  # e.g. an integer with more than sys.get_int_max_str_digits() digits
        raise DataError(f"{path}: unreadable JSON ({e}); re-download the file") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to be a SQuAD file; re-download the file") from None


def read_squad(path: str | os.PathLike) -> tuple[list[SquadExample], SquadReadReport]:
    """Read an official SQuAD JSON file (v1.1 or v2.0) into examples, in file order."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: SQuAD file not found; download train/dev-v1.1.json or v2.0 from "
                        f"the SQuAD site or use squad_from_tfds")
    root = _load_json(path)
    report = SquadReadReport(path=path, version=str(root.get("version", "")) if isinstance(root, dict) else "")
    data = _need(root, "data", list, "top level", path)
    examples: list[SquadExample] = []
    seen: set[str] = set()
    for a, article in enumerate(data):
        where_a = f"data[{a}]"
        paragraphs = _need(article, "paragraphs", list, where_a, path)
        title = _need(article, "title", str, where_a, path) if "title" in article else ""
        report.articles += 1
        for p, para in enumerate(paragraphs):
            where_p = f"{where_a}.paragraphs[{p}]"
            context = _need(para, "context", str, where_p, path)
            qas = _need(para, "qas", list, where_p, path)
            words, c2w = split_context(context)
            report.paragraphs += 1
            for q, qa in enumerate(qas):
                where_q = f"{where_p}.qas[{q}]"
                qas_id = _need(qa, "id", str, where_q, path)
                where_q += f" (id {qas_id})"
                if qas_id in seen:
                    raise DataError(f"{path}: {where_q}: duplicate question id; ids must be unique")
                seen.add(qas_id)
                question = _need(qa, "question", str, where_q, path)
                is_impossible = _need(qa, "is_impossible", bool, where_q, path) if "is_impossible" in qa else False
                raw_answers = _need(qa, "answers", list, where_q, path)
                answers = []
                for k, ans in enumerate(raw_answers):
                    text = _need(ans, "text", str, f"{where_q}.answers[{k}]", path)
                    start = _need(ans, "answer_start", int, f"{where_q}.answers[{k}]", path)
                    answers.append((text, start))
                if not is_impossible and not answers:
                    raise DataError(f"{path}: {where_q}: no answers and not is_impossible; "
                                    f"v2.0 files must mark unanswerable questions")
                ex = _make_example(qas_id, question, context, words, c2w, answers, is_impossible, title)
                report.questions += 1
                report.answers += len(answers)
                report.impossible += int(is_impossible)
                if not ex.trainable:
                    report.unmatched.append(qas_id)
                examples.append(ex)
    return examples, report


def _s(value: Any) -> str:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def examples_from_squad_records(records: Iterable[Mapping[str, Any]],
                                source: str = "records") -> tuple[list[SquadExample], SquadReadReport]:
    """Convert TFDS `squad/v1.1|v2.0` records (id, title, context, question, answers{text,
    answer_start}, is_impossible) into examples; consecutive records share the parsed context."""
    report = SquadReadReport(path=source)
    examples: list[SquadExample] = []
    last_context, words, c2w = None, [], np.zeros(0, np.int32)
    for n, rec in enumerate(records):
        try:
            qas_id, question, context = _s(rec["id"]), _s(rec["question"]), _s(rec["context"])
            texts = [_s(t) for t in rec["answers"]["text"]]
            starts = [int(s) for s in rec["answers"]["answer_start"]]
        except KeyError as e:
            raise DataError(f"{source}: record {n}: missing feature {e}; expected a TFDS squad record") from None
        if len(texts) != len(starts):
            raise DataError(f"{source}: record {n} (id {qas_id}): {len(texts)} answer texts but "
                            f"{len(starts)} answer_start values")
        if context != last_context:
            words, c2w = split_context(context)
            last_context = context
            report.paragraphs += 1
        is_impossible = bool(_s(rec.get("is_impossible", False)) in ("True", "1"))
        ex = _make_example(qas_id, question, context, words, c2w, list(zip(texts, starts)),
                           is_impossible, _s(rec.get("title", "")))
        report.questions += 1
        report.answers += len(texts)
        report.impossible += int(is_impossible)
        if not ex.trainable:
            report.unmatched.append(qas_id)
        examples.append(ex)
    return examples, report


def squad_from_tfds(name: str = "squad/v1.1", split: str = "validation",
                    data_dir: str | None = None) -> tuple[list[SquadExample], SquadReadReport]:
    """Load `squad/v1.1` or `squad/v2.0` through tensorflow_datasets (prepared data or network)."""
    import tensorflow_datasets as tfds  # lazy: heavy import, offline it only reads prepared data

    ds = tfds.load(name, split=split, data_dir=data_dir)
    return examples_from_squad_records(tfds.as_numpy(ds), source=f"tfds:{name}/{split}")
