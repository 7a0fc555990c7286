"""ConSERT: contrastive sentence embeddings over any encoder family (Yan et al. 2021, ACL, Sec. 3).

``finetune.job=consert`` (``ptm_jax/jobs/consert``; settings in ``[consert]``). Each training row holds two
token sequences whose mean-pooled encodings must match: the same sentence twice (unsupervised, ``consert.supervised='none'``: unlabelled sentences, one
per line, or the sentence columns of a GLUE TSV, labels unused) or two sentences of a positive pair
(``'positive_pairs'``). Each side is encoded with its view's augmentation on the embedding output
(``objectives/augmentations.py``; ``consert.views``, default the paper's best unsupervised pair, feature
cutoff 0.2 + token shuffle).

``'positive_pairs'`` takes a task's labels as positives of the same NT-Xent loss (a pair the task marks similar
is one row; the other rows stay negatives); it is not one of the paper's variants. The paper's supervised runs
(Sec. 3.5) are ``'nli'`` (SBERT's softmax classification over (u, v, |u - v|) of a labelled pair task, MNLI or
any labelled GLUE pair TSV) and ``'joint'`` (that loss + alpha x NT-Xent on the same batch), built in
``objectives/consert_nli.py``; "sup-unsup" and "joint-unsup" run the unsupervised variant after them, with
``finetune.init`` = the first run's kept encoder.

Loss: NT-Xent (Chen et al. 2020, SimCLR; ConSERT Eq. 1) over the 2B L2-normalised views of a global batch of
B rows: each view's positive is the other view of its row, the 2B - 2 views of the other rows are its
negatives, temperature ``consert.temperature`` (0.1). It is the mean over the 2B anchors (the
reference, ``losses/AdvCLSoftmaxLoss.py``, sums the two halves' means: twice this, a learning-rate factor).
The loss couples the rows of the batch, so the objective refuses gradient accumulation (``grad_accum =
False``). On a sharded mesh the loss is one jit over the global batch: the [2B, 2B] similarity matrix is
computed from all rows, XLA gathering the sharded embeddings, so every shard sees every negative
(``tests/test_consert.py`` checks a (2,2,2) mesh against one device).

Evaluation: STS-B dev, the Spearman correlation of the cosine similarity of the two sentences' mean-pooled
embeddings with the gold scores (the primary metric: best-model selection and ``ptm eval``). The model is the
family's bare encoder (``Finetuning.task_heads['encoder']``, no pooler), saved with head 'encoder', so the
result folder ``<run>/finetune-consert/best`` serves ``ptm embed --pooling mean``.

The encoder's dropout is off (the reference's unsupervised runs pass ``--no_dropout``); the 'dropout'
augmentation is ConSERT's own element cutoff.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.tasks.features import encode_inputs, pad_rows
from ptm_jax.errors import ConfigError
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

    def __init__(self, model_cfg, fcfg, ccfg, train: Sequence[tuple[str, str]] | None,
                 dev: Sequence[tuple[str, str, float]], tokenizer, name: str = "consert"):
        if fcfg.batch_size < 2:
            raise ConfigError(f"finetune.batch_size={fcfg.batch_size}: the contrastive loss needs at least 2 "
                              "rows per batch (the other rows are the negatives); raise it (the paper uses 96)")
        if not ccfg.temperature > 0:
            raise ConfigError(f"consert.temperature={ccfg.temperature} must be > 0 (the paper "
                              "uses 0.1)")
        self.name, self.fcfg, self.ccfg = name, fcfg, ccfg
        self.views: tuple[View, View] = parse_views(ccfg.views)
        self.temperature = float(ccfg.temperature)
        from ptm_jax.families import registry

        encoder = task_head(model_cfg, "encoder")
        hooked = [v.name for v in self.views if v.name in NEEDS_HOOK]
        if hooked and "embedding_hook" not in inspect.signature(encoder.__call__).parameters:
            raise ConfigError(f"consert.views={ccfg.views!r}: {', '.join(hooked)} perturbs the "
                              f"embedding output, which the encoder of model.family={model_cfg.family!r} does "
                              "not expose (no embedding_hook); use shuffle or none")
        quiet = dataclasses.replace(model_cfg, hidden_dropout=0.0, attention_dropout=0.0)
        self.model = SentenceEncoder(encoder, quiet, registry.get(model_cfg.family).layout.trunk)
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
