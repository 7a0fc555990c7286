"""The corpus as fixed chunks that do not depend on the number of processes: the unit in which the token cache
is built, split between hosts and reused (``data/cache.py``), and the windows the tokenizer's sample is read
from (:func:`sample_sentences`); a process reads its share of the documents chunk by chunk
(:func:`iter_documents`). The rules are in the ``ChunkLayout`` docstring: files are cut by bytes at
document boundaries; 'embedded' is one chunk; TFDS is ``TFDS_CHUNKS`` even sub-splits (``tfds.even_splits``);
a Hugging Face dataset (``hf:``) is ``hf_datasets.HF_CHUNKS`` even row ranges.
"""
from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

from ptm_jax.config import DataConfig
from ptm_jax.data import hf_datasets
from ptm_jax.data.corpus import (Document, _keyed_tfds_documents, _sniff, check_file, check_process,
                                 language_files, parse_tfds_spec, read_documents, record_to_document)
from ptm_jax.errors import ConfigError


def is_gutenberg(path: Path) -> bool:
    return _sniff(Path(path))[0]


def document_boundary(path: Path, offset: int, size: int, search_bytes: int, max_line_bytes: int) -> int:
    """The first document boundary of ``path`` at or after byte ``offset``: just after the first blank line
    that starts at or after it (a document ends there in 'lines' format, a paragraph in 'paragraphs'), else,
    when none starts within ``search_bytes``, the first line start. A function of the file's bytes alone."""
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    with open(path, "rb") as f:
        f.seek(offset - 1)
        if f.read(1) != b"\n":
            while True:  # finish the line that holds ``offset``
                raw = f.readline(max_line_bytes + 1)
                if not raw or raw.endswith(b"\n"):
                    break
        first_line = pos = f.tell()
        while pos < size and pos - offset <= search_bytes:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                break
            pos += len(raw)
            if not raw.strip():  # a blank line (or whitespace at the end of the file)
                return min(pos, size)
        return min(first_line, size)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of corpus file ``file`` (an index into ``resolve_files``)."""
    file: int
    start: int
    end: int


class ChunkLayout:
    """The corpus as fixed chunks that do not depend on the number of processes.

    Files: the sorted files are laid end to end and cut every ``chunk_bytes`` bytes; each cut moves forward to a
    document boundary (``document_boundary``), or to the end of the file for Project Gutenberg files, whose
    header/footer markers are read per file. Chunk ``c`` is the bytes between cuts ``c`` and ``c + 1``: the tail
    of one file, whole files, the head of another (possibly nothing). 'embedded' is one chunk; TFDS
    ``TFDS_CHUNKS`` even sub-splits (``tfds.even_splits``). Process p of P reads chunks c with c % P == p;
    a document's key is ``(c << 32) + its index in the chunk``, so key order is corpus order.

    A corpus whose sources name their languages (``en=...,zh=...``: ``corpus.language_groups``) is cut language
    by language: each language's files, laid end to end, make ``ceil(bytes / chunk_bytes)`` chunks of their own,
    so no chunk holds two languages and ``language_of_chunk`` tells a document's language from its key.
    """

    def __init__(self, cfg: DataConfig, chunk_bytes: int | None = None):
        self.cfg = cfg
        self.chunk_bytes = int(chunk_bytes or cfg.cache_chunk_bytes)
        if self.chunk_bytes < 1:
            raise ConfigError(f"data.cache_chunk_bytes={self.chunk_bytes} must be positive")
        spec = cfg.corpus.strip()
        self.kind = ("embedded" if spec == "embedded" else "tfds" if spec.startswith("tfds:") else
                     "hf" if spec.startswith(hf_datasets.PREFIX) else "files")
        self.files: list[Path] = []
        self.sizes: list[int] = []
        if self.kind == "hf":  # rows in file order, cut into even row ranges
            self.hf_files = hf_datasets.resolve(hf_datasets.parse_spec(spec))
            self.hf_starts = list(itertools.accumulate((hf_datasets.count_rows(f) for f in self.hf_files), initial=0))
            self.total_bytes = 0
            self.num_chunks = max(1, min(hf_datasets.HF_CHUNKS, self.hf_starts[-1]))
        self.languages: list[str] = []
        """The languages of the segments, in corpus order (empty: the sources name none)."""
        seg_bytes: list[int] = []
        if self.kind == "files":
            groups = language_files(spec)
            self.files = [f for _, files in groups for f in files]
            self.sizes = [p.stat().st_size for p in self.files]
            self.total_bytes = sum(self.sizes)
            sizes = iter(self.sizes)
            seg_bytes = [sum(next(sizes) for _ in files) for _, files in groups]
            if groups[0][0] is not None:
                self.languages = [str(lang) for lang, _ in groups]
            seg_chunks = [max(1, -(-b // self.chunk_bytes)) for b in seg_bytes]
            self.num_chunks = sum(seg_chunks)
        elif self.kind != "hf":
            self.total_bytes = 0
            self.num_chunks = 1 if self.kind == "embedded" else TFDS_CHUNKS
        if self.kind != "files":
            seg_bytes, seg_chunks = [self.total_bytes], [self.num_chunks]
        self._seg_first = list(itertools.accumulate(seg_chunks, initial=0))
        self._seg_start = list(itertools.accumulate(seg_bytes, initial=0))
        self._starts = list(itertools.accumulate(self.sizes, initial=0))
        self._cuts: dict[int, int] = {}

    def segment_of_chunk(self, c: int) -> int:
        return bisect.bisect_right(self._seg_first, c) - 1

    def language_of_chunk(self, c: int) -> str | None:
        """The language of chunk ``c``'s documents (None when the sources name no languages)."""
        return self.languages[self.segment_of_chunk(c)] if self.languages else None

    def language_chunks(self, lang_index: int) -> range:
        """The chunks of the ``lang_index``-th language (segment)."""
        return range(self._seg_first[lang_index], self._seg_first[lang_index + 1])

    def language_bytes(self) -> list[int]:
        """Corpus bytes of each language (segment), in corpus order."""
        return [b - a for a, b in zip(self._seg_start[:-1], self._seg_start[1:])]

    def cut(self, c: int) -> int:
        """Global byte offset where chunk ``c`` starts (``num_chunks``: the end of the corpus)."""
        if c <= 0:
            return 0
        if c >= self.num_chunks:
            return self.total_bytes
        if c not in self._cuts:
            seg = self.segment_of_chunk(c)
            x = self._seg_start[seg] + (c - self._seg_first[seg]) * self.chunk_bytes
            f = bisect.bisect_right(self._starts, x) - 1
            base = self._starts[f]
            if x == base:
                cut = x
            elif is_gutenberg(self.files[f]):
                cut = self._starts[f + 1]
            else:
                cut = base + document_boundary(self.files[f], x - base, self.sizes[f], self.chunk_bytes,
                                               self.cfg.max_line_bytes)
            self._cuts[c] = cut  # cuts are non-decreasing in c: the search only moves forward
        return self._cuts[c]

    def pieces(self, c: int) -> list[Piece]:
        """The file ranges of chunk ``c`` (files only), in corpus order."""
        a, b = self.cut(c), self.cut(c + 1)
        out = []
        for f in range(bisect.bisect_right(self._starts, a) - 1, len(self.files)):
            lo, hi = max(a, self._starts[f]), min(b, self._starts[f + 1])
            if lo >= b:
                break
            if lo < hi or (self.sizes[f] == 0 and lo == self._starts[f]):
                out.append(Piece(f, lo - self._starts[f], hi - self._starts[f]))
        return out

    def chunk_bytes_of(self, c: int) -> int:
        return self.cut(c + 1) - self.cut(c) if self.kind == "files" else 0

    def documents(self, c: int) -> Iterator[tuple[int, Document]]:
        """(key, document) pairs of chunk ``c``."""
        if not 0 <= c < self.num_chunks:
            raise IndexError(f"chunk {c} out of range [0, {self.num_chunks})")
        cfg = self.cfg
        if self.kind == "embedded":
            from ptm_jax.data.embedded import embedded_documents

            docs: Iterable[Document] = embedded_documents()
        elif self.kind == "tfds":
            name, split = parse_tfds_spec(cfg.corpus.strip())
            docs = (d for _, d in _keyed_tfds_documents(name, tfds_chunk_split(split, c), cfg.text_field or None,
                                                         0, 1))
        elif self.kind == "hf":
            docs = (d for d in map(record_to_document, self.hf_texts(c)) if d)
        else:
            docs = (doc for piece in self.pieces(c) for doc in read_documents(
                self.files[piece.file], cfg.format, cfg.doc_max_sentences, cfg.max_line_bytes, piece.start,
                piece.end))
        return (((c << 32) + k, doc) for k, doc in enumerate(docs))


    def hf_texts(self, c: int) -> Iterator[str]:
        """The texts of the rows of chunk ``c`` of an hf: corpus (rows [c n / K, (c + 1) n / K), nulls skipped)."""
        n, k = self.hf_starts[-1], self.num_chunks
        lo, hi = c * n // k, (c + 1) * n // k
        for f, path in enumerate(self.hf_files):
            a, b = max(lo, self.hf_starts[f]), min(hi, self.hf_starts[f + 1])
            if a < b:
                for text in hf_datasets.iter_texts(path, self.cfg.text_field, a - self.hf_starts[f],
                                                   b - self.hf_starts[f]):
                    if text:
                        yield text


