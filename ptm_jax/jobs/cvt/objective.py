"""The CVT objective: the tagger of ``model.py`` on CoNLL-2003 words, trained by the loop's ``fit`` on alternating
labelled and unlabelled minibatches (Clark et al. 2018 Sec. 2: "CVT alternates learning on a minibatch of labeled
examples and learning on a minibatch of unlabeled examples").

Step k of the loop takes labelled minibatch k // 2 when k is even and unlabelled minibatch k // 2 when k is odd
(``train_batches``: two seeded streams, each resumable from the loop's cursor); both kinds have the same arrays
(``ids``, ``mask``, ``labels``, ``weights`` and ``unlabelled``, 1 on an unlabelled row), so one compiled step runs
both, and the loss picks its branch with ``lax.cond`` (only that branch is computed): the primary module's
cross-entropy per labelled word, or ``cvt.aux_weight`` x the CVT loss per unlabelled word (``model.cvt_sum``).
With ``cvt.enabled=false`` (or weight 0) every step is a labelled one: the supervised baseline of the same
network. A step's terms are ``loss`` (the loss it optimised, per word) and ``unlabelled`` (1 on a CVT step), so
every logged record is finite; evaluation scores the primary module: ``loss``, ``token_accuracy`` and conlleval's
entity F1 (``objectives/tagging.TaggingObjective``'s ``score``, which the features job's tagger shares).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.config import FinetuneConfig
from ptm_jax.data.tasks.conll import IGNORE_INDEX, ConllSentence
from ptm_jax.errors import DataError
from ptm_jax.jobs.cvt.model import CvtTagger, cvt_sum, supervised_sums
from ptm_jax.models.text_heads import WordInputs
from ptm_jax.objectives.feature_inputs import WordTable
from ptm_jax.objectives.tagging import TaggingObjective, TagSet
from ptm_jax.objectives.task_data import padded_batches, shuffled_stream

INPUT_KEYS = ("ids", "mask")


class CvtTaggingObjective(TaggingObjective):
    """CoNLL-2003 NER with cross-view training. ``train=None``: evaluation only (``ptm eval``)."""

    head = "cvt_tagger"

    def __init__(self, fcfg: FinetuneConfig, ccfg: Any, table: WordTable, dim: int, labels: Sequence[str],
                 train: Sequence[ConllSentence] | None, dev: Sequence[ConllSentence],
                 unlabelled: Sequence[Sequence[str]] = (), name: str = "conll2003"):
        self.name, self.fcfg, self.ccfg, self.table = f"finetune-{name}", fcfg, ccfg, table
        self.spec = TagSet(name, tuple(labels))
        self.label_to_id = {t: i for i, t in enumerate(self.spec.labels)}
        self.num_labels = len(labels)
        self.crf, self.extra_info = None, {}
        self.model = CvtTagger(WordInputs(len(table.words), dim, name="inputs"), self.num_labels,
                               fcfg.classifier_dropout, ccfg.hidden_1, ccfg.hidden_2, ccfg.projection)
        self.active = bool(ccfg.active)
        if self.active and not unlabelled:
            raise DataError("cvt.unlabelled: no unlabelled sentences to train the auxiliary modules on")
        T = fcfg.max_seq_length
        self.train = self._arrays(train) if train else None
        self.num_train = len(train or ())
        self.train_truncated_words = sum(max(0, len(s.words) - T) for s in train or ())
        self.unlabelled = self._words(unlabelled, flag=1.0) if self.active else None
        self.num_unlabelled = len(unlabelled) if self.active else 0
        self.dev_sentences = list(dev)
        self.dev = self._arrays(dev) if dev else None
        self.dev_first_piece = [np.where(np.arange(len(s.words)) < T, np.arange(len(s.words)), -1).astype(np.int32)
                                for s in dev]
        self.dev_truncated_words = sum(max(0, len(s.words) - T) for s in dev)

    # ------------------------------------------------------------------ arrays

    def _words(self, sentences: Sequence[Sequence[str]], flag: float) -> dict[str, np.ndarray]:
        T = self.fcfg.max_seq_length
        ids = np.zeros((len(sentences), T), np.int32)
        mask = np.zeros((len(sentences), T), np.int32)
        for r, s in enumerate(sentences):
            ids[r], mask[r] = self.table.ids(s, T)
        n = len(sentences)
        return {"ids": ids, "mask": mask, "labels": np.full((n, T), IGNORE_INDEX, np.int32),
                "weights": np.ones(n, np.float32), "unlabelled": np.full(n, flag, np.float32)}

    def _arrays(self, sentences: Sequence[ConllSentence]) -> dict[str, np.ndarray]:
        T = self.fcfg.max_seq_length
        out = self._words([s.words for s in sentences], flag=0.0)
        for r, s in enumerate(sentences):
            tags = [self.label_to_id.get(t, IGNORE_INDEX) for t in s.tags[:T]]
            out["labels"][r, :len(tags)] = tags
        return out

    # ------------------------------------------------------------------ data streams

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int):
        """Labelled and (with CVT) unlabelled minibatches in turn, from global step start_example // batch."""
        if self.train is None:
            raise DataError(f"{self.name}: no training sentences (evaluation-only objective)")
        seed, shuffle = self.fcfg.seed, self.fcfg.shuffle
        if not self.active:
            for idx in shuffled_stream(self.num_train, seed, start_example, global_batch, process_index,
                                       process_count, shuffle=shuffle):
                yield {k: v[idx] for k, v in self.train.items()}
            return
        step = start_example // global_batch
        labelled = shuffled_stream(self.num_train, seed, (step + 1) // 2 * global_batch, global_batch,
                                   process_index, process_count, shuffle=shuffle)
        unlabelled = shuffled_stream(self.num_unlabelled, seed + 1, step // 2 * global_batch, global_batch,
                                     process_index, process_count, shuffle=shuffle)
        while True:
            source, stream = (self.train, labelled) if step % 2 == 0 else (self.unlabelled, unlabelled)
            idx = next(stream)
            yield {k: v[idx] for k, v in source.items()}
            step += 1

    def eval_batches(self, global_batch: int, process_index: int, process_count: int):
        if self.dev is None:
            return iter(())
        return padded_batches(self.dev, global_batch, process_index, process_count)

    # ------------------------------------------------------------------ model and losses

    def init(self, rng, batch):
        return self.model.init(rng, {k: jnp.asarray(batch[k][:1]) for k in INPUT_KEYS})

    def outputs(self, params, batch, rng, train: bool) -> dict[str, jax.Array]:
        """Every module's logits [B, T, K] (dropout on with ``train`` and an ``rng``)."""
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, {k: batch[k] for k in INPUT_KEYS}, deterministic=not train, rngs=rngs)

    def _logits(self, params, batch, rng, train: bool) -> jax.Array:
        return self.outputs(params, batch, rng, train)["primary"]

    def normalizers(self, batch):
        words = batch["mask"].astype(jnp.float32) * batch["weights"][:, None]
        return {"n": jnp.sum(self._label_weights(batch)), "u": jnp.sum(words * batch["unlabelled"][:, None])}

    def supervised_loss(self, params, batch, rng, normalizers, train: bool):
        """The primary module's cross-entropy per labelled word (Eq. 1's L_sup) and its terms."""
        w = self._label_weights(batch)
        nll, hit = supervised_sums(self._logits(params, batch, rng, train), batch["labels"], w)
        return nll / jnp.maximum(normalizers["n"], 1.0), (nll, jnp.sum(w)), (hit, jnp.sum(w))

    def cvt_loss(self, params, batch, rng, normalizers):
        """``cvt.aux_weight`` x L_CVT per unlabelled word (Eq. 2): the teacher is the primary module on the full
        view without dropout, held fixed; the students are the auxiliary modules with dropout."""
        teacher = self.outputs(params, batch, None, False)["primary"]
        students = self.outputs(params, batch, rng, True)
        w = batch["mask"].astype(jnp.float32) * batch["weights"][:, None] * batch["unlabelled"][:, None]
        total = self.ccfg.aux_weight * cvt_sum(teacher, students, w)
        return total / jnp.maximum(normalizers["u"], 1.0), (total, jnp.sum(w))

    def loss(self, params, batch, rng, normalizers, train: bool):
        if not train:
            value, loss, acc = self.supervised_loss(params, batch, rng, normalizers, False)
            return value, {"loss": loss, "token_accuracy": acc}
        one, zero = jnp.ones((), jnp.float32), jnp.zeros((), jnp.float32)

        def labelled(p):
            value, loss, _ = self.supervised_loss(p, batch, rng, normalizers, True)
            return value, {"loss": loss, "unlabelled": (zero, one)}

        if not self.active:
            return labelled(params)

        def unlabelled(p):
            value, loss = self.cvt_loss(p, batch, rng, normalizers)
            return value, {"loss": loss, "unlabelled": (one, one)}

        return jax.lax.cond(jnp.any(batch["unlabelled"] > 0), unlabelled, labelled, params)

    def predict(self, params, batch) -> dict[str, jax.Array]:
        return {"logits": self._logits(params, batch, None, False)}
