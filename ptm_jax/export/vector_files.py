"""Static word vectors as files: word2vec.c's text and binary formats out, text vectors in.

Formats (``text_vectors`` and ``binary_vectors`` in ``ptm export --format``):

* **text** (word2vec.c ``-binary 0``): a header line ``<words> <dim>``, then one line per word:
  ``word v_1 ... v_dim``, single spaces. Written with 9 significant digits, so float32 values read back exactly.
* **binary** (word2vec.c ``-binary 1``): the same header line, then per word its UTF-8 bytes, one space, ``dim``
  little-endian float32 values and a newline (word2vec.c ``fwrite``s the floats and ``fprintf``s ``"\\n"``).
* **headerless text** (the GloVe C tool's ``vectors.txt``, Pennington et al. 2014): the word lines without the
  header; the dimension is that of the first line.

gensim's ``KeyedVectors.load_word2vec_format(path, binary=False|True)`` (gensim ``models/keyedvectors.py``) loads
both written formats (``tests/test_vector_files.py``). :func:`read_text_vectors` reads either text form (a first
line of two integers is a header), :func:`read_binary_vectors` the binary one and :func:`read_vectors` tells them
apart, so vectors trained elsewhere can be evaluated (``ptm eval-vectors FILE``) or initialise the embedding of
a later model (:func:`align_to_vocab`). A malformed file is a DataError naming the
file and line: a header that is not two positive integers or that disagrees with the rows, a row with another
number of values (ragged), a value that is not a number, a duplicate word. (gensim keeps the first of a
duplicate with a warning; a duplicate here means the file is not what its writer meant.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ptm_jax.errors import ConfigError, DataError

FORMATS = ("text_vectors", "binary_vectors")
"""``ptm export --format`` values this module writes."""


def _check_words(words: Sequence[str], vectors: np.ndarray, where: str) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise DataError(f"{where}: {len(words)} words but vectors of shape {vectors.shape}")
    for i, w in enumerate(words):
        if not w or any(ch.isspace() for ch in w):
            raise DataError(f"{where}: word {i} {w!r} is empty or holds whitespace; the word2vec formats separate "
                            "a word from its values by a space")
    return vectors


CHUNK_ROWS = 8192
"""Rows formatted and written at a time: a 3M x 300 table is never held as text in memory."""


def _atomic(path: Path, header: str, chunks) -> Path:
    """Writes the header line and the byte chunks to a temporary sibling, then renames it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(header.encode())
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_vectors(path, words: Sequence[str], vectors: np.ndarray) -> Path:
    """word2vec.c's text format (module doc), written atomically."""
    path = Path(path)
    vectors = _check_words(words, vectors, str(path))

    row = " ".join(["%.9g"] * vectors.shape[1]) + "\n"  # one %-format per row: 3-4x np.char.mod's speed

    def chunks():
        for start in range(0, len(words), CHUNK_ROWS):
            rows = vectors[start:start + CHUNK_ROWS].astype(np.float64).tolist()
            yield "".join(w + " " + row % tuple(r)
                          for w, r in zip(words[start:start + CHUNK_ROWS], rows)).encode("utf-8")

    return _atomic(path, f"{len(words)} {vectors.shape[1]}\n", chunks())


def write_binary_vectors(path, words: Sequence[str], vectors: np.ndarray) -> Path:
    """word2vec.c's binary format (module doc), written atomically."""
    path = Path(path)
    vectors = _check_words(words, vectors, str(path))

    def chunks():
        for start in range(0, len(words), CHUNK_ROWS):
            block = vectors[start:start + CHUNK_ROWS].astype("<f4")
            yield b"".join(w.encode("utf-8") + b" " + v.tobytes() + b"\n"
                           for w, v in zip(words[start:start + CHUNK_ROWS], block))

    return _atomic(path, f"{len(words)} {vectors.shape[1]}\n", chunks())


def write_vectors(path, words: Sequence[str], vectors: np.ndarray, fmt: str) -> Path:
    """``fmt``: 'text_vectors' or 'binary_vectors'."""
    if fmt == "text_vectors":
        return write_text_vectors(path, words, vectors)
    if fmt == "binary_vectors":
        return write_binary_vectors(path, words, vectors)
    raise ConfigError(f"vector file format {fmt!r}: expected one of {', '.join(FORMATS)}")


def _header(fields: list[str]) -> tuple[int, int] | None:
    if len(fields) == 2 and all(f.lstrip("+-").isdigit() for f in fields):
        return int(fields[0]), int(fields[1])
    return None


