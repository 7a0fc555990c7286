"""GLUE task readers: the standard `glue_data/` TSV layout and TFDS `glue/*` records.

Column positions, header handling and label sets follow the per-task processors of
google-research/bert run_classifier.py (CoLA, MRPC, MNLI) and the GLUE download layout for the
other tasks; the files are read tab-separated with quoting disabled (csv.QUOTE_NONE), as the
GLUE reference readers do. Rows are never skipped: a row with too few columns, an unknown label, a
non-finite score, invalid UTF-8 or a field over the csv module's field size limit raises DataError naming
the file and its 1-based line.
"""
from __future__ import annotations

import csv
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from ptm_jax.errors import ConfigError, DataError


@dataclass(frozen=True)
class Columns:
    """Where one split's fields sit in a TSV row (0-based; a negative index counts from the end)."""

    text_a: int
    text_b: int | None
    label: int | None  # None: the split carries no labels (GLUE test files)
    header: bool


@dataclass(frozen=True)
class TaskSpec:
    """One GLUE task: label set, file layout per split, metrics, TFDS names and submission files."""

    name: str
    dirname: str
    labels: list[str] | None  # None = regression (STS-B)
    splits: dict[str, tuple[str, Columns]]  # split -> (file name inside dirname, columns)
    metrics: tuple[str, ...]
    is_pair: bool
    tfds_name: str
    tfds_text: tuple[str, str | None]
    tfds_labels: tuple[str, ...] | None = None  # ClassLabel names in TFDS order
    tfds_splits: dict[str, str] = field(default_factory=dict)  # our split -> TFDS split
    submission: dict[str, str] = field(default_factory=dict)  # test split -> GLUE server file name

    @property
    def num_labels(self) -> int:
        """Classes of the head (1 for regression)."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_regression(self) -> bool:
        return self.labels is None


@dataclass
class Example:
    """One GLUE example; `label` is a class index, a float (STS-B) or None (test split)."""

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None
    line: int  # 1-based line in the source file (0 for TFDS records)


@dataclass
class ReadReport:
    """What a reader saw: rows read, header lines skipped, label histogram."""

    path: str
    rows: int = 0
    examples: int = 0
    header_lines: int = 0
    label_counts: dict[str, int] = field(default_factory=dict)


_BIN = ["0", "1"]
_NLI3 = ["contradiction", "entailment", "neutral"]
_ENT2 = ["entailment", "not_entailment"]
_STD = {"train": "train", "dev": "validation", "test": "test"}


def _std(train: Columns, dev: Columns, test: Columns) -> dict[str, tuple[str, Columns]]:
    return {"train": ("train.tsv", train), "dev": ("dev.tsv", dev), "test": ("test.tsv", test)}


GLUE_TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec(
        "cola", "CoLA", _BIN,
        _std(Columns(3, None, 1, False), Columns(3, None, 1, False), Columns(1, None, None, True)),
        ("mcc",), False, "glue/cola", ("sentence", None), ("unacceptable", "acceptable"),
        _STD, {"test": "CoLA.tsv"}),
    "sst2": TaskSpec(
        "sst2", "SST-2", _BIN,
        _std(Columns(0, None, 1, True), Columns(0, None, 1, True), Columns(1, None, None, True)),
        ("accuracy",), False, "glue/sst2", ("sentence", None), ("negative", "positive"),
        _STD, {"test": "SST-2.tsv"}),
    "mrpc": TaskSpec(
        "mrpc", "MRPC", _BIN,
        _std(Columns(3, 4, 0, True), Columns(3, 4, 0, True), Columns(3, 4, None, True)),
        ("f1", "accuracy"), True, "glue/mrpc", ("sentence1", "sentence2"),
        ("not_equivalent", "equivalent"), _STD, {"test": "MRPC.tsv"}),
    "stsb": TaskSpec(
        "stsb", "STS-B", None,
        _std(Columns(7, 8, -1, True), Columns(7, 8, -1, True), Columns(7, 8, None, True)),
        ("pearson", "spearman"), True, "glue/stsb", ("sentence1", "sentence2"), None,
        _STD, {"test": "STS-B.tsv"}),
    "qqp": TaskSpec(
        "qqp", "QQP", _BIN,
        _std(Columns(3, 4, 5, True), Columns(3, 4, 5, True), Columns(1, 2, None, True)),
        ("f1", "accuracy"), True, "glue/qqp", ("question1", "question2"),
        ("not_duplicate", "duplicate"), _STD, {"test": "QQP.tsv"}),
    "mnli": TaskSpec(
        "mnli", "MNLI", _NLI3,
        {"train": ("train.tsv", Columns(8, 9, -1, True)),
         "dev_matched": ("dev_matched.tsv", Columns(8, 9, -1, True)),
         "dev_mismatched": ("dev_mismatched.tsv", Columns(8, 9, -1, True)),
         "test_matched": ("test_matched.tsv", Columns(8, 9, None, True)),
         "test_mismatched": ("test_mismatched.tsv", Columns(8, 9, None, True))},
        ("accuracy",), True, "glue/mnli", ("premise", "hypothesis"),
        ("entailment", "neutral", "contradiction"),
        {"train": "train", "dev_matched": "validation_matched",
         "dev_mismatched": "validation_mismatched", "test_matched": "test_matched",
         "test_mismatched": "test_mismatched"},
        {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}),
    "qnli": TaskSpec(
        "qnli", "QNLI", _ENT2,
        _std(Columns(1, 2, -1, True), Columns(1, 2, -1, True), Columns(1, 2, None, True)),
        ("accuracy",), True, "glue/qnli", ("question", "sentence"), tuple(_ENT2),
        _STD, {"test": "QNLI.tsv"}),
    "rte": TaskSpec(
        "rte", "RTE", _ENT2,
        _std(Columns(1, 2, -1, True), Columns(1, 2, -1, True), Columns(1, 2, None, True)),
        ("accuracy",), True, "glue/rte", ("sentence1", "sentence2"), tuple(_ENT2),
        _STD, {"test": "RTE.tsv"}),
    "wnli": TaskSpec(
        "wnli", "WNLI", _BIN,
        _std(Columns(1, 2, -1, True), Columns(1, 2, -1, True), Columns(1, 2, None, True)),
        ("accuracy",), True, "glue/wnli", ("sentence1", "sentence2"),
        ("not_entailment", "entailment"), _STD, {"test": "WNLI.tsv"}),
    "ax": TaskSpec(
        "ax", "diagnostic", _NLI3,
        {"test": ("diagnostic.tsv", Columns(1, 2, None, True))},
        ("mcc",), True, "glue/ax", ("premise", "hypothesis"),
        ("entailment", "neutral", "contradiction"), {"test": "test"}, {"test": "AX.tsv"}),
}

# Other spellings of the diagnostic file found in GLUE copies (HF datasets, older download script).
_AX_CANDIDATES = ("diagnostic/diagnostic.tsv", "AX/AX.tsv", "diagnostic/AX.tsv", "AX/diagnostic.tsv")


def get_task(task: str) -> TaskSpec:
    """The TaskSpec of `task` (case-insensitive; 'sst-2', 'sts-b' spellings accepted)."""
    key = task.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise ConfigError(f"unknown GLUE task {task!r}; choose one of {sorted(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def _check_split(spec: TaskSpec, split: str) -> tuple[str, Columns]:
    if split not in spec.splits:
        raise ConfigError(f"GLUE task {spec.name!r} has no split {split!r}; "
                          f"choose one of {sorted(spec.splits)}")
    return spec.splits[split]


def task_file(glue_dir: str | os.PathLike, task: str, split: str) -> str:
    """Path of a split's TSV in the standard GLUE layout (the AX file has several known names)."""
    spec = get_task(task)
    fname, _ = _check_split(spec, split)
    if spec.name == "ax":
        for rel in _AX_CANDIDATES:
            path = os.path.join(glue_dir, rel)
            if os.path.isfile(path):
                return path
        raise DataError(f"{os.path.join(glue_dir, _AX_CANDIDATES[0])}: GLUE diagnostic file not found "
                        f"(also looked for {', '.join(_AX_CANDIDATES[1:])}); download it with the "
                        f"GLUE download script or use glue_from_tfds('ax', 'test')")
    path = os.path.join(glue_dir, spec.dirname, fname)
    if not os.path.isfile(path):
        raise DataError(f"{path}: GLUE file not found; expected the standard layout "
                        f"<glue_dir>/{spec.dirname}/{fname} (download_glue_data.py) or use glue_from_tfds")
    return path


