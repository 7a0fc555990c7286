"""Corpus reading: file resolution, byte-range chunks and tokenizer samples, lines/paragraphs/auto formats,
sentence splitting, bad-input errors (file + line in the message), TFDS record conversion (in-memory tf.data)
and the embedded corpus."""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from ptm_jax.config import DataConfig
from ptm_jax.data.chunks import ChunkLayout, document_boundary
from ptm_jax.data.chunks import iter_documents, sample_sentences
from ptm_jax.data.corpus import (dataset_documents, detect_format, parse_tfds_spec, read_documents, record_to_document,
                                 resolve_files, split_sentences)
from ptm_jax.data.embedded import embedded_corpus_stats, embedded_documents
from ptm_jax.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parent.parent


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_resolve_files_dirs_globs_commas_sorted_deduped(tmp_path):
    for name in ("b.txt", "a.txt", "sub/c.txt", "sub/d.md"):
        write(tmp_path / name, "x\n")
    got = resolve_files(f"{tmp_path}/sub/c.txt, {tmp_path}, {tmp_path}/*.txt")
    assert got == [tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "sub/c.txt"]
    assert resolve_files(f"{tmp_path}/**/*.md") == [tmp_path / "sub/d.md"]
    with pytest.raises(DataError, match=r"corpus '.*/nope\*\.txt': no such file"):
        resolve_files(f"{tmp_path}/a.txt,{tmp_path}/nope*.txt")
    with pytest.raises(DataError, match="missing.txt"):
        resolve_files(str(tmp_path / "missing.txt"))


def test_chunk_layout_cuts_at_blank_lines_and_partitions_every_byte(shared_data):
    """The 12 books (11 MB) in 1 MB chunks: the cuts tile the corpus exactly, each lies just after a blank
    line (or at a file start or a Gutenberg file's end), and they do not depend on any process count."""
    cfg = DataConfig(corpus=str(shared_data / "corpus/gutenberg/[0-9]*.txt"), cache_chunk_bytes=1_000_000)
    layout = ChunkLayout(cfg)
    assert layout.num_chunks == 12 and layout.total_bytes == sum(f.stat().st_size for f in layout.files)
    covered = [(p.file, p.start, p.end) for c in range(layout.num_chunks) for p in layout.pieces(c)]
    for f, size in enumerate(layout.sizes):  # every byte of every file in exactly one piece, in order
        ranges = [(a, b) for g, a, b in covered if g == f]
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(b == a2 for (_, b), (a2, _) in zip(ranges, ranges[1:]))
    for c in range(1, layout.num_chunks):
        first = layout.pieces(c)[0] if layout.pieces(c) else None
        if first is not None and first.start:
            head = layout.files[first.file].read_bytes()[: first.start]
            assert head.endswith(b"\n\n") or head.endswith(b"\r\n\r\n"), (c, head[-20:])
    assert [ChunkLayout(cfg).cut(c) for c in range(13)] == [layout.cut(c) for c in range(13)]
    with pytest.raises(ConfigError, match="process_index=2"):
        list(iter_documents(cfg, 2, 2))


def test_document_boundary_rules(tmp_path):
    f = write(tmp_path / "a.txt", "Aaa.\nBbb.\n\nCcc.\nDdd.\nEee.\n\nFff.\n")
    size = f.stat().st_size
    assert document_boundary(f, 0, size, 100, 1000) == 0
    assert document_boundary(f, 2, size, 100, 1000) == len("Aaa.\nBbb.\n\n")  # after the blank line
    assert document_boundary(f, 10, size, 100, 1000) == 11  # a blank line starting right there
    assert document_boundary(f, 11, size, 100, 1000) == len("Aaa.\nBbb.\n\nCcc.\nDdd.\nEee.\n\n")
    assert document_boundary(f, 12, size, 3, 1000) == len("Aaa.\nBbb.\n\nCcc.\n")  # no blank line near: a line
    assert document_boundary(f, size - 1, size, 100, 1000) == size


