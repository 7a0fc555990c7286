"""Pretraining corpora as streams of documents (lists of sentences), from files, TFDS, Hugging Face datasets
(``hf:``, ``data/hf_datasets.py``) or the embedded text. A run reads them chunk by chunk (``data/chunks.py``:
``iter_documents``, ``sample_sentences``).

File formats (google-research/bert create_pretraining_data.py reads the first):
  lines       one sentence per line, a blank line between documents; empty documents are dropped.
  paragraphs  prose: paragraphs separated by blank lines, single newlines inside a paragraph joined; each
              paragraph is split into sentences (``split_sentences``). A document ends at a paragraph
              boundary once it holds >= doc_max_sentences sentences, and at end of file. Project Gutenberg
              headers/footers ("*** START OF THE PROJECT GUTENBERG ..." / "*** END OF ...") are cut.
  auto        per file, from the first 64 KiB: paragraphs if it has a Gutenberg START marker; otherwise
              lines if >= 50% of its non-blank lines end in sentence punctuation (. ! ? ... or Chinese 。！？,
              then optional closing quotes/brackets) AND < 30% hold more than one sentence; else paragraphs. (Wrapped
              prose ends most lines mid-sentence; one-paragraph-per-line text such as WikiText has many
              sentences per line.)

Files are read line by line as bytes with a bounded ``readline`` and decoded per line, so every error names
the file and 1-based line, and a huge single line is refused after reading max_line_bytes + 1 bytes.
To bound memory, a paragraph longer than 64 KiB is cut at its last sentence boundary, and a lines-format
document is cut after 16 * doc_max_sentences sentences.
"""
from __future__ import annotations

import glob
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError, DataError

Document = list[str]
READER_VERSION = 2
"""Bump when reading or sentence splitting changes what documents a file yields (token caches rebuild).
2: a line ending in Chinese sentence punctuation (。！？) counts as ending a sentence in the format detection."""

SNIFF_BYTES = 64 * 1024
BINARY_SNIFF_BYTES = 8 * 1024
MAX_PARAGRAPH_CHARS = 64 * 1024
LINES_DOC_CAP_FACTOR = 16

_GUTENBERG_START = re.compile(r"^\ufeff?\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)

# ----------------------------------------------------------------------------------------------------
# Sentence splitting

_BOUNDARY = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]]*)\s+")
_OPENERS = "\"'\u201c\u2018(["
_CLOSERS = r"[\"'\u201d\u2019)\]\u300d\u300f\uff09]*"  # closing quotes/brackets (with 」』）) after the punctuation
# sentence punctuation (with Chinese 。！？), then closing quotes/brackets
_ENDS_SENTENCE = re.compile(r"[.!?\u2026\u3002\uff01\uff1f]" + _CLOSERS + "$")
# Chinese and Japanese prose: 。！？ (and closing quotes/brackets) end a sentence with no space after them
_CJK_BOUNDARY = re.compile(r"([\u3002\uff01\uff1f]+)(" + _CLOSERS + r")\s*")
_DOTTED = re.compile(r"^(?:[a-z]{1,2}\.)+[a-z]{1,2}$")  # e.g, i.e, u.s, a.m, ph.d
_ABBREVIATIONS = frozenset(
    "mr mrs ms messrs mme mlle dr prof sr jr st rev hon gen col capt lt sgt maj cmdr adm gov sen rep pres "
    "supt insp vs cf viz al approx ca est dept univ assn bros inc ltd co corp mt ft ave blvd jan feb mar apr "
    "jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun".split())
_NUMERIC_ABBREVIATIONS = frozenset("no nos vol vols p pp fig figs eq eqs art sec ch chap op ed".split())


def _is_abbreviation(word: str, next_char: str) -> bool:
    w = word.lstrip(_OPENERS).lower()
    if w in _ABBREVIATIONS or _DOTTED.match(w):
        return True
    if w in _NUMERIC_ABBREVIATIONS and next_char.isdigit():
        return True
    return len(w) == 1 and w.isalpha() and word[-1:].isupper()  # an initial: "J. R. R. Tolkien"


