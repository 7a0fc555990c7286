"""Objectives declare their data: ``train/stages.py:prepare_corpus`` checks the tokenizer kind
a family reads (``Pretraining.tokenizer_kinds``), puts only the specials it declares into ``Corpus.special``
(``Pretraining.specials``), and builds each of its ``Pretraining.artifacts`` once beside the token cache, handing the
values
to the objective builder in ``Corpus.artifacts``. ``tokenizer.min_count`` cuts a trained word vocabulary.

The corpus: the first 400 lines of WikiText-2's tokenized validation split (../shared/data)."""
import io

import numpy as np
import pytest

from ptm_jax import fs
from ptm_jax.config import DataConfig, RunConfig, TokenizerConfig
from ptm_jax.data.tokenizer_loading import load_tokenizer
from ptm_jax.data.word_vocab import count_words
from ptm_jax.errors import ConfigError
from ptm_jax.families import registry
from ptm_jax.models.config import TransformerConfig
from ptm_jax.parallel.distributed import barrier
from ptm_jax.train.stages import prepare_corpus

CALLS: list[str] = []


def unigram_counts(cfg, corpus, directory):
    """A real artifact builder: token counts of the training documents, computed once into ``counts.npy``."""
    target = directory / "counts.npy"
    if not fs.exists(target):
        CALLS.append(str(directory))
        counts = np.zeros(corpus.tokenizer.vocab_size, np.int64)
        for d in range(corpus.train.num_docs):
            counts += np.bincount(corpus.train.doc_tokens(d), minlength=len(counts))
        buf = io.BytesIO()
        np.save(buf, counts)
        fs.makedirs(directory)
        fs.write_bytes_atomic(target, buf.getvalue())
    barrier("unigram_counts")
    return np.load(io.BytesIO(fs.read_bytes(target)))


@pytest.fixture(scope="module")
def probe_family():
    """A family registered for this module only: word vocabulary, <pad> and <eos>, one artifact."""
    fam = registry.register(registry.Family(
        name="probe", model_config=TransformerConfig, pretraining=registry.Pretraining(
            objectives={"probe_lm": lambda cfg, corpus: None}, tokenizer_kinds=("word",), specials=("pad", "eos"),
            artifacts={"unigram": unigram_counts})))
    yield fam
    registry.unregister("probe")


@pytest.fixture(scope="module")
def lines_file(shared_data, tmp_path_factory):
    text = (shared_data / "corpus/wikitext-2-tokenized/valid.txt").read_text(encoding="utf-8").splitlines()[:400]
    path = tmp_path_factory.mktemp("family_data") / "valid400.txt"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def probe_config(lines_file, out, **tok) -> RunConfig:
    return RunConfig(output_dir=str(out), objective="probe_lm",
                     model=TransformerConfig(family="probe", vocab_size=5000),
                     tokenizer=TokenizerConfig(kind="word", vocab_size=5000, **tok),
                     data=DataConfig(corpus=str(lines_file), format="lines", eval_documents=2))


def test_declared_specials_and_an_artifact_built_once_beside_the_cache(probe_family, lines_file, tmp_path):
    CALLS.clear()
    cfg = probe_config(lines_file, tmp_path / "run")
    corpus = prepare_corpus(cfg)
    tok = corpus.tokenizer
    assert (corpus.special.pad, corpus.special.eos) == (tok.pad_id, tok.eos_id) == (0, 2)
    assert (corpus.special.cls, corpus.special.sep, corpus.special.mask) == (None, None, None)
    want = np.zeros(tok.vocab_size, np.int64)
    for d in range(corpus.cache.num_docs - 2):  # the last 2 documents are held out
        for tid in corpus.cache.doc_tokens(d):
            want[tid] += 1
    counts = corpus.artifacts["unigram"]
    np.testing.assert_array_equal(counts, want)
    assert counts.sum() > 5000 and counts[tok.unk_id] > 0
    assert CALLS == [str(tmp_path / "run" / "cache" / "artifacts" / "unigram")]
    again = prepare_corpus(cfg)  # the cached value is read back, not recomputed
    np.testing.assert_array_equal(again.artifacts["unigram"], want)
    assert len(CALLS) == 1


def test_a_tokenizer_kind_the_family_does_not_read_is_a_config_error(probe_family, lines_file, tmp_path):
    cfg = probe_config(lines_file, tmp_path / "run")
    cfg.tokenizer.kind = "wordpiece"
    with pytest.raises(ConfigError, match=r"tokenizer.kind='wordpiece'.*'probe'.*'word'"):
        prepare_corpus(cfg)
    assert not (tmp_path / "run").exists()  # refused before any tokenizer is trained
    cfg.objective = "mlm_nsp"  # BERT reads the subword kinds only
    cfg.tokenizer.kind = "word"
    with pytest.raises(ConfigError, match=r"tokenizer.kind='word'.*'wordpiece'"):
        prepare_corpus(cfg)


def test_min_count_cuts_the_trained_word_vocabulary(lines_file, tmp_path):
    lines = lines_file.read_text(encoding="utf-8").splitlines()
    counts = count_words(lines)
    vocabs = {}
    for min_count in (1, 3):
        cfg = TokenizerConfig(kind="word", vocab_size=100_000, min_count=min_count, lower_case=False)
        vocabs[min_count] = load_tokenizer(cfg, lambda: lines, tmp_path)  # the same out dir: retrained
    words = {m: set(v._tokens[3:]) for m, v in vocabs.items()}
    assert words[1] == set(counts) - {"<unk>"}
    assert words[3] == {w for w, c in counts.items() if c >= 3} - {"<unk>"}
    assert 0 < len(words[3]) < len(words[1])
    rare = sum(c for w, c in counts.items() if c < 3)
    assert vocabs[3].counts[vocabs[3].unk_id] == rare + counts.get("<unk>", 0)
