"""Static word vectors as files (ptm_jax/export/vector_files.py): word2vec.c's text and binary formats load in
gensim's KeyedVectors.load_word2vec_format with the same words and float32 values; text vectors with the header
or without it (GloVe's vectors.txt) read back; a wrong header, ragged rows, a non-numeric value or a duplicate
word is a DataError naming the file and line; read vectors align to a later model's vocabulary.

The words: the vocabulary of word2vec's analogy questions (../shared/data/word2vec/questions-words.txt) plus two
non-ASCII words, with seeded random vectors."""
import numpy as np
import pytest
from gensim.models import KeyedVectors

from ptm_jax.errors import DataError
from ptm_jax.export.vector_files import (align_to_vocab, read_binary_vectors, read_text_vectors, read_vectors,
                                         write_binary_vectors, write_text_vectors, write_vectors)

DIM = 7


@pytest.fixture(scope="module")
def words_and_vectors(shared_data):
    words = []
    for line in (shared_data / "word2vec/questions-words.txt").read_text(encoding="utf-8").splitlines():
        if not line.startswith(":"):
            words += line.split()
    words = list(dict.fromkeys(words)) + ["café", "naïve"]
    rng = np.random.default_rng(0)
    return words, (rng.standard_normal((len(words), DIM)) * np.logspace(-6, 3, DIM)).astype(np.float32)


@pytest.mark.parametrize("binary", [False, True])
def test_written_files_load_in_gensim_with_the_same_words_and_exact_vectors(tmp_path, words_and_vectors, binary,
                                                                           monkeypatch):
    from ptm_jax.export import vector_files

    monkeypatch.setattr(vector_files, "CHUNK_ROWS", 97)  # the rows go out in 10 chunks, the last one short
    words, vectors = words_and_vectors
    path = tmp_path / ("v.bin" if binary else "v.txt")
    write_vectors(path, words, vectors, "binary_vectors" if binary else "text_vectors")
    kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert len(words) > 900 and kv.index_to_key == words and kv.vector_size == DIM
    np.testing.assert_array_equal(kv.vectors, vectors)
    assert path.read_bytes().startswith(f"{len(words)} {DIM}\n".encode())


def test_text_vectors_read_back_with_header_without_header_and_from_gensim(tmp_path, words_and_vectors,
                                                                         monkeypatch):
    from ptm_jax.export import vector_files

    monkeypatch.setattr(vector_files, "CHUNK_ROWS", 97)
    words, vectors = words_and_vectors
    ours = write_text_vectors(tmp_path / "ours.txt", words, vectors)
    got_words, got = read_text_vectors(ours)
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)
    headerless = tmp_path / "glove.txt"  # GloVe's vectors.txt: the rows alone
    headerless.write_bytes(b"".join(ours.read_bytes().split(b"\n", 1)[1:]))
    got_words, got = read_text_vectors(headerless)
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)
    kv = KeyedVectors(DIM)
    kv.add_vectors(words[:50], vectors[:50])
    kv.save_word2vec_format(str(tmp_path / "gensim.txt"), binary=False)  # '%s %s' rows, gensim's precision
    got_words, got = read_text_vectors(tmp_path / "gensim.txt")
    assert got_words == words[:50]
    np.testing.assert_allclose(got, vectors[:50], rtol=1e-6)