def split_sentences(paragraph: str) -> list[str]:
    """Splits prose into sentences at . ! ? ... (+ closing quotes/brackets) followed by whitespace and a
    character that is not lower case; not after abbreviations (Mr., Dr., e.g., U.S.), initials, or
    'No.'/'p.'-style abbreviations before a number. Decimals ("3.14") have no whitespace and never split.
    Chinese and Japanese full stops, exclamation and question marks (。！？, with closing quotes and brackets
    such as 」 and ”) end a sentence wherever text follows, space or not. Whitespace runs are collapsed to one
    space."""
    text = " ".join(paragraph.split())
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        following = text[m.end(): m.end() + 4].lstrip(_OPENERS)[:1]
        if not following or following.islower():
            continue
        punct_at = m.start(1)
        word = text[max(text.rfind(" ", start, punct_at) + 1, start): punct_at]
        if m.group(1) == "." and _is_abbreviation(word, following):
            continue
        out.append(text[start: m.end(2)])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return [part for sentence in out for part in _split_cjk(sentence)]


def _split_cjk(sentence: str) -> list[str]:
    parts, start = [], 0
    for m in _CJK_BOUNDARY.finditer(sentence):
        if m.end() < len(sentence):
            parts.append(sentence[start: m.end(2)])
            start = m.end()
    parts.append(sentence[start:])
    return parts


# ----------------------------------------------------------------------------------------------------
# Files


_LANGUAGE_TAG = re.compile(r"([A-Za-z][A-Za-z0-9_-]{0,31})=(.*)")


def language_groups(spec: str) -> list[tuple[str | None, str]]:
    """The sources of a corpus spec by language: ``LANG=PATHS`` tags a source (``en=wiki/en/*.txt,zh=zh.txt``),
    and the untagged parts after a tagged one belong to the same language (``en=a.txt,b.txt,zh=c.txt``). An
    untagged spec is one group of language None. Returns (language, comma-joined paths) in spec order."""
    groups: list[tuple[str | None, list[str]]] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        m = _LANGUAGE_TAG.fullmatch(part)
        if m:
            lang, path = m.group(1), m.group(2).strip()
            if not path:
                raise ConfigError(f"data.corpus: language {lang!r} has no path after '{lang}='; write {lang}=PATH")
            if path.startswith(("tfds:", "hf:")) or path == "embedded":
                raise ConfigError(f"data.corpus: {part!r}: a language-tagged source must be files (paths, globs, "
                                  "directories); tfds:, hf: and 'embedded' corpora take no language tags")
            if any(g == lang for g, _ in groups):
                raise ConfigError(f"data.corpus: language {lang!r} is named twice; list all its paths after one "
                                  f"'{lang}=' (comma-separated)")
            groups.append((lang, [path]))
        elif groups:
            groups[-1][1].append(part)
        else:
            groups.append((None, [part]))
    if len(groups) > 1 and groups[0][0] is None:
        raise ConfigError(f"data.corpus: {groups[0][1][0]!r} has no language but later sources do; tag every "
                          "source (LANG=PATH, e.g. en=a.txt,zh=b.txt) or none")
    return [(lang, ",".join(paths)) for lang, paths in groups]


def language_files(spec: str) -> list[tuple[str | None, list[Path]]]:
    """(language, its files) per group of :func:`language_groups`; the files of a group are those of
    :func:`resolve_files` on its paths. A file may belong to one language only."""
    out: list[tuple[str | None, list[Path]]] = []
    owner: dict[Path, str | None] = {}
    for lang, paths in language_groups(spec):
        files = _resolve_untagged(paths)
        for f in files:
            if f in owner:
                raise DataError(f"corpus: {f} is listed under both languages {owner[f]!r} and {lang!r}; a file "
                                "belongs to one language: fix data.corpus")
            owner[f] = lang
        out.append((lang, files))
    if not out:
        raise DataError(f"corpus '{spec}': matched no files")
    return out


def resolve_files(spec: str) -> list[Path]:
    """Comma-separated paths, globs (``**`` allowed) and directories (-> their ``*.txt``, recursively);
    sorted and de-duplicated. A part that matches nothing raises DataError naming it. With language tags
    (:func:`language_groups`) the files are listed language by language, in the spec's order."""
    return [f for _, files in language_files(spec) for f in files]


