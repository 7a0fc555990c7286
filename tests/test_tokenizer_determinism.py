"""Reproducible tokenizers: every trainer (WordPiece, byte-level BPE, SentencePiece unigram and BPE), run in two
fresh processes with different hash seeds on the same real text (a Gutenberg book), writes byte-identical files.

Before the fix, Hugging Face's WordPieceTrainer gave a different vocab.txt in each call (its '##c' ids follow a
randomly seeded hash map, and ties between equally frequent pairs are broken by id), and spm.model held the
temporary model path with the process id, and a unigram model trained with os.cpu_count() threads differs
between machines with different core counts, and SentencePiece's own sample of a corpus larger than
input_sentence_size differed between processes whatever its seed (the sampled model below: now a seeded
reservoir sample, tokenizers.sentence_sample)."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRAIN_ALL = """
import sys
from pathlib import Path
from ptm_jax.data.byte_bpe import train_byte_bpe
from ptm_jax.data.tokenizers import train_sentencepiece, train_wordpiece

book, out = Path(sys.argv[1]), Path(sys.argv[2])
lines = book.read_text(encoding="utf-8-sig").splitlines()
train_wordpiece(lines, 2000, out / "wordpiece")
train_byte_bpe(lines, 1000, out / "byte_bpe")
train_sentencepiece(lines, 1500, out / "unigram", "unigram")
train_sentencepiece(lines, 1500, out / "bpe", "bpe")
train_sentencepiece(lines, 1000, out / "unigram_sampled", "unigram", input_sentence_size=1500)
"""

FILES = ["wordpiece/vocab.txt", "byte_bpe/vocab.json", "byte_bpe/merges.txt", "unigram/spm.model",
         "unigram/spm.vocab", "bpe/spm.model", "bpe/spm.vocab", "unigram_sampled/spm.model"]


@pytest.fixture(scope="module")
def two_runs(shared_data, tmp_path_factory):
    book = shared_data / "corpus" / "gutenberg" / "11-0.txt"  # Alice's Adventures in Wonderland, 150 kB
    runs = []
    for seed in ("1", "2"):
        out = tmp_path_factory.mktemp(f"run{seed}")
        env = {**os.environ, "PYTHONHASHSEED": seed, "USE_TF": "0", "JAX_PLATFORMS": "cpu"}
        done = subprocess.run([sys.executable, "-c", TRAIN_ALL, str(book), str(out)], env=env, capture_output=True,
                              text=True, timeout=300, cwd=Path(__file__).resolve().parent.parent)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(out)
    return runs


@pytest.mark.parametrize("name", FILES)
def test_trainer_run_twice_in_fresh_processes_writes_byte_identical_files(two_runs, name):
    a, b = (run / name for run in two_runs)
    assert a.stat().st_size > 1000
    assert hashlib.sha256(a.read_bytes()).hexdigest() == hashlib.sha256(b.read_bytes()).hexdigest()


def test_trained_vocabularies_have_the_asked_size(two_runs):
    run = two_runs[0]
    assert len((run / "wordpiece/vocab.txt").read_text("utf-8").splitlines()) == 2000
    assert len((run / "unigram/spm.vocab").read_text("utf-8").splitlines()) == 1500
    assert b".spm-tmp" not in (run / "unigram/spm.model").read_bytes()  # no per-run path inside the model


def test_wordpiece_vocabulary_is_hugging_faces_trainer_up_to_its_tie_breaks(shared_data, two_runs):
    """The same algorithm as tokenizers' WordPieceTrainer: on the same book the vocabularies share >= 99% of their
    tokens (HF's own runs differ from each other in the tied merges: 'gryphon' here)."""
    from tokenizers import Tokenizer as HFTokenizer, models, trainers

    from ptm_jax.data.tokenizers import SPECIALS, bert_normalizer, bert_pre_tokenizer

    lines = (shared_data / "corpus" / "gutenberg" / "11-0.txt").read_text(encoding="utf-8-sig").splitlines()
    hf = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    hf.normalizer, hf.pre_tokenizer = bert_normalizer(True), bert_pre_tokenizer()
    hf.train_from_iterator([t for t in lines if t.strip()], trainer=trainers.WordPieceTrainer(
        vocab_size=2000, min_frequency=2, special_tokens=list(SPECIALS), limit_alphabet=1000,
        continuing_subword_prefix="##", show_progress=False))
    theirs = set(hf.get_vocab())
    ours = (two_runs[0] / "wordpiece/vocab.txt").read_text("utf-8").splitlines()
    assert len(theirs) == len(ours) == 2000
    assert len(theirs & set(ours)) >= 0.99 * 2000
    assert ours[:5] == list(SPECIALS)