TFDS_CHUNKS = 64
"""Sub-splits a TFDS corpus is read in (``tfds.even_splits``), whatever the number of processes."""


def tfds_chunk_split(split: str, c: int) -> str:
    import tensorflow_datasets as tfds

    return tfds.even_splits(split, n=TFDS_CHUNKS)[c]


# ----------------------------------------------------------------------------------------------------
# Reading the corpus by chunks

def sample_sentences(cfg: DataConfig, budget_bytes: int | None = None,
                     window_bytes: int = 1 << 20) -> Iterator[str]:
    """A bounded, deterministic sample of the corpus's sentences for training a tokenizer (at most about
    ``budget_bytes``, default ``tokenizer``'s ``train_sample_bytes`` passed by the caller; 0 = everything).

    Files: the corpus is cut into windows of ``window_bytes`` (``ChunkLayout``) and ``budget / window`` of them,
    evenly spaced over the whole corpus, are read; a corpus within the budget is read whole. 'embedded' is
    read whole; TFDS records are read in order until the budget. The same sample on every process and run:
    it depends only on the files' bytes. A corpus whose sources name their languages is sampled with mBERT's
    smoothed language shares (``languages.smoothed_sample``)."""
    budget = int(budget_bytes or 0)
    if budget and budget < window_bytes:
        window_bytes = budget
    layout = ChunkLayout(cfg, window_bytes)
    if layout.languages:  # mBERT's smoothed language shares (data/languages.py)
        from ptm_jax.data.languages import smoothed_sample

        yield from smoothed_sample(layout, budget, cfg.language_alpha)
        return
    if layout.kind == "files":
        for f in layout.files:  # empty, missing or binary files are named before anything is read
            check_file(f)
        n = layout.num_chunks
        k = n if not budget or layout.total_bytes <= budget else max(1, budget // layout.chunk_bytes)
        for c in sorted({i * n // k for i in range(k)}):
            for _, doc in layout.documents(c):
                yield from doc
        return
    seen = 0
    docs = (d for c in range(layout.num_chunks) for _, d in layout.documents(c))
    for doc in docs:
        for s in doc:
            yield s
            seen += len(s.encode("utf-8"))
        if budget and seen >= budget and layout.kind in ("tfds", "hf"):
            return


def iter_documents(cfg: DataConfig, process_index: int = 0, process_count: int = 1) -> Iterator[Document]:
    """This process's documents of ``cfg.corpus``: those of the chunks c with c % count == index
    (``ChunkLayout``), in corpus order."""
    return (doc for _, doc in iter_keyed_documents(cfg, process_index, process_count))


def iter_keyed_documents(cfg: DataConfig, process_index: int = 0,
                         process_count: int = 1) -> Iterator[tuple[int, Document]]:
    """(key, document) pairs of ``iter_documents``; keys order the whole corpus independently of the number
    of processes (``ChunkLayout.documents``). Files are validated before anything is read."""
    check_process(process_index, process_count)
    layout = ChunkLayout(cfg)
    for f in layout.files:
        check_file(f)
    return (item for c in range(process_index, layout.num_chunks, process_count) for item in layout.documents(c))