def _resolve_untagged(spec: str) -> list[Path]:
    found: set[Path] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        matches = [Path(m) for m in sorted(glob.glob(part, recursive=True))] if glob.has_magic(part) else (
            [Path(part)] if Path(part).exists() else [])
        if not matches:
            raise DataError(f"corpus '{part}': no such file, directory or glob match; check data.corpus "
                            "(comma-separated paths/globs/directories, optionally tagged LANG=PATH, 'embedded', "
                            "or 'tfds:NAME[:SPLIT]')")
        for m in matches:
            if m.is_dir():
                txt = [t for t in m.rglob("*.txt") if t.is_file()]
                if not txt and not glob.has_magic(part):
                    raise DataError(f"corpus '{part}': directory has no *.txt files")
                found.update(txt)
            else:
                found.add(m)
    if not found:
        raise DataError(f"corpus '{spec}': matched no files")
    return sorted(found)


def check_process(process_index: int, process_count: int) -> None:
    if process_count < 1 or not 0 <= process_index < process_count:
        raise ConfigError(f"process_index={process_index} is not in [0, process_count={process_count})")


def check_file(path: Path) -> None:
    """Fast validation before anything is written: the file exists, is not empty and is not binary."""
    if not path.exists():
        raise DataError(f"{path}: no such file; check data.corpus")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file")
    with open(path, "rb") as f:
        head = f.read(BINARY_SNIFF_BYTES)
    if not head.strip():
        if path.stat().st_size <= BINARY_SNIFF_BYTES:
            raise DataError(f"{path}: file is empty (or only whitespace); remove it from data.corpus")
    nul = head.find(b"\x00")
    if nul >= 0:
        line = head.count(b"\n", 0, nul) + 1
        raise DataError(f"{path}:{line}: binary file (NUL byte at offset {nul}); expected UTF-8 text. "
                        "If it is UTF-16 text, convert it: iconv -f utf-16 -t utf-8")


def _read_lines(path: Path, max_line_bytes: int, start: int = 0,
                end: int | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line without its end-of-line) pairs of the lines in bytes [start, end)
    (``start`` a line start); errors name the file and line (the byte offset where the range starts
    mid-file, since counting the lines before it would read them)."""
    offset = start
    with open(path, "rb") as f:
        f.seek(start)
        for lineno in itertools.count(1):
            if end is not None and offset >= end:
                return
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return
            where = f"{path}:{lineno}" if start == 0 else f"{path} (line at byte {offset})"
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise DataError(f"{where}: line is longer than data.max_line_bytes={max_line_bytes} "
                                "bytes; is this a text corpus? Raise data.max_line_bytes or insert line breaks")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{where}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start} of the "
                    f"line, file offset {offset + e.start}); convert the file, e.g. "
                    f"iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8.txt") from None
            if offset == 0:
                text = text.lstrip("\ufeff")
            offset += len(raw)
            yield lineno, text.rstrip("\r\n")


def numbered_lines(path: Path, max_line_bytes: int = 1 << 20) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of a UTF-8 text file, errors naming the file and line: the reader of
    line-per-record inputs that are not a corpus (an edge list, a hierarchy's relations)."""
    return _read_lines(Path(path), max_line_bytes)