def test_binary_vectors_read_back_ours_and_gensims(tmp_path, words_and_vectors):
    words, vectors = words_and_vectors
    ours = write_binary_vectors(tmp_path / "ours.bin", words, vectors)
    got_words, got = read_binary_vectors(ours)
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)
    kv = KeyedVectors(DIM)
    kv.add_vectors(words[:50], vectors[:50])
    kv.save_word2vec_format(str(tmp_path / "gensim.vec"), binary=True)  # no .bin suffix: told apart by content
    got_words, got = read_vectors(tmp_path / "gensim.vec")
    assert got_words == words[:50]
    np.testing.assert_array_equal(got, vectors[:50])
    data = ours.read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-30])
    with pytest.raises(DataError, match=f"cut.bin: truncated at word {len(words)} of {len(words)}"):
        read_vectors(tmp_path / "cut.bin")
    (tmp_path / "header.bin").write_bytes(b"12 x\n" + data.split(b"\n", 1)[1])
    with pytest.raises(DataError, match="header.bin:1: header b'12 x': expected '<words> <dim>'"):
        read_binary_vectors(tmp_path / "header.bin")
    (tmp_path / "dup.bin").write_bytes(b"2 1\nab \0\0\0\0\nab \0\0\0\0\n")
    with pytest.raises(DataError, match="duplicate word 'ab' \\(words 1 and 2\\)"):
        read_binary_vectors(tmp_path / "dup.bin")


BAD = {
    "header_count": ("3 2\na 1 2\nb 3 4\n", ":1: header says 3 words but the file holds 2 rows"),
    "header_not_integers": ("2 x2\na 1 2\nb 3 4\n", ":1: header '2 x2': expected '<words> <dim>', two integers"),
    "header_negative": ("-2 2\na 1 2\nb 3 4\n", ":1: header '-2 2': expected '<words> <dim>', both positive"),
    "header_dim": ("2 3\na 1 2\nb 3 4\n", ":2: 2 values for 'a', expected 3 (the header's dimension)"),
    "ragged": ("3 2\na 1 2\nb 3 4 5\nc 5 6\n", ":3: 3 values for 'b', expected 2"),
    "ragged_headerless": ("a 1 2\nb 3\n", ":2: 1 values for 'b', expected 2 (the first line's dimension)"),
    "not_a_number": ("4 2\na 1 2\nb 3 4\nc 5 6\nd 7 eight\n", ":5: value 'eight' of 'd' is not a number"),
    "binary": (b"2 2\na \xff\xfe\n", ":2: not UTF-8 text"),
    "duplicate": ("3 2\na 1 2\nb 3 4\na 5 6\n", ":4: duplicate word 'a' (first on line 2)"),
    "empty_line": ("2 2\na 1 2\n\nb 3 4\n", ":3: empty line"),
    "no_values": ("word\n", ":1: 'word' has no values"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_vector_file_is_a_data_error_naming_file_and_line(tmp_path, case, monkeypatch):
    from ptm_jax.export import vector_files

    monkeypatch.setattr(vector_files, "CHUNK_ROWS", 2)  # line numbers hold across the reader's chunks
    text, message = BAD[case]
    path = tmp_path / f"{case}.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(DataError) as e:
        read_text_vectors(path)
    assert f"{path}{message}" in str(e.value)


def test_writers_refuse_words_that_the_format_cannot_hold(tmp_path):
    with pytest.raises(DataError, match="word 1 'new york' is empty or holds whitespace"):
        write_binary_vectors(tmp_path / "v.bin", ["a", "new york"], np.zeros((2, 3)))
    with pytest.raises(DataError, match="2 words but vectors of shape \\(3, 3\\)"):
        write_text_vectors(tmp_path / "v.txt", ["a", "b"], np.zeros((3, 3)))


def test_read_vectors_align_to_a_later_models_vocabulary(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("3 2\nthe 1 2\nParis 3 4\ncat 5 6\n", encoding="utf-8")
    words, vectors = read_text_vectors(path)
    vocab = ["<pad>", "cat", "paris", "dog", "the"]
    matrix, found = align_to_vocab(words, vectors, vocab)
    assert found.tolist() == [False, True, False, False, True]
    np.testing.assert_array_equal(matrix, [[0, 0], [5, 6], [0, 0], [0, 0], [1, 2]])
    matrix, found = align_to_vocab(words, vectors, vocab, ignore_case=True)
    assert found.tolist() == [False, True, True, False, True]
    np.testing.assert_array_equal(matrix[2], [3, 4])
