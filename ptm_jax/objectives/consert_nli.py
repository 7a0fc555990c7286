"""ConSERT's supervised objectives with an NLI classification loss (Yan et al. 2021, Sec. 3.5 and 4.4).

``consert.supervised``:

- ``nli``: SBERT's classification objective (Reimers & Gurevych 2019, Sec. 3): the two sentences of a labelled
  pair are encoded separately (mean pooling), and a linear classifier reads the concatenation
  (u, v, |u - v|) [B, 3H] -> num_labels, trained with softmax cross-entropy. Rows are independent, so
  gradient accumulation is allowed.
- ``joint``: L = L_ce + alpha * L_con on the same batch (``consert.alpha``, the paper's 0.15). L_ce
  reads the un-augmented encodings (u, v). L_con is NT-Xent over the two views (``consert.views``) of
  each side separately: the premises' views against each other, the hypotheses' against each other, the
  other rows of the batch the negatives. Its scale is the reference's (yym6472/ConSERT,
  ``losses/AdvCLSoftmaxLoss.py``): per side, the mean over the B rows of each direction's loss, summed over
  the two directions and the two sides, i.e. the sum of the 4B per-anchor losses divided by B (4x Eq. 1's
  per-anchor mean). With that scale alpha = 0.15 is the released scripts' ``--cl_rate 0.15``. In-batch
  negatives: joint refuses gradient accumulation.

The reference's joint scripts (``scripts/sup-consert-joint-*.sh``) train 1 epoch of AllNLI (SNLI + MNLI, 3
classes), batch 96, lr 2e-5, max length 64, with view 1 = the clean encoding and view 2 = token cutoff 0.1
(here ``consert.views='none,token_cutoff:0.1'``), with the encoder's dropout on, and their classifier also
reads a fourth block, max(u, v)^2 (``--concatenation_sent_max_square``), which the paper does not describe;
this module follows the paper's (u, v, |u - v|). Dropout: both variants train with the model's own dropout
rates, as the reference and SBERT do (the unsupervised variant turns it off). Adversarial views are not
available here (the reference's 'adv' view takes its perturbation from the classification loss).

Data: any labelled GLUE pair TSV (``finetune.data_dir``, e.g. ``<glue>/MNLI/train.tsv``, ``RTE/train.tsv``,
``WNLI/train.tsv``); the number of classes is the task's. SNLI and MNLI are not in ``../shared/data``; RTE and
WNLI are. The classifier (``nli_classifier``) lives beside the encoder only during the stage: the kept model
(``saved_params``) is the bare encoder, head 'encoder', for ``ptm embed`` and for a second stage.

Two-stage schedules are two runs: "sup-unsup" = ``nli`` then the unsupervised variant on the target
sentences with ``finetune.init`` = the first run's ``finetune-consert/best``; "joint-unsup" = ``joint`` then the
same (``docs/benchmarks.md`` gives the commands).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.objectives.augmentations import View, augment
from ptm_jax.objectives.contrastive import ContrastiveObjective, SentenceEncoder, nt_xent

CLASSIFIER = "nli_classifier"


def pair_features(u: jax.Array, v: jax.Array) -> jax.Array:
    """[B, 3H]: (u, v, |u - v|), SBERT's classifier input."""
    return jnp.concatenate([u, v, jnp.abs(u - v)], axis=-1)


def classification_terms(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sum of the weighted softmax cross-entropies, number of weighted rows whose argmax is the label)."""
    logits = logits.astype(jnp.float32)
    labels = labels.astype(jnp.int32)
    ce = jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    hit = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    w = weights.astype(jnp.float32)
    return jnp.sum(ce * w), jnp.sum(hit * w)


class PairClassifier(nn.Module):
    """Linear (u, v, |u - v|) -> classes; PyTorch nn.Linear's default weight init (uniform, bound
    1/sqrt(fan_in)) as SBERT's SoftmaxLoss has, zero bias."""

    num_labels: int

    @nn.compact
    def __call__(self, u, v):
        init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
        return nn.Dense(self.num_labels, kernel_init=init, name="dense")(pair_features(u, v))