def _sniff(path: Path) -> tuple[bool, list[str]]:
    """(has a Gutenberg START marker, non-blank stripped lines of the first 64 KiB after it)."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES).decode("utf-8", errors="replace").splitlines()
    if len(head) > 1:
        head = head[:-1]  # the last line may be cut
    gutenberg = next((i for i, line in enumerate(head) if _GUTENBERG_START.match(line)), None)
    body = head if gutenberg is None else head[gutenberg + 1:]
    return gutenberg is not None, [s for s in (line.strip() for line in body) if s]


def detect_format(path: Path) -> str:
    """'lines' or 'paragraphs' by the rule in the module docstring."""
    return _decide_format(*_sniff(path))


def _decide_format(gutenberg: bool, lines: list[str]) -> str:
    if gutenberg or not lines:
        return "paragraphs"
    ends = sum(1 for s in lines if _ENDS_SENTENCE.search(s)) / len(lines)
    multi = sum(1 for s in lines if len(split_sentences(s)) > 1) / len(lines)
    return "lines" if ends >= 0.5 and multi < 0.3 else "paragraphs"


def _lines_documents(lines: Iterable[tuple[int, str]], cap: int) -> Iterator[Document]:
    doc: Document = []
    for _, line in lines:
        s = line.strip()
        if s:
            doc.append(s)
            if len(doc) >= cap:
                yield doc
                doc = []
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _paragraph_documents(lines: Iterable[tuple[int, str]], doc_max_sentences: int) -> Iterator[Document]:
    doc: Document = []
    para: list[str] = []
    chars = 0
    for _, line in lines:
        s = line.strip()
        if s:
            para.append(s)
            chars += len(s)
            if chars <= MAX_PARAGRAPH_CHARS:
                continue
            sentences = split_sentences(" ".join(para))  # over-long paragraph: keep its unfinished tail
            doc.extend(sentences[:-1])
            para, chars = sentences[-1:], len(sentences[-1])
        elif para:
            doc.extend(split_sentences(" ".join(para)))
            para, chars = [], 0
        if len(doc) >= doc_max_sentences:
            yield doc
            doc = []
    if para:
        doc.extend(split_sentences(" ".join(para)))
    if doc:
        yield doc


def _gutenberg_body(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    for _, line in lines:  # skip the header through the START marker
        if _GUTENBERG_START.match(line):
            break
    for item in lines:
        if _GUTENBERG_END.match(item[1]):
            return
        yield item


def read_documents(path: Path, fmt: str = "auto", doc_max_sentences: int = 256,
                   max_line_bytes: int = 1_000_000, start: int = 0, end: int | None = None) -> Iterator[Document]:
    """Documents of one text file in ``fmt`` ('auto' | 'lines' | 'paragraphs'), streamed; with ``start`` /
    ``end``, of the lines in that byte range only (a chunk: ``chunk_pieces``). The format and the Gutenberg
    markers are decided from the file's head, so every range of a file is read the same way."""
    path = Path(path)
    check_file(path)
    if fmt not in ("auto", "lines", "paragraphs"):
        raise ConfigError(f"data.format={fmt!r}: expected 'auto', 'lines' or 'paragraphs'")
    gutenberg, sample = _sniff(path)
    if fmt == "auto":
        fmt = _decide_format(gutenberg, sample)
    lines = _read_lines(path, max_line_bytes, start, end)
    if gutenberg:
        lines = _gutenberg_body(lines)
    seen = [False]

    def track(items):
        for item in items:
            if not seen[0] and item[1].strip():
                seen[0] = True
            yield item

    if fmt == "lines":
        yield from _lines_documents(track(lines), LINES_DOC_CAP_FACTOR * doc_max_sentences)
    else:
        yield from _paragraph_documents(track(lines), doc_max_sentences)
    if not seen[0] and start == 0 and end in (None, path.stat().st_size):
        raise DataError(f"{path}: file has no text (empty, only whitespace, or nothing between the Gutenberg "
                        "markers); remove it from data.corpus")


# ----------------------------------------------------------------------------------------------------
# TFDS


def parse_tfds_spec(spec: str) -> tuple[str, str]:
    """'tfds:NAME[:SPLIT]' -> (NAME, SPLIT or 'train'); the split may hold slicing, e.g. 'train[:1%]'."""
    if not spec.startswith("tfds:"):
        raise ConfigError(f"data.corpus={spec!r} is not of the form tfds:NAME[:SPLIT]")
    name, _, split = spec[len("tfds:"):].partition(":")
    if not name.strip():
        raise ConfigError(f"data.corpus={spec!r}: missing dataset name; e.g. tfds:wikipedia/20230601.en:train")
    return name.strip(), split.strip() or "train"


