"""ConSERT: contrastive sentence embeddings over any encoder family (Yan et al. 2021, ACL, Sec. 3).

``finetune.task=consert``. Each training row holds two token sequences whose mean-pooled encodings must
match: the same sentence twice (unsupervised, ``finetune.consert_supervised='none'``: unlabelled sentences, one
per line, or the sentence columns of a GLUE TSV, labels unused) or two sentences of a positive pair
(``'positive_pairs'``). Each side is encoded with its view's augmentation on the embedding output
(``objectives/augmentations.py``; ``finetune.consert_views``, default the paper's best unsupervised pair, feature
cutoff 0.2 + token shuffle).

``'positive_pairs'`` takes a task's labels as positives of the same NT-Xent loss (a pair the task marks similar
is one row; the other rows stay negatives); it is not one of the paper's variants. The paper's supervised runs
(Sec. 3.5) are ``'nli'`` (SBERT's softmax classification over (u, v, |u - v|) of a labelled pair task, MNLI or
any labelled GLUE pair TSV) and ``'joint'`` (that loss + alpha x NT-Xent on the same batch), built in
``objectives/consert_nli.py``; "sup-unsup" and "joint-unsup" run the unsupervised variant after them, with
``finetune.init`` = the first run's kept encoder.

Loss: NT-Xent (Chen et al. 2020, SimCLR; ConSERT Eq. 1) over the 2B L2-normalised views of a global batch of
B rows: each view's positive is the other view of its row, the 2B - 2 views of the other rows are its
negatives, temperature ``finetune.consert_temperature`` (0.1). It is the mean over the 2B anchors (the
reference, ``losses/AdvCLSoftmaxLoss.py``, sums the two halves' means: twice this, a learning-rate factor).
The loss couples the rows of the batch, so the objective refuses gradient accumulation (``grad_accum =
False``). On a sharded mesh the loss is one jit over the global batch: the [2B, 2B] similarity matrix is
computed from all rows, XLA gathering the sharded embeddings, so every shard sees every negative
(``tests/test_consert.py`` checks a (2,2,2) mesh against one device).

Evaluation: STS-B dev, the Spearman correlation of the cosine similarity of the two sentences' mean-pooled
embeddings with the gold scores (the primary metric: best-model selection and ``ptm eval``). The model is the
family's bare encoder (``Family.task_heads['encoder']``, no pooler), saved with head 'encoder', so the
result folder ``<run>/finetune-consert/best`` serves ``ptm embed --pooling mean``.

The encoder's dropout is off (the reference's unsupervised runs pass ``--no_dropout``); the 'dropout'
augmentation is ConSERT's own element cutoff.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.tasks.features import encode_inputs, pad_rows
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.glue_metrics import task_metrics
from ptm_jax.objectives.augmentations import (
    NEEDS_HOOK,
    View,
    augment,
    parse_views,
    perturbation,
)
from ptm_jax.objectives.task_data import ArrayTaskData, task_head

NEG = -1e9


def mean_pool(h: jax.Array, mask: jax.Array) -> jax.Array:
    """float32 [B, H]: the mean of the real tokens' states (``ptm embed --pooling mean``)."""
    m = mask[..., None].astype(jnp.float32)
    return jnp.sum(h.astype(jnp.float32) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1e-9)