def test_tokenizer_sample_is_bounded_spread_and_deterministic(shared_data):
    cfg = DataConfig(corpus=str(shared_data / "corpus/gutenberg/[0-9]*.txt"))
    sample = list(sample_sentences(cfg, 500_000, window_bytes=100_000))
    size = sum(len(s.encode()) for s in sample)
    assert 350_000 < size < 600_000
    assert sample == list(sample_sentences(cfg, 500_000, window_bytes=100_000))
    # windows spread over the corpus: sentences of the first and of the last book are in it
    first, last = (list(read_documents(f, doc_max_sentences=256)) for f in ChunkLayout(cfg).files[::11])
    book = lambda docs: {s for d in docs for s in d}  # noqa: E731
    assert book(first) & set(sample) and book(last) & set(sample)
    # a corpus within the budget is read whole, in order
    small = DataConfig(corpus=str(shared_data / "corpus/tinyshakespeare/input.txt"), format="lines")
    assert list(sample_sentences(small, 2_000_000)) == [s for d in iter_documents(small) for s in d]


def test_lines_format_blank_lines_separate_documents(tmp_path):
    f = write(tmp_path / "bert.txt", "\ufeffFirst sentence.\r\nSecond one.\r\n\r\n\r\n  \nThird.\n\t\n\nFourth.\nFifth")
    docs = list(read_documents(f, "lines"))
    assert docs == [["First sentence.", "Second one."], ["Third."], ["Fourth.", "Fifth"]]
    assert detect_format(f) == "lines"


def test_paragraphs_format_joins_lines_and_cuts_documents_at_paragraphs(tmp_path):
    para = "Mr. Holmes sat down. He lit\na pipe, slowly. Then he\nspoke: \"Come, Watson!\"\n"
    f = write(tmp_path / "prose.txt", "\n".join([para] * 5))
    assert detect_format(f) == "paragraphs"
    docs = list(read_documents(f, "paragraphs", doc_max_sentences=5))
    assert [len(d) for d in docs] == [6, 6, 3]
    assert docs[0][:3] == ["Mr. Holmes sat down.", "He lit a pipe, slowly.", 'Then he spoke: "Come, Watson!"']


def test_gutenberg_header_and_footer_are_stripped(tmp_path):
    text = ("The Project Gutenberg eBook of Tests\n\nThis eBook is for the use of anyone.\n\n"
            "*** START OF THE PROJECT GUTENBERG EBOOK TESTS ***\n\nCHAPTER I.\n\nIt was a dark night. The end.\n\n"
            "*** END OF THE PROJECT GUTENBERG EBOOK TESTS ***\n\nSection 1. General Terms of Use.\n")
    f = write(tmp_path / "pg.txt", text)
    assert detect_format(f) == "paragraphs"
    assert list(read_documents(f)) == [["CHAPTER I.", "It was a dark night.", "The end."]]


def test_auto_format_on_real_files(shared_data, tmp_path):
    gut = shared_data / "corpus/gutenberg"
    assert detect_format(gut / "2701-0.txt") == "paragraphs"  # has a START marker
    assert detect_format(gut / "1342-0.txt") == "paragraphs"  # wrapped prose, no marker
    assert detect_format(shared_data / "corpus/wikitext-2-tokenized/valid.txt") == "paragraphs"
    lines = [ln.split("\t")[0] for ln in (shared_data / "glue/SST-2/dev.tsv").read_text().splitlines()[1:200]]
    sst = write(tmp_path / "sst.txt", "\n".join(s.strip() for s in lines) + "\n")
    assert detect_format(sst) == "lines"
    docs = list(read_documents(gut / "2701-0.txt", "auto", doc_max_sentences=256))
    first, last = docs[0], docs[-1]
    assert "MOBY-DICK;" in first[0] and not any("Gutenberg" in s for s in last[-3:])
    assert sum(map(len, docs)) > 8000 and all(len(d) >= 256 for d in docs[:-1])


