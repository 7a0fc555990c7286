"""The machine's cache of trained tokenizers (ptm_jax/data/tokenizer_cache.py): a run with another output folder on the
same sample and settings copies the files an earlier run trained, byte for byte; another sample, another setting, an
entry missing a file or the cache turned off trains."""
import logging

import pytest

from ptm_jax.config import TokenizerConfig
from ptm_jax.data import tokenizer_cache
from ptm_jax.data.tokenizer_loading import load_tokenizer

KINDS = {"wordpiece": ["vocab.txt"], "byte_bpe": ["vocab.json", "merges.txt"],
         "sentencepiece_unigram": ["spm.model", "spm.vocab"], "word": ["vocab.tsv"]}


@pytest.fixture(scope="module")
def lines(shared_data):
    return (shared_data / "corpus" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8").splitlines()[:4000]


def _load(kind, lines, out, caplog, vocab_size=600):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ptm_jax"):
        tok = load_tokenizer(TokenizerConfig(kind=kind, vocab_size=vocab_size), lambda: iter(lines), out,
                             corpus_key=str(out))
    said = [m for m in caplog.messages if m.startswith("tokenizer: ")]
    assert len(said) == 1, caplog.messages
    return tok, said[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_second_output_folder_copies_the_files_trained_from_the_same_sample(kind, lines, tmp_path, monkeypatch,
                                                                              caplog):
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", str(tmp_path / "cache"))
    first, said = _load(kind, lines, tmp_path / "a", caplog)
    assert " trained on a sample " in said
    entries = [p for p in (tmp_path / "cache").iterdir()]
    assert len(entries) == 1 and sorted(p.name for p in entries[0].iterdir()) == sorted(KINDS[kind])
    second, said = _load(kind, lines, tmp_path / "b", caplog)
    assert " trained before on the same sample " in said and str(entries[0]) in said
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", "off")
    fresh, said = _load(kind, lines, tmp_path / "c", caplog)
    assert " trained on a sample " in said
    for name in KINDS[kind]:  # the copy is what training writes
        trained = (tmp_path / "a" / "tokenizer" / name).read_bytes()
        assert (tmp_path / "b" / "tokenizer" / name).read_bytes() == trained
        assert (tmp_path / "c" / "tokenizer" / name).read_bytes() == trained
    assert first.fingerprint() == second.fingerprint() == fresh.fingerprint()
    text = next(line for line in lines[100:] if len(line) > 40)
    assert second.encode(text) == fresh.encode(text) and len(fresh.encode(text)) > 5


def test_another_sample_or_setting_trains_and_keeps_an_entry_of_its_own(lines, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", str(tmp_path / "cache"))
    base, _ = _load("wordpiece", lines, tmp_path / "a", caplog)
    other_sample, said = _load("wordpiece", lines[:3999], tmp_path / "b", caplog)
    assert " trained on a sample " in said
    other_size, said = _load("wordpiece", lines, tmp_path / "c", caplog, vocab_size=700)
    assert " trained on a sample " in said and other_size.vocab_size == 700 and base.vocab_size == 600
    assert len(list((tmp_path / "cache").iterdir())) == 3


def test_an_entry_missing_a_file_trains_again_and_is_replaced(lines, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", str(tmp_path / "cache"))
    _load("byte_bpe", lines, tmp_path / "a", caplog)
    (entry,) = (tmp_path / "cache").iterdir()
    (entry / "merges.txt").unlink()
    _, said = _load("byte_bpe", lines, tmp_path / "b", caplog)
    assert " trained on a sample " in said
    assert sorted(p.name for p in entry.iterdir()) == ["merges.txt", "vocab.json"]
    _, said = _load("byte_bpe", lines, tmp_path / "c", caplog)
    assert " trained before on the same sample " in said


def test_off_neither_reads_nor_writes_the_cache(lines, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", "off")
    assert tokenizer_cache.root() is None
    for out in ("a", "b"):
        _, said = _load("word", lines, tmp_path / out, caplog)
        assert " trained on a sample " in said
    assert not (tmp_path / "cache").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