def _floats(rows: list[list[str]], words: list[str], first_line: int, where: Path) -> np.ndarray:
    """float32 [len(rows), dim] of a chunk of rows, or a DataError naming the first value that is no number."""
    try:
        return np.array(rows, dtype=np.float32)
    except ValueError:
        for i, r in enumerate(rows):
            for v in r:
                try:
                    float(v)
                except ValueError:
                    raise DataError(f"{where}:{first_line + i}: value {v[:40]!r} of {words[i]!r} is not a "
                                    "number") from None
        raise


def read_text_vectors(path) -> tuple[list[str], np.ndarray]:
    """(words in file order, float32 [n, dim]) from a text vector file with or without the word2vec header
    (module doc); every malformed line is a DataError naming the file and line. The file is read line by line
    and converted CHUNK_ROWS rows at a time, so only the float32 table is held whole."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: vector file not found")
    words: list[str] = []
    blocks: list[np.ndarray] = []
    seen: dict[str, int] = {}
    header, dim, expected = None, None, None
    chunk_rows: list[list[str]] = []
    chunk_start = 1
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{p}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the line); a "
                                "binary vector file? read_vectors / read_binary_vectors read word2vec.c's binary "
                                "format") from None
            fields = [x for x in line.strip(" \t\r\n").split(" ") if x]  # word2vec.c ends rows with a space
            if lineno == 1:
                header = _header(fields)
                if header is not None:
                    expected, dim = header
                    if expected < 1 or dim < 1:
                        raise DataError(f"{p}:1: header {line.strip()!r}: expected '<words> <dim>', both positive")
                    chunk_start = 2
                    continue
                if len(fields) == 2 and fields[0].lstrip("+-").isdigit():
                    raise DataError(f"{p}:1: header {line.strip()!r}: expected '<words> <dim>', two integers")
            if not fields:
                raise DataError(f"{p}:{lineno}: empty line; every line after the header is 'word v_1 ... v_dim'")
            if dim is None:
                dim = len(fields) - 1
                if dim < 1:
                    raise DataError(f"{p}:{lineno}: {fields[0]!r} has no values; expected 'word v_1 ... v_dim'")
            if len(fields) != dim + 1:
                raise DataError(f"{p}:{lineno}: {len(fields) - 1} values for {fields[0]!r}, expected {dim} (the "
                                f"{'header' if header else 'first line'}'s dimension): ragged rows")
            word = fields[0]
            if word in seen:
                raise DataError(f"{p}:{lineno}: duplicate word {word!r} (first on line {seen[word]}); every word "
                                "must appear once")
            seen[word] = lineno
            words.append(word)
            chunk_rows.append(fields[1:])
            if len(chunk_rows) == CHUNK_ROWS:
                blocks.append(_floats(chunk_rows, words[-len(chunk_rows):], chunk_start, p))
                chunk_start, chunk_rows = lineno + 1, []
    if chunk_rows:
        blocks.append(_floats(chunk_rows, words[-len(chunk_rows):], chunk_start, p))
    if not words:
        raise DataError(f"{p}: empty vector file" if header is None else f"{p}: header but no rows")
    if expected is not None and expected != len(words):
        raise DataError(f"{p}:1: header says {expected} words but the file holds {len(words)} rows; fix the header "
                        "or the file (truncated?)")
    return words, np.concatenate(blocks).reshape(len(words), dim)


def read_binary_vectors(path) -> tuple[list[str], np.ndarray]:
    """(words, float32 [n, dim]) from word2vec.c's binary format (module doc): the header line, then per word
    its bytes up to a space and ``dim`` little-endian float32 values (the newline after them optional, as in
    word2vec.c's reader). A bad header, a truncated file or a duplicate word is a DataError naming the word."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: vector file not found")
    data = p.read_bytes()
    end = data.find(b"\n")
    header = _header(data[:end].decode("utf-8", "replace").split()) if end > 0 else None
    if header is None or header[0] < 1 or header[1] < 1:
        raise DataError(f"{p}:1: header {data[:max(end, 0)][:40]!r}: expected '<words> <dim>', two positive "
                        "integers, then the binary rows (word2vec.c -binary 1)")
    n, dim = header
    pos, words, rows, seen = end + 1, [], [], {}
    for i in range(n):
        while pos < len(data) and data[pos:pos + 1] == b"\n":
            pos += 1
        space = data.find(b" ", pos)
        if space < 0 or space + 4 * dim > len(data):
            raise DataError(f"{p}: truncated at word {i + 1} of {n} (byte {pos}); the header promises {n} words "
                            f"of {dim} float32 values")
        try:
            word = data[pos:space].decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{p}: word {i + 1} (byte {pos}) is not UTF-8") from None
        if word in seen:
            raise DataError(f"{p}: duplicate word {word!r} (words {seen[word]} and {i + 1}); every word must appear "
                            "once")
        seen[word] = i + 1
        words.append(word)
        rows.append(np.frombuffer(data, "<f4", dim, space + 1))
        pos = space + 1 + 4 * dim
    if data[pos:].strip(b"\n"):
        raise DataError(f"{p}: {len(data) - pos} bytes after the {n} words the header promises; fix the header")
    return words, np.array(rows, dtype=np.float32).reshape(n, dim)


def read_vectors(path) -> tuple[list[str], np.ndarray]:
    """Either format: binary when the name ends in .bin or the file's first 64 KiB are not UTF-8 text."""
    import codecs

    p = Path(path)
    if p.suffix != ".bin" and p.is_file():
        with open(p, "rb") as f:
            head = f.read(1 << 16)  # the first rows; a sequence cut at the end is not an error (final=False)
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError:
            return read_binary_vectors(p)
        return read_text_vectors(p)
    return read_binary_vectors(p)


def align_to_vocab(words: Sequence[str], vectors: np.ndarray, vocab: Sequence[str], ignore_case: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``vectors`` for each entry of ``vocab`` (a later model's id order): ``(matrix [len(vocab), dim],
    found [len(vocab)] bool)``; rows not found are zero, for the caller to initialise its own way. With
    ``ignore_case`` a vocabulary word also takes the first file word equal to it case-insensitively."""
    vectors = np.asarray(vectors, dtype=np.float32)
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w, i)
    folded: dict[str, int] = {}
    if ignore_case:
        for i, w in enumerate(words):
            folded.setdefault(w.lower(), i)
    rows = np.array([index.get(w, folded.get(w.lower(), -1) if ignore_case else -1) for w in vocab], np.int64)
    found = rows >= 0
    out = np.zeros((len(vocab), vectors.shape[1]), np.float32)
    out[found] = vectors[rows[found]]
    return out, found


def vectors_for_vocab(path, tokenizer, rows: int, dim: int, field: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """A word2vec text/binary or GloVe text file (``read_vectors``) aligned to a later model's word vocabulary,
    to initialise its [rows, dim] embedding table: ``(matrix, found [rows] bool, report)``. Row i is the file's
    vector of ``tokenizer.id_to_token(i)``; specials and rows beyond the tokenizer take none. ``field`` names the
    config field holding ``path`` in errors. The report (also logged): the file, its words, and how many of the
    vocabulary's words it covers (``found``, ``coverage``)."""
    import logging

    p = Path(str(path))
    if not p.is_file():
        raise ConfigError(f"{field}={str(path)!r}: no such vector file; give a word2vec text/binary or GloVe text "
                          "file (ptm export --format text_vectors writes one)")
    words, vectors = read_vectors(p)
    if vectors.shape[1] != dim:
        raise ConfigError(f"{field}={str(path)!r}: the file's vectors have {vectors.shape[1]} dimensions but the "
                          f"model's embedding table has {dim}; set the model's dimension to {vectors.shape[1]} "
                          "or give a file of the table's size")
    special = set(tokenizer.special_ids())
    vocab = [tokenizer.id_to_token(i) if i < tokenizer.vocab_size and i not in special else "" for i in range(rows)]
    matrix, found = align_to_vocab(words, vectors, vocab)
    found &= np.array([bool(w) for w in vocab])
    wanted = sum(1 for w in vocab if w)
    report = {"file": str(p), "file_words": len(words), "dim": int(dim), "vocab_words": wanted,
              "found": int(found.sum()), "coverage": float(found.sum()) / max(wanted, 1)}
    logging.getLogger(__name__).info(
        "%s=%s: %d of the %d vocabulary words found (%.1f%%) among the file's %d; the others keep their fresh "
        "initialisation", field, p, report["found"], wanted, 100 * report["coverage"], len(words))
    return matrix, found, report


def with_initial_rows(params: dict, keys: Sequence[str], matrix: np.ndarray, found: np.ndarray) -> dict:
    """``params`` (boxed or not) with the table at ``params['params'][keys...]`` taking ``matrix``'s rows where
    ``found`` (the other rows keep their fresh initialisation); traceable (an objective's ``init``)."""
    import jax.numpy as jnp

    def put(tree, path):
        if not path:
            value = getattr(tree, "value", tree)
            new = jnp.where(jnp.asarray(found)[:, None], jnp.asarray(matrix, value.dtype), value)
            return tree.replace_boxed(new) if hasattr(tree, "replace_boxed") else new
        return {**tree, path[0]: put(tree[path[0]], path[1:])}

    return {**params, "params": put(params["params"], list(keys))}
