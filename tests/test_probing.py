"""evaluate/probing.py: per-layer linear probes on CoNLL-2003 POS / chunk / NER."""
from __future__ import annotations

import json

import numpy as np


def test_probes_learn_only_the_layer_that_holds_the_labels():
    from ptm_jax.evaluate.probing import ProbeSettings, train_probes

    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 600)
    centers = rng.standard_normal((4, 8)) * 3.0
    x = np.stack([rng.standard_normal((600, 8)), centers[y] + rng.standard_normal((600, 8)) * 0.3])
    pred = train_probes(x[:, :400], y[:400], x[:, 400:], 4, ProbeSettings(steps=150, batch_size=64))
    acc = (pred == y[400:]).mean(axis=1)
    assert pred.shape == (2, 200) and acc[1] > 0.97 and acc[0] < 0.45  # layer 0 is noise: about chance (0.25)


def _head(src, dst, sentences: int) -> None:
    """The first ``sentences`` sentences of a CoNLL file, as lines of the real file."""
    out, seen = [], 0
    for line in src.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.strip() and out and out[-1].strip() and not out[-1].startswith("-DOCSTART-"):
            seen += 1
            if seen == sentences:
                break
        out.append(line)
    dst.write_text("".join(out), encoding="utf-8")


def test_probe_command_on_static_vectors_learns_seen_words_tags_and_scores_ner_entities(tmp_path, shared_data,
                                                                                       capsys):
    """Dev = the first 150 train sentences: every dev word has a vector holding its (last seen) POS and NER tags
    as one-hot dims, so the probes must score near 1 (below 1 only for words seen with several tags)."""
    from ptm_jax.cli import main
    from ptm_jax.config_loading import model_from_dict
    from ptm_jax.data.tasks.conll import read_conll
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.evaluate.ner_metrics import ner_f1
    from ptm_jax.export.params import save_params

    conll = tmp_path / "conll"
    conll.mkdir()
    _head(shared_data / "conll2003/eng.train", conll / "eng.train", 300)
    _head(shared_data / "conll2003/eng.train", conll / "eng.testa", 150)
    train, _ = read_conll(conll / "eng.train")
    assert len(train) == 300
    vocab = build_word_vocab([" ".join(s.words) for s in train], tmp_path / "tok")
    table = np.zeros((vocab.vocab_size, 64), np.float32)
    pos_tags, ner_tags = sorted({t for s in train for t in s.pos}), sorted({t for s in train for t in s.tags})
    last = {}
    for s in train:
        for w, p, t in zip(s.words, s.pos, s.tags):
            table[vocab.token_to_id(w), :55] = 0.0
            table[vocab.token_to_id(w), [ner_tags.index(t), 9 + pos_tags.index(p)]] = 1.0
            last[w] = (p, t)
    cfg = model_from_dict({"family": "word2vec", "vocab_size": vocab.vocab_size, "dim": 64})
    save_params(tmp_path / "w2v", {"word2vec": {"input": table, "output": table}}, cfg, "word_vectors",
                extra={"tokenizer": {"kind": "word", "lower_case": False}},
                tokenizer_files=list(vocab.save(tmp_path / "tok")))
    out = tmp_path / "probe"
    assert main(["probe", str(tmp_path / "w2v"), "--task", "pos,ner", "--data-dir", str(conll),
                 "--train-sentences", "300", "--dev-sentences", "150", "--steps", "300", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    r = json.loads((out / "probe.json").read_text())
    assert printed["pos"]["accuracy"] == r["tasks"]["pos"]["accuracy"]
    dev = train[:150]
    assert (r["layers"], r["dim"], r["train_sentences"], r["dev_sentences"]) == (1, 64, 300, 150)
    assert r["dev_words"] == sum(len(s.words) for s in dev) and r["zero_feature_words_train"] == 0
    # the best a word-identity probe can do: each word's last seen tags
    best_pos = np.mean([last[w][0] == p for s in dev for w, p in zip(s.words, s.pos)])
    best_ner = [[last[w][1] for w in s.words] for s in dev]
    pos, ner = r["tasks"]["pos"], r["tasks"]["ner"]
    assert pos["majority_baseline"] < 0.25 and abs(pos["accuracy"][0] - best_pos) < 0.02 and best_pos > 0.9
    assert abs(ner["f1"][0] - ner_f1([s.tags for s in dev], best_ner)) < 0.03 and ner["f1"][0] > 0.8
    assert (out / "probe.png").stat().st_size > 10_000
    assert main(["probe", str(tmp_path / "w2v"), "--task", "pos,srl", "--out", str(out)]) == 2
    assert "expected a comma-separated subset of pos, chunk, ner" in capsys.readouterr().err