def test_split_sentences_handles_abbreviations_decimals_quotes():
    text = ('Mr. Smith paid $3.50 to Dr. J. R. Watson, e.g. for tea. "Stop!" he cried. "Why?" she asked; '
            'it was No. 5 on p. 12 of the U.S. list... Really? Yes. (See Fig. 3.) Done')
    assert split_sentences(text) == [
        "Mr. Smith paid $3.50 to Dr. J. R. Watson, e.g. for tea.", '"Stop!" he cried.',
        '"Why?" she asked; it was No. 5 on p. 12 of the U.S. list...', "Really?", "Yes.", "(See Fig. 3.)", "Done"]
    assert split_sentences("  ") == [] and split_sentences("One\n two.  Three") == ["One two.", "Three"]
    assert split_sentences("Pi is 3.14. It is irrational.") == ["Pi is 3.14.", "It is irrational."]


def test_split_sentences_cuts_chinese_and_japanese_prose_at_full_width_stops_with_no_space():
    assert split_sentences("我喜欢这本书。它很好看！你呢？“好。”他说。价格是3.5元") == [
        "我喜欢这本书。", "它很好看！", "你呢？", "“好。”", "他说。", "价格是3.5元"]
    assert split_sentences("「行こう。」と彼は言った。 Then Mr. Smith left.") == [
        "「行こう。」", "と彼は言った。", "Then Mr. Smith left."]
    assert split_sentences("好。") == ["好。"] and split_sentences("是吗？！真的") == ["是吗？！", "真的"]


def test_a_chinese_file_of_one_paragraph_per_line_reads_as_paragraphs_of_sentences(tmp_path):
    f = write(tmp_path / "zh.txt", "这家酒店很干净。服务也好！下次还来。\n\n房间太小了。早餐一般。\n".encode())
    assert detect_format(f) == "paragraphs"
    assert list(read_documents(f)) == [["这家酒店很干净。", "服务也好！", "下次还来。", "房间太小了。", "早餐一般。"]]


@pytest.mark.parametrize("fmt", ["lines", "paragraphs", "auto"])
def test_non_utf8_names_file_line_and_byte(tmp_path, fmt):
    f = write(tmp_path / "latin.txt", b"Fine line.\nAlso fine.\nCaf\xe9 au lait.\nMore.\n")
    with pytest.raises(DataError) as e:
        list(read_documents(f, fmt))
    msg = str(e.value)
    assert "latin.txt:3: not valid UTF-8" in msg and "byte 0xe9 at byte 3 of the line" in msg
    assert "file offset 25" in msg and "iconv -f latin1 -t utf-8" in msg


@pytest.mark.parametrize("content,expected", [
    (b"", "empty.txt: file is empty"),
    (b" \n\n\t\n", "empty.txt: file is empty"),
    (b"text\n\x00\x01\x02binary", "empty.txt:2: binary file (NUL byte at offset 5)"),
])
def test_empty_and_binary_files(tmp_path, content, expected):
    f = write(tmp_path / "empty.txt", content)
    with pytest.raises(DataError, match=re.escape(expected)):
        list(read_documents(f))


def test_large_whitespace_file_fails_after_reading(tmp_path):
    f = write(tmp_path / "blank.txt", b"\n" * 20000)
    with pytest.raises(DataError, match="blank.txt: file has no text"):
        list(read_documents(f))


