"""Flair (ptm_jax/families/flair): the character vocabulary, the two character LMs against PyTorch's nn.LSTM with
the same weights, a word's embedding at flair's offsets (and against flairNLP/flair's own FlairEmbeddings where
flair is installed: tests/flair_env.py), the objective's carried state, and the embeddings through the feature
heads' BiLSTM-CRF tagger."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.data.char_vocab import CharVocab, build_char_vocab, read_chars
from ptm_jax.errors import DataError
from ptm_jax.families.flair.config import FlairConfig
from ptm_jax.families.flair.features import offsets, word_features
from ptm_jax.families.flair.model import DIRECTIONS, FlairLanguageModels

TEXTS = ["EU rejects German call to boycott British lamb .", "Peter Blackburn", "BRUSSELS 1996-08-22",
         "The European Commission said on Thursday it disagreed with German advice to consumers to shun British "
         "lamb until scientists determine whether mad cow disease can be transmitted to sheep .", "hello"]
SENTENCES = [t.split() for t in TEXTS[:4]]


@pytest.fixture(scope="module")
def chars(tmp_path_factory) -> CharVocab:
    return build_char_vocab(TEXTS, tmp_path_factory.mktemp("chars"))


def test_char_vocab_orders_by_count_keeps_whitespace_and_rereads_the_same(chars, tmp_path):
    entries = read_chars(chars.path)
    assert [c for c, _ in entries[:4]] == ["<pad>", "<unk>", "<eos>", " "]  # the space is the commonest
    counts = [n for _, n in entries[3:]]
    assert counts == sorted(counts, reverse=True) and entries[1][1] == 0
    assert chars.encode("lamb") == [chars.token_to_id(c) for c in "lamb"] and chars.encode("λ") == [chars.unk_id]
    assert chars.decode([chars.eos_id] + chars.encode("EU ")) == "\nEU "
    capped = build_char_vocab(TEXTS, tmp_path / "capped", max_vocab=10)
    assert capped.vocab_size == 10 and read_chars(capped.path)[1][1] == sum(n for _, n in entries[10:])
    assert build_char_vocab(TEXTS, tmp_path / "again").path.read_bytes() == chars.path.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "ptm-char-vocab", "version": 1,
                               "entries": [["<pad>", 0], ["<unk>", 0], ["<eos>", 0], ["ab", 3]]}))
    with pytest.raises(DataError, match=r"bad.json: entry 3 is \['ab', 3\]"):
        CharVocab(bad)


def _model(chars: CharVocab, layers: int = 1, hidden: int = 12, **kw) -> tuple[FlairConfig, dict]:
    cfg = FlairConfig(vocab_size=chars.vocab_size, embed_dim=8, hidden_size=hidden, lstm_layers=layers, dropout=0.0,
                      **kw)
    ids = {d: jnp.zeros((1, 4), jnp.int32) for d in DIRECTIONS}
    params = FlairLanguageModels(cfg).init(jax.random.PRNGKey(3), ids, {d: ids[d] >= 0 for d in DIRECTIONS})
    return cfg, jax.tree.map(np.asarray, nn.meta.unbox(params))


def _torch_lm(weights: dict, cfg: FlairConfig):
    """PyTorch's Embedding -> LSTM -> Linear (flair's LanguageModel) with ptm_jax's weights."""
    import torch

    emb = torch.nn.Embedding(cfg.vocab_size, cfg.embed_dim)
    lstm = torch.nn.LSTM(cfg.embed_dim, cfg.hidden_size, cfg.lstm_layers)
    dec = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size)
    t = lambda x: torch.tensor(np.asarray(x))
    with torch.no_grad():
        emb.weight.copy_(t(weights["embedding"]))
        for i in range(cfg.lstm_layers):
            w = weights[f"lstm_{i}"]
            getattr(lstm, f"weight_ih_l{i}").copy_(t(w["kernel"]).T)
            getattr(lstm, f"weight_hh_l{i}").copy_(t(w["recurrent_kernel"]).T)
            getattr(lstm, f"bias_ih_l{i}").copy_(t(w["bias"]))
            getattr(lstm, f"bias_hh_l{i}").zero_()
        dec.weight.copy_(t(weights["decoder"]["kernel"]).T)
        dec.bias.copy_(t(weights["decoder"]["bias"]))

    def run(ids: np.ndarray):
        with torch.no_grad():
            h, _ = lstm(emb(torch.tensor(ids, dtype=torch.long)).transpose(0, 1))
            return h.transpose(0, 1).numpy(), dec(h).transpose(0, 1).numpy()

    return run


def _flair_offsets(words: list[str], forward: bool, with_whitespace: bool) -> list[int]:
    """flair's FlairEmbeddings offset walk (start marker of one character, tokenized_lm: one space per word)."""
    text = " ".join(words)
    off_f, off_b, out = 1, len(text) + 1, []
    for w in words:
        off_f += len(w)
        base = off_f if forward else off_b
        out.append(base if with_whitespace else base - 1)
        off_f, off_b = off_f + 1, off_b - 1 - len(w)
    return out