class NliObjective(ContrastiveObjective):
    """``consert.supervised='nli'``. ``train``: (first, second) sentences with ``labels`` (class indices);
    ``dev``: STS-B (sentence1, sentence2, score), scored as in every ConSERT variant."""

    mode = "nli"
    grad_accum = True  # the classification loss is a mean over independent rows

    def __init__(self, model_cfg, fcfg, ccfg, train, labels, num_labels: int, dev, tokenizer, name: str = "consert"):
        super().__init__(model_cfg, fcfg, ccfg, train, dev, tokenizer, name)
        if any(v.name == "adversarial" for v in self.views) and self.mode == "joint":
            raise ConfigError(f"consert.views={ccfg.views!r}: the adversarial view is not built for "
                              f"consert.supervised='joint'; use none, shuffle, token_cutoff, feature_cutoff "
                              "or dropout (the reference's joint runs: 'none,token_cutoff:0.1')")
        self.num_classes = int(num_labels)
        self.classifier = PairClassifier(self.num_classes)
        from ptm_jax.families import registry

        # training keeps the model's dropout (SBERT, and the reference's supervised runs); evaluation does not
        self.dropout_model = SentenceEncoder(self.model.encoder, model_cfg, registry.get(model_cfg.family).layout.trunk)
        self.train["labels"] = np.asarray(labels, np.float32)  # class indices, float like the dev scores

    def init(self, rng, batch):
        enc_rng, cls_rng = jax.random.split(rng)
        params = super().init(enc_rng, batch)
        h = self.model.cfg.hidden_size
        head = self.classifier.init(cls_rng, jnp.zeros((1, h), jnp.float32), jnp.zeros((1, h), jnp.float32))
        return {"params": {**params["params"], CLASSIFIER: head["params"]}}

    def saved_params(self, params):
        """The bare encoder (head 'encoder'): the classifier is dropped from the kept model."""
        p = params.get("params", params)
        return {"params": {k: v for k, v in p.items() if k != CLASSIFIER}}

    def normalizers(self, batch):
        w = jnp.sum(batch["weights"])
        return {"n": 2.0 * w, "rows": w}

    def _train_encode(self, params, ids, mask, view: View, rng, dropout_rng):
        pos, hook = augment(view, rng, mask, None)
        return self.dropout_model.apply(params, ids, mask, pos, hook, deterministic=False,
                                        rngs={"dropout": dropout_rng})

    def loss(self, params, batch, rng, normalizers, train: bool):
        if not train:  # the dev pairs carry STS-B scores, not classes: the NT-Xent of the pairs, as every variant
            return super().loss(params, batch, rng, normalizers, train)
        keys = jax.random.split(rng if rng is not None else jax.random.key(0), 6)
        ids, mask = batch["input_ids"], batch["input_mask"]
        clean = [self._train_encode(params, ids[:, k], mask[:, k], View("none"), None, keys[k]) for k in (0, 1)]
        logits = self.classifier.apply({"params": params["params"][CLASSIFIER]}, clean[0], clean[1])
        ce, hits = classification_terms(logits, batch["labels"], batch["weights"])
        rows = jnp.sum(batch["weights"].astype(jnp.float32))
        terms = {"ce": (ce, rows), "accuracy": (hits, rows)}
        total = ce
        if self.mode == "joint":
            con, anchors, con_hits = self.contrastive_terms(params, batch, clean, keys[2:])
            total = ce + self.alpha * con
            terms.update(contrastive=(con, rows), contrastive_accuracy=(con_hits, anchors))
        terms["loss"] = (total, rows)
        return total / normalizers["rows"], terms

    def contrastive_terms(self, params, batch, clean, keys):
        """(sum of the 4B per-anchor NT-Xent losses, 4B, anchors whose positive scores highest): each side's two
        views against each other (the first view reuses the clean encoding when it is 'none')."""
        ids, mask, w = batch["input_ids"], batch["input_mask"], batch["weights"]
        total = count = hits = 0.0
        for k in (0, 1):
            z = [clean[k] if (j == 0 and self.views[0].name == "none") else
                 self._train_encode(params, ids[:, k], mask[:, k], self.views[j], jax.random.fold_in(keys[2 * k], j),
                                    jax.random.fold_in(keys[2 * k + 1], j))
                 for j in (0, 1)]
            s, c, h = nt_xent(z[0], z[1], w, self.temperature)
            total, count, hits = total + s, count + c, hits + h
        return total, count, hits


class JointObjective(NliObjective):
    """``consert.supervised='joint'``: L_ce + alpha * L_con (module docstring)."""

    mode = "joint"
    grad_accum = False  # in-batch negatives

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        alpha = self.ccfg.alpha
        if not alpha > 0:
            raise ConfigError(f"consert.alpha={alpha} must be > 0 for consert.supervised='joint' "
                              "(the paper uses 0.15; 'nli' is the classification loss alone)")
        self.alpha = float(alpha)