def _bytes_read_by_this_thread() -> int:
    """The kernel's count of bytes this thread has read (Linux /proc/thread-self/io, rchar)."""
    with open("/proc/thread-self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_ten_megabyte_single_line_fails_after_reading_about_max_line_bytes(tmp_path):
    f = write(tmp_path / "oneline.txt", b"word " * (2 * 1024 * 1024))
    before = _bytes_read_by_this_thread()
    with pytest.raises(DataError) as e:
        list(read_documents(f, "auto", max_line_bytes=1_000_000))
    # refused after the line's first 1,000,001 bytes (+ the 72 KiB sniffed from the head), not after all 10 MB
    assert _bytes_read_by_this_thread() - before < 1_200_000
    assert "oneline.txt:1: line is longer than data.max_line_bytes=1000000" in str(e.value)
    f2 = write(tmp_path / "third.txt", b"a.\nb.\n" + b"x" * 101 + b"\n")
    with pytest.raises(DataError, match="third.txt:3: line is longer"):
        list(read_documents(f2, "lines", max_line_bytes=100))
    assert list(read_documents(write(tmp_path / "ok.txt", b"x" * 100 + b"\n"), "lines", max_line_bytes=100))


def test_missing_path_is_named(tmp_path):
    with pytest.raises(DataError, match="absent.txt: no such file"):
        list(read_documents(tmp_path / "absent.txt"))
    with pytest.raises(DataError, match="absent"):
        list(iter_documents(DataConfig(corpus=str(tmp_path / "absent*.txt"))))


def test_iter_documents_over_files_splits_by_chunks(tmp_path):
    for i in range(5):
        write(tmp_path / f"f{i}.txt", f"Doc {i} a.\nDoc {i} b.\n\nDoc {i} c.\n")
    cfg = DataConfig(corpus=str(tmp_path), format="lines", cache_chunk_bytes=28)
    everything = list(iter_documents(cfg))
    assert len(everything) == 10 and everything[0] == ["Doc 0 a.", "Doc 0 b."]
    assert ChunkLayout(cfg).num_chunks == 5  # 5 files of 28 bytes: a chunk is a file
    shares = [list(iter_documents(cfg, i, 2)) for i in range(2)]
    assert shares[0][0] == ["Doc 0 a.", "Doc 0 b."] and shares[1][0] == ["Doc 1 a.", "Doc 1 b."]
    assert sorted(map(tuple, shares[0] + shares[1])) == sorted(map(tuple, everything))


def test_tfds_spec_parsing():
    assert parse_tfds_spec("tfds:wikipedia/20230601.en") == ("wikipedia/20230601.en", "train")
    assert parse_tfds_spec("tfds:c4/en:validation[:1%]") == ("c4/en", "validation[:1%]")
    with pytest.raises(ConfigError, match="missing dataset name"):
        parse_tfds_spec("tfds::train")


def test_tfds_records_to_documents_by_host():
    texts = [f"Title {i}\n\nFirst sentence of record {i}. Second one,\nwrapped.\n\nNew paragraph {i}." for i in range(7)]
    ds = tf.data.Dataset.from_tensor_slices({"text": texts, "title": [f"t{i}" for i in range(7)]})
    docs = list(dataset_documents(ds))
    assert len(docs) == 7
    assert docs[3] == ["Title 3", "First sentence of record 3.", "Second one, wrapped.", "New paragraph 3."]
    assert record_to_document(texts[3].encode()) == docs[3]
    shares = [list(dataset_documents(ds, None, i, 3)) for i in range(3)]
    assert [len(s) for s in shares] == [3, 2, 2] and shares[1][0] == docs[1] and shares[2][1] == docs[5]
    two_strings = tf.data.Dataset.from_tensor_slices({"body": texts, "title": texts})
    with pytest.raises(DataError, match="features: body, title"):
        list(dataset_documents(two_strings))
    assert list(dataset_documents(two_strings, "body")) == docs


@pytest.fixture
def fresh_embedded_cache(tmp_path, monkeypatch):
    """An empty embedded-corpus cache folder and no documents kept in this process."""
    from ptm_jax.data import embedded

    monkeypatch.setenv("PTM_EMBEDDED_CACHE", str(tmp_path / "embedded-cache"))
    monkeypatch.setattr(embedded, "_MEMO", {})
    return tmp_path / "embedded-cache"


def test_embedded_corpus_size_determinism_and_no_imports(capsys, fresh_embedded_cache, tmp_path):
    """The same text in this process and in a fresh one (other hash seed), both walking the standard library
    concurrently (each with an empty cache of its own)."""
    code = "import json; from ptm_jax.data.embedded import embedded_corpus_stats as s; print(json.dumps(s()))"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345",
           "PTM_EMBEDDED_CACHE": str(tmp_path / "other-cache")}
    other = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert "this" not in sys.modules and "antigravity" not in sys.modules
    stats = embedded_corpus_stats()
    assert stats["documents"] > 50 and stats["sentences"] > 2000 and stats["characters"] > 1_000_000
    assert stats["parse_failures"] == 0
    assert "this" not in sys.modules and "antigravity" not in sys.modules
    assert capsys.readouterr() == ("", "")
    out, _ = other.communicate(timeout=120)
    assert other.returncode == 0 and json.loads(out) == stats
    assert [p.suffix for p in fresh_embedded_cache.iterdir()] == [".jsonl"]
    assert list((tmp_path / "other-cache").iterdir())[0].name == next(fresh_embedded_cache.iterdir()).name


