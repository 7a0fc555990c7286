"""Extractive question answering, SQuAD v1.1 / v2.0 (Devlin et al. 2019 Sec. 4.2-4.3; run_squad.py).

Training rows are run_squad's sliding-window features (``squad_features.convert_examples_to_features``):
the label is the answer's first and last piece inside the window, or start = end = 0 ([CLS]) when the
window does not hold the whole answer or the question is impossible (v2). The loss is the mean of the
start and end cross-entropies; both distributions range over the window's real positions only (padding is
masked out of the softmax, in the loss and in the predicted logits alike, so the untrained padding logits
can never crowd the n-best lists). Evaluation predicts every window of every dev question, then
``squad_postprocess.postprocess`` turns the logits into answer texts and ``squad_eval`` scores them with
the official v1.1 / v2.0 rules; v2 also reports the best null-odds threshold (official script's sweep).

The model is the family's ``question_answering`` head (``Finetuning.task_heads``) and the feature layout its
``Finetuning.qa_layout``: a family whose reference puts the question after the document (zihangdai/xlnet
run_squad.py: `doc <sep> query <sep> <cls>`) labels the null / out-of-window answer at its <cls> position.

One difference from run_squad: the number of training steps counts features (windows), not questions, so
``finetune.epochs`` is exact over the rows that are streamed.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax.config import FinetuneConfig
from ptm_jax.models.config import TransformerConfig
from ptm_jax.data.tasks.sections import SquadConfig
from ptm_jax.data.tasks.squad import SquadExample
from ptm_jax.data.tasks.squad_features import SquadFeature, convert_examples_to_features
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.squad_eval import evaluate_v1, evaluate_v2
from ptm_jax.evaluate.squad_postprocess import postprocess
from ptm_jax.objectives.task_data import ArrayTaskData

MASKED_LOGIT = -10000.0
"""Logit of padding positions (finite, so JSON n-best files and softmaxes stay well defined)."""
MODEL_KEYS = ("input_ids", "input_mask", "segment_ids")


def dataset_json(examples: Sequence[SquadExample]) -> dict[str, Any]:
    """The official-JSON shape ``squad_eval`` reads, holding exactly these questions and their gold texts
    (an impossible v2 question has no gold answers)."""
    qas = [{"id": e.qas_id, "answers": [] if e.is_impossible else [{"text": t} for t, _ in e.answers]}
           for e in examples]
    return {"data": [{"title": "", "paragraphs": [{"context": "", "qas": qas}]}]}


def labelled_arrays(features: Sequence[SquadFeature], labels: dict[tuple[int, int], tuple[int, int]] | None = None
                    ) -> dict[str, np.ndarray]:
    """Model inputs, start/end labels and per-row loss weights. ``labels`` maps (example_index,
    doc_span_index) to positions for features built without them; rows without a label get weight 0."""
    if not features:
        raise DataError("SQuAD: no features (every question was skipped; see the read report)")
    starts = np.zeros(len(features), np.int32)
    ends = np.zeros(len(features), np.int32)
    weights = np.ones(len(features), np.float32)
    for i, f in enumerate(features):
        pos = (f.start_position, f.end_position) if labels is None else labels.get(
            (f.example_index, f.doc_span_index))
        if pos is None or pos[0] is None:
            weights[i] = 0.0
        else:
            starts[i], ends[i] = pos
    return {"input_ids": np.stack([f.input_ids for f in features]).astype(np.int32),
            "input_mask": np.stack([f.input_mask for f in features]).astype(np.int32),
            "segment_ids": np.stack([f.segment_ids for f in features]).astype(np.int32),
            "start_positions": starts, "end_positions": ends, "weights": weights}


class SpanQAObjective(ArrayTaskData):
    """BertForQuestionAnswering on SQuAD features; dev metrics from the official evaluation rules."""

    head = "question_answering"
    primary_metric = "f1"

    def __init__(self, model_cfg: TransformerConfig, fcfg: FinetuneConfig, train: Sequence[SquadExample] | None,
                 dev: Sequence[SquadExample], tokenizer, *, version_2: bool = False, name: str = "squad",
                 do_lower_case: bool = True, squad: SquadConfig | None = None):
        """``train=None`` (or empty): evaluation only, no training windows are built. ``squad``: the ``[squad]``
        section (its defaults when None)."""
        train = train or []
        self.name, self.fcfg, self.version_2 = f"finetune-{name}", fcfg, version_2
        self.squad = squad = squad if squad is not None else SquadConfig()
        self.do_lower_case = do_lower_case
        from ptm_jax.families import registry

        fam = registry.get(model_cfg.family)
        model_cls = fam.finetuning.task_heads.get("question_answering")
        if model_cls is None:
            raise ConfigError(f"model.family={model_cfg.family!r} has no question-answering head")
        self.model = model_cls()(model_cfg)
        kw = dict(max_seq_length=fcfg.max_seq_length, doc_stride=squad.doc_stride,
                  max_query_length=squad.max_query_length, layout=fam.finetuning.qa_layout)
        train_features = convert_examples_to_features(list(train), tokenizer, is_training=True, **kw) if train else []
        if train and not train_features:
            raise DataError(f"{name}: none of the {len(train)} training questions has a locatable answer")
        self.train = labelled_arrays(train_features) if train_features else None
        self.num_train = len(train_features)
        self.num_train_questions = sum(1 for e in train if e.trainable)
        self.dev_examples = list(dev)
        self.dev_features: list[SquadFeature] = []
        self.dev = None
        if dev:
            if all(e.trainable for e in dev):  # the same windows, with labels for the dev loss
                self.dev_features = convert_examples_to_features(self.dev_examples, tokenizer, is_training=True, **kw)
                self.dev = labelled_arrays(self.dev_features)
            else:  # every question is predicted; those without a locatable answer add no dev loss
                self.dev_features = convert_examples_to_features(self.dev_examples, tokenizer, **kw)
                labelled = convert_examples_to_features(self.dev_examples, tokenizer, is_training=True, **kw)
                self.dev = labelled_arrays(self.dev_features, {(f.example_index, f.doc_span_index):
                                                               (f.start_position, f.end_position) for f in labelled})
        self._gold = dataset_json(self.dev_examples)

    # ------------------------------------------------------------------ model

    def init(self, rng, batch):
        b = {k: jnp.asarray(batch[k][:1]) for k in MODEL_KEYS}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"])

    def normalizers(self, batch):
        return {"n": jnp.sum(batch["weights"])}

    def _logits(self, params, batch, rng, train: bool) -> tuple[jax.Array, jax.Array]:
        rngs = {"dropout": rng} if train and rng is not None else None
        start, end = self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                      deterministic=not train, rngs=rngs)
        valid = batch["input_mask"] > 0
        return jnp.where(valid, start, MASKED_LOGIT), jnp.where(valid, end, MASKED_LOGIT)

    def loss(self, params, batch, rng, normalizers, train: bool):
        start, end = self._logits(params, batch, rng, train)
        w = batch["weights"]
        ce_s = optax.softmax_cross_entropy_with_integer_labels(start, batch["start_positions"])
        ce_e = optax.softmax_cross_entropy_with_integer_labels(end, batch["end_positions"])
        per = 0.5 * (ce_s + ce_e)
        hit = ((jnp.argmax(start, -1) == batch["start_positions"])
               & (jnp.argmax(end, -1) == batch["end_positions"])).astype(jnp.float32)
        terms = {"loss": (jnp.sum(per * w), jnp.sum(w)), "span_accuracy": (jnp.sum(hit * w), jnp.sum(w))}
        return jnp.sum(per * w) / jnp.maximum(normalizers["n"], 1.0), terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        start, end = self._logits(params, batch, None, False)
        return {"start_logits": start, "end_logits": end}

    # ------------------------------------------------------------------ answers and metrics

    def _postprocess(self, outputs: dict[str, np.ndarray]) -> tuple[dict[str, str], dict, dict[str, float]]:
        """(best answer per question, nbest, null_odds); v2: the best non-null answer (no threshold)."""
        n = len(self.dev_features)
        start, end = outputs["start_logits"][:n], outputs["end_logits"][:n]
        if len(start) != n:
            raise DataError(f"{self.name}: {len(start)} predicted rows for {n} dev features")
        f = self.squad
        return postprocess(self.dev_examples, self.dev_features, start, end, n_best_size=f.n_best_size,
                           max_answer_length=f.max_answer_length, version_2=self.version_2,
                           null_threshold=math.inf, do_lower_case=self.do_lower_case)

    def _threshold(self, best: dict[str, str], null_odds: dict[str, float]) -> dict[str, str]:
        """v2: the answer is "" iff null_odds > squad.null_score_threshold (run_squad)."""
        if not self.version_2:
            return best
        t = self.squad.null_score_threshold
        return {q: ("" if null_odds[q] > t else a) for q, a in best.items()}

    def answers(self, outputs: dict[str, np.ndarray]) -> tuple[dict[str, str], dict, dict[str, float]]:
        """(predictions, nbest, null_odds) from the predicted logits of every dev feature, in order."""
        best, nbest, null_odds = self._postprocess(outputs)
        return self._threshold(best, null_odds), nbest, null_odds

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        if not self.dev_examples:
            return {}
        best, _, null_odds = self._postprocess(outputs)
        preds = self._threshold(best, null_odds)
        if not self.version_2:
            r = evaluate_v1(self._gold, preds)
            return {"exact_match": float(r["exact_match"]), "f1": float(r["f1"])}
        main = evaluate_v2(self._gold, preds)
        # threshold sweep over the best non-null answers (official evaluate-v2.0 with --na-prob-file)
        sweep = evaluate_v2(self._gold, best, na_probs=null_odds, na_prob_thresh=math.inf)
        out = {"exact_match": float(main["exact"]), "f1": float(main["f1"])}
        for k in ("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
            if k in main:
                out[k] = float(main[k])
        for k in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"):
            out[k] = float(sweep[k])
        return out

    def write_predictions(self, outputs: dict[str, np.ndarray], out_dir, split: str) -> list[str]:
        """predictions.json, nbest_predictions.json and (v2) null_odds.json, run_squad's names and layout."""
        from ptm_jax.evaluate.predictions import write_squad_predictions

        preds, nbest, null_odds = self.answers(outputs)
        return list(write_squad_predictions(out_dir, preds, nbest, null_odds if self.version_2 else None).values())

    # ------------------------------------------------------------------ data streams

