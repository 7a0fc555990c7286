"""The word vocabulary with counts (ptm_jax/data/word_vocab.py): deterministic vocab.tsv (count descending,
then UTF-8 bytes), exact counts, min_count / max_vocab, DataErrors naming file and line, and an exact round trip
of WikiText-2's tokenized text (its '<unk>' is the unk id) through the tokenizer and the token cache."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.data.word_vocab import VOCAB_FILE, WordVocab, build_word_vocab, read_vocab_tsv
from ptm_jax.errors import DataError

TEXT = ["z a é b", "a b b é", "<unk> z a", "c"]  # a:3 b:3 z:2 é:2 c:1, one literal <unk>


def test_vocab_tsv_orders_by_count_then_utf8_bytes_and_counts_exactly(tmp_path):
    vocab = build_word_vocab(TEXT, tmp_path)
    lines = (tmp_path / VOCAB_FILE).read_text(encoding="utf-8").splitlines()
    # ties: 'a' < 'b' and 'z' (0x7a) < 'é' (0xc3 0xa9) by UTF-8 bytes
    assert lines == ["<pad>\t0", "<unk>\t1", "<eos>\t0", "a\t3", "b\t3", "z\t2", "é\t2", "c\t1"]
    assert (vocab.vocab_size, vocab.pad_id, vocab.unk_id, vocab.eos_id) == (8, 0, 1, 2)
    assert vocab.encode_batch(["a é c unseen <unk>"]) == [[3, 6, 7, 1, 1]]
    assert vocab.counts.tolist() == [0, 1, 0, 3, 3, 2, 2, 1]


def test_same_corpus_in_any_line_order_and_hash_seed_gives_a_byte_identical_file(tmp_path, shared_data):
    lines = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()
    build_word_vocab(lines, tmp_path / "a", min_count=2, lower_case=True)
    shuffled = lines[:]
    random.Random(0).shuffle(shuffled)
    build_word_vocab(shuffled, tmp_path / "b", min_count=2, lower_case=True)
    script = ("import sys; from ptm_jax.data.word_vocab import build_word_vocab; "
              "build_word_vocab(open(sys.argv[1], encoding='utf-8'), sys.argv[2], min_count=2, lower_case=True)")
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", script, str(shared_data / "corpus/tinyshakespeare/input.txt"),
                        str(tmp_path / seed)], check=True, env={**os.environ, "PYTHONHASHSEED": seed})
    first = (tmp_path / "a" / VOCAB_FILE).read_bytes()
    assert len(first.splitlines()) > 5000
    for d in ("b", "1", "2"):
        assert (tmp_path / d / VOCAB_FILE).read_bytes() == first, d


def test_min_count_and_max_vocab_cut_words_into_the_unk_count(tmp_path):
    vocab = build_word_vocab(TEXT, tmp_path / "min", min_count=2)
    assert [vocab.id_to_token(i) for i in range(vocab.vocab_size)] == ["<pad>", "<unk>", "<eos>", "a", "b", "z", "é"]
    assert vocab.counts[vocab.unk_id] == 2  # the literal <unk> and 'c'
    vocab = build_word_vocab(TEXT, tmp_path / "max", max_vocab=5)
    assert [vocab.id_to_token(i) for i in range(3, 5)] == ["a", "b"]
    assert vocab.counts[vocab.unk_id] == 1 + 2 + 2 + 1  # <unk>, z, é, c
    assert vocab.counts.sum() == sum(len(t.split()) for t in TEXT)
    with pytest.raises(DataError, match="min_count=9"):
        build_word_vocab(TEXT, tmp_path / "none", min_count=9)


@pytest.mark.parametrize("body, line, message", [
    ("<pad>\t0\n<unk>\t0\n<eos>\t0\nthe 5\n", 4, "expected 'word<TAB>count'"),
    ("<pad>\t0\n<unk>\t0\n<eos>\t0\nthe\t5\nof\t4\nthe\t3\n", 6, "duplicate word 'the' \\(first on line 4\\)"),
    ("<pad>\t0\n<unk>\t0\n<eos>\t0\nthe\t-5\n", 4, "negative"),
    ("<pad>\t0\n<unk>\t0\n<eos>\t0\nthe\tfive\n", 4, "not an integer"),
    ("<pad>\t0\nthe\t5\n", 2, "expected the special '<unk>'"),
])
def test_malformed_vocab_tsv_is_a_data_error_naming_file_and_line(tmp_path, body, line, message):
    path = tmp_path / VOCAB_FILE
    path.write_text(body, encoding="utf-8")
    with pytest.raises(DataError, match=f"{path}:{line}: .*{message}"):
        read_vocab_tsv(path)


def test_wikitext2_round_trips_through_the_tokenizer_and_the_token_cache(tmp_path, shared_data):
    path = shared_data / "corpus/wikitext-2-tokenized/valid.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    vocab = build_word_vocab(lines, tmp_path)
    words = [w for line in lines for w in line.split()]
    assert vocab.counts.sum() == len(words) == 213886  # wc -w valid.txt
    assert vocab.token_to_id("<unk>") == vocab.unk_id and vocab.counts[vocab.unk_id] == words.count("<unk>") > 0
    ids = vocab.encode_batch(lines)
    assert [vocab.decode(i) for i in ids] == [" ".join(line.split()) for line in lines]
    assert WordVocab(tmp_path / VOCAB_FILE).fingerprint() == vocab.fingerprint()
    cache = build_or_load_cache(DataConfig(corpus=str(path), format="lines"), vocab, tmp_path / "cache")
    assert cache.num_tokens == len(words)
    flat = np.concatenate([cache.doc_tokens(d) for d in range(cache.num_docs)])
    assert flat.tolist() == [t for i in ids for t in i]


def test_load_tokenizer_kind_word_builds_vocab_tsv_once_and_reuses_it(tmp_path):
    from ptm_jax.config import TokenizerConfig
    from ptm_jax.data.tokenizer_loading import load_tokenizer

    cfg = TokenizerConfig(kind="word", vocab_size=6, lower_case=True)
    tok = load_tokenizer(cfg, lambda: ["Z a é b", "a B b é"], tmp_path)
    assert isinstance(tok, WordVocab) and tok.kind == "word" and tok.vocab_size == 6
    assert (tmp_path / "tokenizer" / VOCAB_FILE).read_text(encoding="utf-8").splitlines()[3:] == ["b\t3", "a\t2",
                                                                                                 "é\t2"]
    again = load_tokenizer(cfg, None, tmp_path)  # no corpus needed: the vocabulary of these settings is there
    assert again.fingerprint() == tok.fingerprint() and again.encode("A z") == [4, 1]