def test_embedded_cache_file_is_read_back_equal_and_a_changed_source_file_makes_a_new_one(
        fresh_embedded_cache, tmp_path, monkeypatch):
    """The documents come back from the cache file equal to a walk; the file really is what is read (a line
    written into it shows); a stdlib file with a new mtime, or an unreadable cache file, means a fresh walk."""
    from ptm_jax.data import embedded

    lib = tmp_path / "lib"
    (lib / "pkg").mkdir(parents=True)
    (lib / "a.py").write_text('"""Alpha is first. It has three sentences. This is the third."""\n')
    (lib / "pkg" / "b.py").write_text('"""Beta one. Beta two. Beta three."""\ndef f():\n    """Eff here."""\n')
    monkeypatch.setattr(embedded, "stdlib_root", lambda: lib)
    topics = list(embedded._topic_documents())
    walked = list(embedded.embedded_documents())
    assert walked[len(topics):] == [["Alpha is first.", "It has three sentences.", "This is the third."],
                                    ["Beta one.", "Beta two.", "Beta three.", "Eff here."]]
    path = embedded.cache_file()
    assert path.parent == fresh_embedded_cache and path.is_file()
    monkeypatch.setattr(embedded, "_MEMO", {})
    assert list(embedded.embedded_documents()) == walked
    with open(path, "a", encoding="utf-8") as f:  # the file, not a walk, is what a new process reads
        f.write(json.dumps(["Written into the cache."]) + "\n")
    monkeypatch.setattr(embedded, "_MEMO", {})
    assert list(embedded.embedded_documents())[-1] == ["Written into the cache."]
    st = (lib / "a.py").stat()
    (lib / "a.py").write_text('"""Alpha changed. Still three sentences. Yes indeed."""\n')
    os.utime(lib / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert embedded.cache_file() != path
    assert list(embedded.embedded_documents())[len(topics)][0] == "Alpha changed."
    new = embedded.cache_file()
    new.write_text("{not json\n")
    monkeypatch.setattr(embedded, "_MEMO", {})
    stats: dict = {}
    docs = list(embedded.embedded_documents(stats))
    assert docs[len(topics)][0] == "Alpha changed." and stats == {"parse_failures": 0, "short_modules": 0}
    assert json.loads(new.read_text().splitlines()[0]) == stats, "the unreadable file was written again"


def test_embedded_documents_are_one_chunk():
    first = list(itertools.islice(embedded_documents(), 120))
    assert first[0][0].startswith("The \"assert\" statement")
    cfg = DataConfig(corpus="embedded")  # one chunk, built by process 0
    assert list(itertools.islice(iter_documents(cfg, 0, 3), 120)) == first
    assert list(iter_documents(cfg, 1, 3)) == []