def _label_value(spec: TaskSpec, raw: str, path: str, line: int) -> int | float:
    if spec.labels is None:
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(f"{path}:{line}: score {raw!r} is not a finite number; "
                            f"fix or remove the row (GLUE rows are never skipped)")
        return score
    try:
        return spec.labels.index(raw)
    except ValueError:
        raise DataError(f"{path}:{line}: label {raw!r} is not one of {spec.labels} for task "
                        f"{spec.name}; fix the row (GLUE rows are never skipped)") from None


def utf8_error(path: str, what: str) -> DataError:
    """The DataError for the first invalid UTF-8 byte of ``path``, with its 1-based line (\\n, \\r\\n and
    \\r each end a line, as in universal-newline reading). The file is re-read as bytes: a text-mode decoder
    reports offsets inside its buffer, not in the file. Called only on the failure path."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
        return DataError(f"{path}: not valid UTF-8; re-encode the {what} file as UTF-8")
    except UnicodeDecodeError as e:
        head = data[: e.start]
        line = head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1
        return DataError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at file offset {e.start}); "
                         f"{what} files are UTF-8 text: re-encode it, e.g. iconv -f latin1 -t utf-8")


def _rows(reader: Any, path: str) -> Iterator[list[str]]:
    """``reader``'s rows; invalid UTF-8 and csv errors (a field over csv.field_size_limit() characters)
    become DataErrors naming the line."""
    try:
        yield from reader
    except UnicodeDecodeError:
        raise utf8_error(path, "GLUE") from None
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: unreadable TSV row ({e}, in characters); GLUE fields are "
                        "sentences, so this is not a GLUE file or a line lost its line breaks: fix or replace "
                        "the file") from None


def read_glue(glue_dir: str | os.PathLike, task: str, split: str) -> tuple[list[Example], ReadReport]:
    """Read one split of a GLUE task from the standard directory layout.

    Test splits give `label=None`. The MRPC header's UTF-8 BOM is dropped (utf-8-sig); CoLA
    train/dev have no header. guid is `<split>-<n>` (n = 0-based data row) except on test splits,
    where it is `<split>-<index column>` so that submissions keep the server's indices.
    """
    spec = get_task(task)
    _, cols = _check_split(spec, split)
    path = task_file(glue_dir, spec.name, split)
    need = max(c for c in (cols.text_a, cols.text_b, cols.label) if c is not None and c >= 0) + 1
    if cols.label is not None and cols.label < 0:  # label counted from the end, after the texts
        need += -cols.label
    report = ReadReport(path=path)
    examples: list[Example] = []
    counts: Counter[str] = Counter()
    blank_line = 0
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in _rows(reader, path):
            line = reader.line_num
            if cols.header and line == 1:
                report.header_lines = 1
                continue
            if not row or (len(row) == 1 and not row[0].strip()):
                blank_line = blank_line or line  # tolerated only at the end of the file
                continue
            if blank_line:
                raise DataError(f"{path}:{blank_line}: empty line inside a GLUE file; remove it")
            if len(row) < need:
                raise DataError(f"{path}:{line}: {len(row)} tab-separated columns, task {spec.name} "
                                f"split {split} needs at least {need}; fix the row (GLUE rows are "
                                f"never skipped)")
            label: int | float | None = None
            if cols.label is not None:
                label = _label_value(spec, row[cols.label], path, line)
                counts[row[cols.label] if spec.labels is not None else "score"] += 1
            guid_n = row[0] if cols.label is None and cols.header else str(report.rows)
            examples.append(Example(
                guid=f"{split}-{guid_n}", text_a=row[cols.text_a],
                text_b=row[cols.text_b] if cols.text_b is not None else None,
                label=label, line=line))
            report.rows += 1
    report.examples = len(examples)
    report.label_counts = dict(sorted(counts.items()))
    return examples, report


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "item"):  # numpy scalar from tfds.as_numpy
        value = value.item()
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return str(value)


def examples_from_tfds_records(task: str, split: str,
                               records: Iterable[Mapping[str, Any]]) -> list[Example]:
    """Convert TFDS `glue/<task>` records (dicts, str or bytes text) into Examples.

    TFDS labels are ClassLabel indices in TFDS name order; they are remapped by name onto this
    module's label order (MNLI/AX differ: TFDS uses entailment, neutral, contradiction). A label
    of -1 (test splits) becomes None.
    """
    spec = get_task(task)
    _check_split(spec, split)
    key_a, key_b = spec.tfds_text
    remap: list[int] | None = None
    if spec.labels is not None and spec.tfds_labels is not None:
        if spec.labels == _BIN:  # TFDS index i is the GLUE file's label "i"
            remap = [0, 1]
        else:
            remap = [spec.labels.index(name) for name in spec.tfds_labels]
    out: list[Example] = []
    for n, rec in enumerate(records):
        try:
            text_a = _text(rec[key_a])
            text_b = _text(rec[key_b]) if key_b is not None else None
            raw = rec.get("label", -1)
        except KeyError as e:
            raise DataError(f"TFDS {spec.tfds_name} {split} record {n}: missing feature {e}; "
                            f"expected {spec.tfds_text} and 'label'") from None
        raw = raw.item() if hasattr(raw, "item") else raw
        label: int | float | None
        if spec.labels is None:
            label = None if split == "test" else float(raw)
        elif int(raw) < 0:
            label = None
        else:
            if remap is None or int(raw) >= len(remap):
                raise DataError(f"TFDS {spec.tfds_name} {split} record {n}: label {raw} out of range "
                                f"for {spec.tfds_labels}")
            label = remap[int(raw)]
        idx = rec.get("idx", n)
        idx = idx.item() if hasattr(idx, "item") else idx
        out.append(Example(guid=f"{split}-{idx}", text_a=text_a, text_b=text_b, label=label, line=0))
    return out


def glue_from_tfds(task: str, split: str, data_dir: str | None = None) -> list[Example]:
    """Load `glue/<task>` through tensorflow_datasets (needs the prepared dataset or network)."""
    spec = get_task(task)
    _check_split(spec, split)
    import tensorflow_datasets as tfds  # lazy: heavy import, and offline it can only read prepared data

    ds = tfds.load(spec.tfds_name, split=spec.tfds_splits[split], data_dir=data_dir)
    return examples_from_tfds_records(spec.name, split, tfds.as_numpy(ds))