@pytest.mark.parametrize("layers", [1, 2])
def test_both_lms_equal_pytorch_lstm_and_words_read_at_flairs_offsets(chars, layers):
    cfg, params = _model(chars, layers)
    model = FlairLanguageModels(cfg)
    rows = [np.asarray([chars.eos_id] + chars.encode(t) + [chars.token_to_id(" ")], np.int32) for t in TEXTS[:3]]
    T = max(map(len, rows))
    ids = np.zeros((len(rows), T), np.int32)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    mask = ids != chars.pad_id
    out = model.apply(params, {d: jnp.asarray(ids) for d in DIRECTIONS}, {d: jnp.asarray(mask) for d in DIRECTIONS})
    for d in DIRECTIONS:
        want_h, want_logits = _torch_lm(params["params"]["flair"][d], cfg)(ids)
        m = mask[..., None]
        np.testing.assert_allclose(np.asarray(out[d][0]) * m, want_h * m, atol=1e-5)
        np.testing.assert_allclose(np.asarray(out[d][1]) * m, want_logits * m, atol=1e-5)
    for ws in (False, True):
        cfg_ws = FlairConfig(**{**cfg.__dict__, "with_whitespace": ws})
        feats = word_features(params, cfg_ws, chars, SENTENCES, batch_size=2)
        for words, got in zip(SENTENCES, feats):
            assert got.shape == (1, len(words), 2 * cfg.hidden_size)
            text = " ".join(words)
            parts = []
            for d, row_text in (("forward", text), ("backward", text[::-1])):
                row = np.asarray([[chars.eos_id] + chars.encode(row_text) + [chars.token_to_id(" ")]], np.int32)
                h, _ = _torch_lm(params["params"]["flair"][d], cfg)(row)
                parts.append(h[0, _flair_offsets(words, d == "forward", ws)])
            np.testing.assert_allclose(got[0], np.concatenate(parts, -1), atol=1e-5)
            assert list(offsets(words, ws)[0]) == _flair_offsets(words, True, ws)


def test_word_embeddings_equal_flairs_own_flair_embeddings(chars, tmp_path):
    from tests.flair_env import flair_python

    where = flair_python()
    if where is None:
        pytest.skip("flairNLP/flair is not installed in .venv/flair (tests/flair_env.py says how)")
    cfg, params = _model(chars)
    table = [c for c in chars._tokens]
    table[chars.eos_id] = "\n"  # flair's document delimiter is its start marker; ours is <eos>
    spec = {}
    for d in DIRECTIONS:
        w = params["params"]["flair"][d]
        spec.update({f"{d}/embedding": w["embedding"], f"{d}/kernel": w["lstm_0"]["kernel"],
                     f"{d}/recurrent_kernel": w["lstm_0"]["recurrent_kernel"], f"{d}/bias": w["lstm_0"]["bias"],
                     f"{d}/decoder_kernel": w["decoder"]["kernel"], f"{d}/decoder_bias": w["decoder"]["bias"]})
    for ws in (False, True):
        meta = {"chars": table, "hidden": cfg.hidden_size, "embed": cfg.embed_dim, "with_whitespace": ws,
                "sentences": SENTENCES}
        np.savez(tmp_path / "spec.npz", meta=np.asarray(json.dumps(meta)), **spec)
        python, env = where
        p = subprocess.run([python, str(Path(__file__).with_name("flair_check.py")), str(tmp_path / "spec.npz"),
                            str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        theirs = np.load(tmp_path / "out.npz")
        ours = word_features(params, FlairConfig(**{**cfg.__dict__, "with_whitespace": ws}), chars, SENTENCES)
        for i, got in enumerate(ours):
            np.testing.assert_allclose(got[0], theirs[f"arr_{i}"], atol=1e-5)


def test_objective_carries_both_directions_state_and_lm_loss_averages_them(chars):
    from types import SimpleNamespace

    from ptm_jax.config import DataConfig
    from ptm_jax.families.flair.objective import FlairObjective

    cfg = SimpleNamespace(model=_model(chars)[0], data=DataConfig(max_seq_length=8))
    obj = FlairObjective(cfg, None, None, chars)
    rng = np.random.default_rng(0)
    batch = {k: np.asarray(v) for k, v in obj.example_batch(4).items()}
    batch["fwd_ids"] = rng.integers(3, chars.vocab_size, (4, 9)).astype(np.int32)
    batch["bwd_ids"] = batch["fwd_ids"][:, ::-1].copy()
    batch["target_ids"] = batch["fwd_ids"][:, 1:]
    batch["target_weights"] = batch["bwd_weights"] = np.ones((4, 8), np.float32)
    params = obj.init(jax.random.PRNGKey(0), batch)
    carry = nn.meta.unbox(obj.init_carry(4))
    norm = obj.normalizers(batch)
    loss, terms, new = obj.loss_carrying(params, batch, carry, None, norm, False)
    f, b = terms["forward_loss"], terms["backward_loss"]
    assert float(loss) == pytest.approx(0.5 * (float(f[0]) / 32 + float(b[0]) / 32), rel=1e-6)
    assert terms["lm_loss"][1] == 64 and float(loss) == pytest.approx(np.log(chars.vocab_size), rel=0.1)
    assert new["forward"][0].h.shape == (4, 12) and not np.allclose(new["backward"][0].c, 0)
    again, _, _ = obj.loss_carrying(params, batch, new, None, norm, False)
    assert float(again) != pytest.approx(float(loss), rel=1e-6)  # the carried state changes the next loss