def nt_xent(z1: jax.Array, z2: jax.Array, weights: jax.Array, temperature: float
            ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(sum of per-anchor losses, number of anchors, number of anchors whose positive scores highest) of the
    NT-Xent loss over views z1, z2 [B, H] (row i of z1 and of z2 are positives). Rows of weight 0 (padding)
    are neither anchors nor negatives."""
    z = jnp.concatenate([z1, z2], axis=0).astype(jnp.float32)
    z = z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
    b = z1.shape[0]
    w = jnp.concatenate([weights, weights]).astype(jnp.float32)
    logits = (z @ z.T) / temperature
    idx = jnp.arange(2 * b)
    keep = (w[None, :] > 0) & (idx[:, None] != idx[None, :])
    logits = jnp.where(keep, logits, NEG)
    positive = (idx + b) % (2 * b)
    per = jax.nn.logsumexp(logits, axis=-1) - logits[idx, positive]
    hit = (jnp.argmax(logits, axis=-1) == positive).astype(jnp.float32)
    return jnp.sum(per * w), jnp.sum(w), jnp.sum(hit * w)


class SentenceEncoder(nn.Module):
    """The family's encoder (named as its trunk, so pretrained weights merge and ``ptm embed`` reads it)
    -> mean-pooled float32 [B, H]."""

    encoder: Any
    cfg: Any
    trunk: str

    @nn.compact
    def __call__(self, input_ids, input_mask, position_ids=None, embedding_hook=None, deterministic=True):
        kw = {} if embedding_hook is None else {"embedding_hook": embedding_hook}
        h, _ = self.encoder(self.cfg, add_pooler=False, name=self.trunk)(
            input_ids, input_mask, jnp.zeros_like(input_ids), position_ids, deterministic=deterministic, **kw)
        return mean_pool(h, input_mask)


def featurize(firsts: Sequence[str], seconds: Sequence[str], scores: Sequence[float] | None, tokenizer,
              max_len: int) -> dict[str, np.ndarray]:
    """Rows of two sequences ([N, 2, S] ids and mask), each '[CLS] sentence [SEP]' on its own."""
    n = len(firsts)
    ids, _ = encode_inputs(tokenizer, list(firsts) + list(seconds), None, max_len)
    mask = [np.ones(len(x), np.int32) for x in ids]
    stack = lambda rows: np.stack([pad_rows(rows[:n], max_len), pad_rows(rows[n:], max_len)], axis=1)
    return {"input_ids": stack(ids), "input_mask": stack(mask),
            "labels": np.asarray(scores if scores is not None else np.full(n, -1.0), np.float32),
            "weights": np.ones(n, np.float32)}


class ContrastiveObjective(ArrayTaskData):
    """``train``: (first, second) sentence pairs (the same sentence twice when unsupervised) or None
    (evaluation only); ``dev``: (sentence1, sentence2, gold score) of STS-B."""

    head = "encoder"
    grad_accum = False  # in-batch negatives: a microbatch would see fewer negatives (base.check_grad_accum)

    def __init__(self, model_cfg, fcfg, train: Sequence[tuple[str, str]] | None,
                 dev: Sequence[tuple[str, str, float]], tokenizer, name: str = "consert"):
        if fcfg.batch_size < 2:
            raise ConfigError(f"finetune.batch_size={fcfg.batch_size}: the contrastive loss needs at least 2 "
                              "rows per batch (the other rows are the negatives); raise it (the paper uses 96)")
        if not fcfg.consert_temperature > 0:
            raise ConfigError(f"finetune.consert_temperature={fcfg.consert_temperature} must be > 0 (the paper "
                              "uses 0.1)")
        self.name, self.fcfg = name, fcfg
        self.views: tuple[View, View] = parse_views(fcfg.consert_views)
        self.temperature = float(fcfg.consert_temperature)
        from ptm_jax.families import registry

        encoder = task_head(model_cfg, "encoder")
        hooked = [v.name for v in self.views if v.name in NEEDS_HOOK]
        if hooked and "embedding_hook" not in inspect.signature(encoder.__call__).parameters:
            raise ConfigError(f"finetune.consert_views={fcfg.consert_views!r}: {', '.join(hooked)} perturbs the "
                              f"embedding output, which the encoder of model.family={model_cfg.family!r} does "
                              "not expose (no embedding_hook); use shuffle or none")
        quiet = dataclasses.replace(model_cfg, hidden_dropout=0.0, attention_dropout=0.0)
        self.model = SentenceEncoder(encoder, quiet, registry.get(model_cfg.family).trunk)
        max_len = fcfg.max_seq_length
        self.train = featurize([a for a, _ in train], [b for _, b in train], None, tokenizer, max_len) \
            if train else None
        self.dev = featurize([a for a, _, _ in dev], [b for _, b, _ in dev], [s for _, _, s in dev], tokenizer,
                             max_len)
        self.dev_scores = np.asarray([s for _, _, s in dev], np.float64)
        self.num_train = len(train or ())
        self.primary_metric = "spearman"

    def init(self, rng, batch):
        return self.model.init(rng, jnp.asarray(batch["input_ids"][:1, 0]), jnp.asarray(batch["input_mask"][:1, 0]))

    def normalizers(self, batch):
        return {"n": 2.0 * jnp.sum(batch["weights"])}

    def _encode(self, params, ids, mask, view: View, rng, train: bool, delta=None):
        pos, hook = augment(view, rng, mask, delta) if train else (None, None)
        return self.model.apply(params, ids, mask, pos, hook, deterministic=True)

    def _views_loss(self, params, batch, rngs, train: bool, deltas=(None, None)):
        z = [self._encode(params, batch["input_ids"][:, k], batch["input_mask"][:, k], self.views[k], rngs[k],
                          train, deltas[k]) for k in (0, 1)]
        return nt_xent(z[0], z[1], batch["weights"], self.temperature)

    def loss(self, params, batch, rng, normalizers, train: bool):
        rngs = jax.random.split(rng if rng is not None else jax.random.key(0), 2)
        deltas = [None, None]
        if train and any(v.name == "adversarial" for v in self.views):
            # FGSM: the gradient of the loss at the clean embedding output of each adversarial view (one extra
            # forward and backward pass), normalised per token and scaled to the view's norm
            mask = batch["input_mask"]
            zeros = [jnp.zeros(mask[:, k].shape + (self.model.cfg.hidden_size,), jnp.float32)
                     if self.views[k].name == "adversarial" else None for k in (0, 1)]
            grads = jax.grad(lambda d: self._views_loss(params, batch, rngs, True, d)[0] / normalizers["n"])(zeros)
            deltas = [None if g is None else jax.lax.stop_gradient(perturbation(g, self.views[k].strength))
                      for k, g in enumerate(grads)]
        total, count, hits = self._views_loss(params, batch, rngs, train, deltas)
        return total / normalizers["n"], {"loss": (total, count), "accuracy": (hits, count)}

    def predict(self, params, batch) -> dict[str, jax.Array]:
        z = [self._encode(params, batch["input_ids"][:, k], batch["input_mask"][:, k], View("none"), None, False)
             for k in (0, 1)]
        z = [v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in z]
        return {"cosine": jnp.sum(z[0] * z[1], axis=-1)}

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        n = len(self.dev_scores)
        return task_metrics("stsb", outputs["cosine"][:n], self.dev_scores)


# ---------------------------------------------------------------------------------------------- data

def read_sentences(path: str | Path) -> list[str]:
    """Non-empty lines of a UTF-8 text file (one sentence each); a DataError names the file when it is
    missing, unreadable, not UTF-8 or holds no sentence."""
    from ptm_jax.data.tasks.glue import utf8_error

    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: sentences file not found; finetune.data_dir names a text file with one sentence "
                        "per line, a GLUE TSV or a GLUE folder holding STS-B/")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise utf8_error(str(p), "sentences") from None
    except OSError as e:
        raise DataError(f"{p}: cannot read the sentences file ({e.strerror or e})") from None
    out = [line.strip() for line in text.splitlines() if line.strip()]
    if not out:
        raise DataError(f"{p}: no sentences (the file is empty or blank); put one sentence per line")
    return out


def _glue_task_of(path: Path) -> tuple[str, str]:
    """(task, split) of a GLUE TSV in the standard layout <glue>/<TASK dir>/<split>.tsv."""
    from ptm_jax.data.tasks.glue import GLUE_TASKS

    for name, spec in GLUE_TASKS.items():
        if spec.dirname == path.parent.name:
            for split, (fname, _) in spec.splits.items():
                if fname == path.name:
                    return name, split
    raise ConfigError(f"finetune.data_dir={str(path)!r}: a .tsv file must be a GLUE split in the standard layout "
                      "(e.g. .../STS-B/train.tsv); give plain text with one sentence per line otherwise")


def glue_pair_file(path: Path, where: str, tasks: str):
    """(task, split, spec) of the labelled GLUE pair TSV that ``where`` (a supervised ConSERT variant) reads from
    finetune.data_dir; a ConfigError naming the file for a folder or other file, and for a single-sentence task.
    ``tasks``: the pair tasks to suggest (e.g. 'STS-B, MRPC, RTE')."""
    from ptm_jax.data.tasks.glue import get_task

    if path.is_dir() or path.suffix != ".tsv":
        raise ConfigError(f"{where} needs labelled sentence pairs: set finetune.data_dir to a GLUE pair TSV with "
                          f"labels (e.g. <glue>/{tasks.split(',')[0].strip()}/train.tsv), not {path}")
    task, split = _glue_task_of(path)
    spec = get_task(task)
    if not spec.is_pair:
        raise ConfigError(f"{where}: {path} ({spec.name}) holds single sentences; use a pair task ({tasks})")
    return task, split, spec


SUPERVISION = ("none", "positive_pairs", "nli", "joint")


def supervision(fcfg) -> str:
    """``finetune.consert_supervised`` as one of SUPERVISION (true/false of older configs: 'positive_pairs'/'none');
    a ConfigError naming the field for any other value."""
    value = fcfg.consert_supervised
    if isinstance(value, bool):
        return "positive_pairs" if value else "none"
    if value not in SUPERVISION:
        raise ConfigError(f"finetune.consert_supervised={value!r} is not one of {', '.join(SUPERVISION)} (true/false "
                          "are accepted as 'positive_pairs'/'none')")
    return value


def _positive(spec, label) -> bool:
    """A pair the task marks as similar: STS-B score >= 4 of 5, MRPC paraphrase, entailment."""
    if spec.labels is None:
        return label is not None and float(label) >= 4.0
    return label is not None and spec.labels[label] in ("1", "entailment")


def build_consert(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
                  model_info: dict | None = None) -> tuple[Any, str]:
    """``finetune.data_dir``: a text file (one sentence per line), a GLUE TSV (its sentence columns, labels
    unused; with ``finetune.consert_supervised='positive_pairs'`` its positive pairs, with 'nli' or 'joint' its
    labelled pairs) or a GLUE folder (STS-B/train.tsv).
    Evaluation reads STS-B/dev.tsv of ``finetune.eval_data_dir``, else of the GLUE folder that holds the
    training data."""
    from ptm_jax.data.tasks.glue import read_glue
    from ptm_jax.objectives.base import check_grad_accum
    from ptm_jax.objectives.finetune_registry import take_subset

    f = cfg.finetune
    mode = supervision(f)
    if eval_split != "dev":
        raise ConfigError(f"finetune.task=consert: the STS-B {eval_split} split has no public scores; evaluate "
                          "--split dev")
    if not f.data_dir and not (f.eval_data_dir and not train):
        raise ConfigError("finetune.task=consert: set finetune.data_dir (--data-dir) to a sentences file (one per "
                          "line), a GLUE TSV or a GLUE folder holding STS-B/")
    source = Path(f.data_dir) if f.data_dir else None
    glue_dir = Path(f.eval_data_dir) if f.eval_data_dir else None
    if glue_dir is None and source is not None:
        if source.is_dir():
            glue_dir = source
        elif source.suffix == ".tsv" and (source.parent.parent / "STS-B").is_dir():
            glue_dir = source.parent.parent
    if glue_dir is None:
        raise ConfigError(f"finetune.task=consert: set finetune.eval_data_dir to the GLUE folder holding "
                          f"STS-B/dev.tsv (the evaluation pairs); {f.data_dir!r} is not inside one")
    dev_rows, _ = read_glue(glue_dir, "stsb", "dev")
    dev = [(e.text_a, e.text_b, float(e.label)) for e in dev_rows]
    pairs = None
    what = ""
    obj = None
    if train and mode in ("nli", "joint"):
        from ptm_jax.objectives.consert_nli import build_nli

        obj, what = build_nli(mode, f, model_cfg, source, dev, tokenizer)
    elif train:
        if mode == "positive_pairs":
            path = source / "STS-B" / "train.tsv" if source.is_dir() else source
            task, split, spec = glue_pair_file(path, "finetune.consert_supervised='positive_pairs'",
                                               "STS-B, MRPC, RTE")
            rows, _ = read_glue(path.parent.parent, task, split)
            pairs = [(e.text_a, e.text_b) for e in rows if _positive(spec, e.label)]
            if not pairs:
                raise DataError(f"{path}: no positive pairs (STS-B score >= 4, paraphrase or entailment label)")
            what = f"{len(pairs)} positive pairs of {len(rows)} ({spec.name}) from {path}"
            pairs = take_subset(pairs, f.train_subset, f.subset_seed)
        else:
            if source.is_dir():
                source = source / "STS-B" / "train.tsv"
            if source.suffix == ".tsv":
                task, split = _glue_task_of(source)
                rows, _ = read_glue(source.parent.parent, task, split)
                sentences = [t for e in rows for t in (e.text_a, e.text_b) if t]
            else:
                sentences = read_sentences(source)
            unique = list(dict.fromkeys(s.strip() for s in sentences if s.strip()))
            if not unique:
                raise DataError(f"{source}: no sentences")
            unique = take_subset(unique, f.train_subset, f.subset_seed)
            pairs = [(s, s) for s in unique]
            what = (f"{len(pairs)} distinct unlabelled sentences of {len(sentences)} from {source}")
    if obj is None:
        obj = ContrastiveObjective(model_cfg, f, pairs, dev, tokenizer)
    check_grad_accum(obj, cfg.train.grad_accum_steps)
    views = ", ".join(map(str, obj.views))
    head = f"{what}; views {views}, temperature {obj.temperature:g}; " if train else ""
    if mode == "nli" and train:
        head = f"{what}; "
    desc = f"ConSERT: {head}STS-B dev ({len(dev)} pairs) from {glue_dir}"
    return obj, desc