def record_to_document(text: str | bytes) -> Document:
    """One record's text -> paragraphs (blank-line separated, inner newlines joined) -> sentences."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return [s for p in re.split(r"\n\s*\n", text) for s in split_sentences(p)]


def dataset_documents(ds, text_key: str | None = None, process_index: int = 0,
                      process_count: int = 1, where: str = "dataset") -> Iterator[Document]:
    """Documents of a tf.data dataset of records; this process takes records i % count == index."""
    return (doc for _, doc in keyed_dataset_documents(ds, text_key, process_index, process_count, where))


def keyed_dataset_documents(ds, text_key: str | None = None, process_index: int = 0, process_count: int = 1,
                            where: str = "dataset") -> Iterator[tuple[int, Document]]:
    """(record index, document) pairs of ``dataset_documents``; records without text are skipped."""
    import tensorflow as tf

    check_process(process_index, process_count)
    spec = ds.element_spec
    if isinstance(spec, dict):
        strings = [k for k, v in spec.items() if getattr(v, "dtype", None) == tf.string and v.shape.rank == 0]
        key = text_key or ("text" if "text" in spec else (strings[0] if len(strings) == 1 else None))
        if key not in spec:
            raise DataError(f"{where}: cannot tell which feature holds the text (features: "
                            f"{', '.join(sorted(spec))}); name it as text_key")
        ds = ds.map(lambda r: r[key])
    for k, text in enumerate(ds.shard(process_count, process_index).as_numpy_iterator()):
        doc = record_to_document(text)
        if doc:
            yield process_index + k * process_count, doc


def tfds_documents(name: str, split: str = "train", text_key: str | None = None, process_index: int = 0,
                   process_count: int = 1) -> Iterator[Document]:
    """Documents of a TFDS dataset (prepared in the TFDS data dir), in file order (no shuffling)."""
    return (doc for _, doc in _keyed_tfds_documents(name, split, text_key, process_index, process_count))


def _keyed_tfds_documents(name: str, split: str, text_key: str | None, process_index: int,
                          process_count: int) -> Iterator[tuple[int, Document]]:
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise DataError(f"tfds:{name}: tensorflow_datasets is not installed ({e})") from None
    try:
        ds = tfds.load(name, split=split, shuffle_files=False, download=False)
    except (AssertionError, FileNotFoundError, ValueError) as e:  # tfds: "Dataset ... not found in data_dir"
        data_dir = os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
        raise DataError(f"tfds:{name}: not prepared in the TFDS data dir ({data_dir}): "
                        f"{str(e).splitlines()[0][:200]}. `ptm data` / `ptm pretrain` prepare it first "
                        "(prepare_tfds)") from None
    yield from keyed_dataset_documents(ds, text_key, process_index, process_count, where=f"tfds:{name}:{split}")


TFDS_PREPARE_TIMEOUT_S = float(os.environ.get("PTM_TFDS_PREPARE_TIMEOUT_S", 6 * 3600))
"""How long the other processes wait at the barrier while process 0 downloads and prepares a TFDS corpus."""


def prepare_tfds(cfg: DataConfig, process_index: int, barrier: Callable[..., None]) -> None:
    """For a ``tfds:`` corpus: process 0 downloads and prepares it (``download_and_prepare``) while the others
    wait at ``barrier``; then they call it too, which is a no-op where the TFDS data dir is shared (e.g.
    TFDS_DATA_DIR=gs://bucket/tfds) and prepares a local copy where it is not. Reading never downloads.
    A Hugging Face hub dataset (``hf:NAME``) is prepared the same way (``hf_datasets.prepare``)."""
    spec = cfg.corpus.strip()
    if spec.startswith("hf:"):
        from ptm_jax.data import hf_datasets

        hf_datasets.prepare(spec, process_index, barrier, TFDS_PREPARE_TIMEOUT_S)
        return
    if not spec.startswith("tfds:"):
        return
    name, _ = parse_tfds_spec(spec)
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise DataError(f"tfds:{name}: tensorflow_datasets is not installed ({e})") from None
    if process_index == 0:
        tfds.builder(name).download_and_prepare()
    barrier("tfds_prepare", timeout_s=TFDS_PREPARE_TIMEOUT_S)
    if process_index != 0:
        tfds.builder(name).download_and_prepare()


# ----------------------------------------------------------------------------------------------------
