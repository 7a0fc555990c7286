"""`ptm probe MODEL --task pos,chunk,ner`: linear probes on every layer's frozen word features.

A probe is a softmax regression from one layer's feature of a word to its tag (Alain & Bengio 2016,
"Understanding intermediate layers using linear classifier probes"; the layer-wise protocol of Tenney et al.
2019 and Liu et al. 2019 "Linguistic Knowledge and Transferability of Contextual Representations", whose
POS / chunking / NER probes on CoNLL-2000/2003 this follows). Features are ``evaluate/features.py``'s: each word
read at its first subword, layer 0 the embedding output, a static-vector family as one layer. CoNLL-2003
carries all three tags per word (``word POS chunk NER``, ``data/tasks/conll.py``): POS (45 Penn tags),
chunk (IOB1 chunk tags as in the file) and NER (IOB2 entity tags, scored as entities by ``ner_metrics``).

Every layer's probe trains on the same words for the same fixed budget, all layers at once (one einsum
batched over the layer axis, each layer's mean loss summed): features standardised per layer with the train words' mean and std, zero-initialised
weights, Adam, ``steps`` minibatches of ``batch_size`` words drawn with a seeded generator. The figures are
word accuracy on the dev words (a tag never seen in training counts as wrong) and, for NER, the entity F1 of
the predicted tag sequences. Output: ``probe.json`` (the figures and the settings) and ``probe.png`` (accuracy
per layer, one line per task).
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)

TASKS = ("pos", "chunk", "ner")
SPLITS = {"train": ("eng.train", "train.txt"), "dev": ("eng.testa", "valid.txt")}


@dataclasses.dataclass
class ProbeSettings:
    steps: int = 1000
    batch_size: int = 512
    learning_rate: float = 1e-2
    seed: int = 0


def read_split(data_dir: str | Path, split: str, limit: int = 0):
    """The first ``limit`` (0: all) sentences of CoNLL-2003 ``split`` ('train' or 'dev') in ``data_dir``
    (eng.train/eng.testa, or the IOB2 train.txt/valid.txt)."""
    from ptm_jax.data.tasks.conll import read_conll

    d = Path(data_dir)
    for name in SPLITS[split]:
        if (d / name).is_file():
            sentences, _ = read_conll(d / name)
            break
    else:
        raise DataError(f"{d}: no CoNLL-2003 {split} file ({' or '.join(SPLITS[split])}); pass --data-dir with "
                        "the CoNLL-2003 folder (../shared/data/conll2003)")
    if sentences and not sentences[0].chunks:
        raise DataError(f"{d / name}: has no POS and chunk columns; probing needs the 4-column CoNLL-2003 "
                        "files (word POS chunk NER)")
    return sentences[:limit] if limit else sentences


def tags_of(sentence, task: str) -> list[str]:
    if task == "pos":
        return sentence.pos
    if task == "chunk":
        return sentence.chunks
    if task == "ner":
        return sentence.tags
    raise ConfigError(f"--task {task!r}: expected one of {', '.join(TASKS)}")


def stack_words(features: list[np.ndarray]) -> np.ndarray:
    """[L, n_i, D] per sentence -> [L, sum n_i, D]."""
    return np.concatenate(features, axis=1)


def train_probes(x_train: np.ndarray, y_train: np.ndarray, x_dev: np.ndarray, num_labels: int,
                 settings: ProbeSettings) -> np.ndarray:
    """Softmax regressions, one per layer, on x_train [L, N, D] / y_train [N]; returns dev predictions [L, M]."""
    import jax
    import jax.numpy as jnp
    import optax

    if settings.steps < 1 or settings.batch_size < 1:
        raise ConfigError(f"probe steps={settings.steps} and batch_size={settings.batch_size} must be >= 1")
    mean = x_train.mean(axis=1, keepdims=True)
    std = x_train.std(axis=1, keepdims=True) + 1e-6
    xt = jnp.asarray((x_train - mean) / std, jnp.float32)
    n_layers, n, dim = xt.shape
    params = {"w": jnp.zeros((n_layers, dim, num_labels), jnp.float32),
              "b": jnp.zeros((n_layers, num_labels), jnp.float32)}
    opt = optax.adam(settings.learning_rate)
    state = opt.init(params)
    labels = jnp.asarray(y_train, jnp.int32)

    def loss_fn(p, idx):
        logits = jnp.einsum("lnd,ldc->lnc", xt[:, idx], p["w"]) + p["b"][:, None]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels[idx][None])
        return ce.mean(axis=1).sum()  # each layer's probe gets its own mean loss

    @jax.jit
    def step(p, s, idx):
        grads = jax.grad(loss_fn)(p, idx)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s

    rng = np.random.default_rng(settings.seed)
    batch = min(settings.batch_size, n)
    for _ in range(settings.steps):
        params, state = step(params, state, jnp.asarray(rng.choice(n, batch, replace=False), jnp.int32))
    xd = jnp.asarray((x_dev - mean) / std, jnp.float32)
    logits = jnp.einsum("lnd,ldc->lnc", xd, params["w"]) + params["b"][:, None]
    return np.asarray(jnp.argmax(logits, axis=-1))


def probe(params: dict, model_cfg: Any, tokenizer: Any, data_dir: str | Path, tasks: Sequence[str], *,
          train_sentences: int = 2000, dev_sentences: int = 1000, settings: ProbeSettings | None = None,
          batch_size: int = 32) -> dict:
    """Per-layer probe figures for each task: {'tasks': {task: {'accuracy': [...], 'f1': [...] (NER)}}, ...}."""
    from ptm_jax.evaluate.features import word_features
    from ptm_jax.evaluate.ner_metrics import ner_f1

    settings = settings or ProbeSettings()
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise ConfigError(f"probe task(s) {bad}: expected among {', '.join(TASKS)}")
    train = read_split(data_dir, "train", train_sentences)
    dev = read_split(data_dir, "dev", dev_sentences)
    t0 = time.time()
    stats: dict = {}
    x_train = stack_words(word_features(params, model_cfg, tokenizer, [s.words for s in train],
                                        batch_size=batch_size, stats=stats))
    x_dev = stack_words(word_features(params, model_cfg, tokenizer, [s.words for s in dev], batch_size=batch_size))
    feature_s = time.time() - t0
    out: dict = {"layers": int(x_train.shape[0]), "dim": int(x_train.shape[2]), "train_sentences": len(train),
                 "train_words": int(x_train.shape[1]), "dev_sentences": len(dev), "dev_words": int(x_dev.shape[1]),
                 "zero_feature_words_train": int(stats.get("oov", 0)), "settings": dataclasses.asdict(settings),
                 "feature_seconds": round(feature_s, 1), "tasks": {}}
    for task in tasks:
        t1 = time.time()
        names = sorted({t for s in train for t in tags_of(s, task)})
        index = {t: i for i, t in enumerate(names)}
        y_train = np.array([index[t] for s in train for t in tags_of(s, task)], np.int64)
        y_dev = np.array([index.get(t, -1) for s in dev for t in tags_of(s, task)], np.int64)
        pred = train_probes(x_train, y_train, x_dev, len(names), settings)
        res: dict = {"labels": len(names), "unseen_dev_tags": int(np.sum(y_dev < 0)),
                     "accuracy": [round(float(np.mean(p == y_dev)), 4) for p in pred]}
        majority = np.bincount(y_train, minlength=len(names)).argmax()
        res["majority_baseline"] = round(float(np.mean(y_dev == majority)), 4)
        if task == "ner":
            gold = [tags_of(s, task) for s in dev]
            cuts = np.cumsum([0] + [len(g) for g in gold])
            res["f1"] = [round(ner_f1(gold, [[names[i] for i in p[a:b]] for a, b in itertools.pairwise(cuts)]), 4)
                         for p in pred]
        res["seconds"] = round(time.time() - t1, 1)
        out["tasks"][task] = res
        log.info("probe %s: accuracy per layer %s", task, res["accuracy"])
    return out


# ----------------------------------------------------------------------------------------------------
# Command


def probe_curves(result: dict, prefix: str = "") -> dict[str, list[float]]:
    """Plot lines of a :func:`probe` result: each task's accuracy per layer, and NER's entity F1."""
    curves = {}
    for task, r in result["tasks"].items():
        curves[f"{prefix}{task.upper()} accuracy"] = r["accuracy"]
        if "f1" in r:
            curves[f"{prefix}{task.upper()} entity F1"] = r["f1"]
    return curves


def parse_tasks(text: str) -> list[str]:
    tasks = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise ConfigError(f"--task {text!r}: expected a comma-separated subset of {', '.join(TASKS)}")
    return tasks
