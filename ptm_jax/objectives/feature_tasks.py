"""Task models on word features: a classic head (``features.head``) over random embeddings, static vectors,
frozen per-layer features, or a model finetuned end to end under the head, trained through the loop's ``fit``
(``ptm finetune finetune.job=features``, ``jobs/features``).

* Sentence classification (a GLUE task, or the embedded task): :class:`FeatureClassificationObjective`,
  TextCNN / TextRNN / TextRCNN (``models/text_heads.py``); a pair task (MRPC, STS-B, RTE) reads both sentences
  through the same head and classifies ``[u; v; |u - v|; u * v]`` (InferSent's features). It is the spine's
  :class:`~ptm_jax.objectives.classification.SequenceClassificationObjective` with another model and
  featurisation, so the loss, GLUE metrics and prediction files are the same code.
* CoNLL-2003 NER: :class:`FeatureTaggingObjective`, a BiLSTM tagger with one label per word; the spine's
  :class:`~ptm_jax.objectives.tagging.TaggingObjective` with word positions for first pieces, so the loss and
  conlleval-style entity F1 (``evaluate/ner_metrics.py``) are the same code. Words past
  ``finetune.max_seq_length`` are predicted 'O' and counted.

What a word reads is ``finetune.init`` (``objectives/feature_inputs.py``). With per-layer features the
batches carry ``features`` [B, L, T, D] gathered from the cached store and the model learns only the scalar
mix (softmax weights and gamma, Peters et al. 2018 Eq. 1) and the head: the feature-based setting of ELMo
(Sec. 3.3) and of the BERT paper's Sec. 5.4; ``features.word_init`` adds a word table (random or static
vectors) whose vector is concatenated with the mix, ``[x_k; ELMo_k]`` as ELMo's task models read it, and
``features.feature_norm`` normalises the layers first. With static vectors the table is a parameter, frozen by a
parameter-group rule unless ``features.freeze_embeddings=false`` (Kim 2014's CNN-static / CNN-non-static).
With ``features.freeze_features=false`` a model with ``Inspection.word_encoder`` (BERT, GPT, XLNet, ERNIE) is
finetuned end to end under the head: its parameters sit beside the head's under its trunk key, started from
``finetune.init``, and every step runs it on the batch's pieces (its dropout off) and mixes its layers at the
words' first pieces, so the gradient of the head's loss reaches every layer (the fine-tuning setting of the
BERT paper Sec. 4, with a TextCNN in place of the pooled [CLS]). ``finetune.param_groups`` sets it apart, e.g.
``pattern = "^bert/"`` with ``lr = 0.05`` for a slower trunk.

The job (``jobs/features/job.py``, through the one finetuning stage) keeps the best parameters by the task
metric in ``<stage>/best`` (``params/`` in orbax's format and ``feature_model.json``: the head, the word table, the labels, the learned
scalar-mix weights), and writes ``summary.json`` with the final scalar mix.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax import fs
from ptm_jax.config import FinetuneConfig
from ptm_jax.data.tasks.conll import IGNORE_INDEX, ConllSentence
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.models.text_heads import (
    FeatureClassifier,
    FeatureTagger,
    WordInputs,
)
from ptm_jax.objectives.classification import SequenceClassificationObjective
from ptm_jax.objectives.feature_inputs import (
    FeatureStore,
    Source,
    WordTable,
    cached_features,
    resolve_source,
    text_words,
    word_table,
)
from ptm_jax.objectives.tagging import TaggingObjective, TagSet
from ptm_jax.train.hooks import Hook, Run
from ptm_jax.train.pretrained import merge_encoder

EMBEDDING_PATTERN = r"(^|/)inputs/embedding$"
FEATURE_STATS_PATTERN = r"(^|/)inputs/feature_(mean|scale)$"
STD_EPS = 1e-6
"""Added to each dimension's variance before 1 / sqrt (the cache stores float16: finer spreads are noise)."""


INPUT_KEYS = ("ids", "features", "mask", "ids_b", "features_b", "mask_b")
"""What the head model reads of a batch (``_b``: the second sentence of a pair)."""


class FeatureInputs:
    """Turns sentences (lists of words) into model inputs for one source: ``ids``/``mask`` rows for a word
    table; store row numbers and ``mask`` for frozen per-layer features (gathered per batch by :meth:`expand`);
    or, finetuning end to end (``features.freeze_features=false``), the trunk's input ``pieces``/``piece_mask``
    with each word's first piece ``first`` [T] (-1: cut), run through ``Inspection.word_encoder`` at every step
    (:meth:`encoder_features`). ``max_seq_length`` bounds the words (T) and, end to end, the pieces too."""

    def __init__(self, source: Source, fcfg: FinetuneConfig, hcfg: Any, train: Sequence[Sequence[str]],
                 held: Sequence[Sequence[str]], cache_dir: str | Path):
        self.source, self.length, self.cache_dir = source, fcfg.max_seq_length, cache_dir
        self.norm = hcfg.feature_norm
        self.stats: tuple[np.ndarray, np.ndarray] | None = None
        self.table: WordTable | None = None
        if self.norm != "none" and source.kind != "layers":
            raise ConfigError(f"features.feature_norm={self.norm!r} normalises per-layer features, but "
                              f"finetune.init gives {source.description}; set features.feature_norm=none")
        if self.norm == "dimension" and not hcfg.freeze_features:
            raise ConfigError("features.feature_norm='dimension' standardises frozen features by their training-set "
                              "statistics; finetuning end to end (features.freeze_features=false) the features move, "
                              "so use features.feature_norm='layer'")
        self.store: FeatureStore | None = None
        self.encoder = None
        if not hcfg.freeze_features:
            if source.kind != "layers":
                raise ConfigError(f"features.freeze_features=false finetunes a model with per-layer features end "
                                  f"to end, but finetune.init gives {source.description}; for word vectors set "
                                  "features.freeze_embeddings=false instead")
            from ptm_jax.evaluate.features import family_of

            fam = family_of(source.model_cfg)
            if fam.inspection.word_encoder is None:
                from ptm_jax.families import registry

                able = sorted(n for n, f in registry.families().items() if f.inspection.word_encoder is not None)
                raise ConfigError(f"features.freeze_features=false: model.family={fam.name!r} gives its features "
                                  f"frozen only (no Inspection.word_encoder); families that finetune end to end under "
                                  f"a head: {', '.join(able)}")
            self.encoder = fam.inspection.word_encoder(source.model_cfg, source.tokenizer)
        elif source.kind == "layers":
            self.store = FeatureStore()
        else:
            self.table = word_table(source, train, held, seed=fcfg.seed)
        self.word_source = source if self.table is not None else None
        if hcfg.word_init:
            if self.store is None:
                raise ConfigError(f"features.word_init={hcfg.word_init!r} adds a word table next to a model's frozen "
                                  f"per-layer features, but finetune.init gives {source.description}"
                                  + (" finetuned end to end" if self.encoder is not None else "")
                                  + "; set features.word_init='' (or finetune.init to such a model, frozen)")
            self.word_source = resolve_source(hcfg.word_init)
            if self.word_source.kind == "layers":
                raise ConfigError(f"features.word_init={hcfg.word_init!r} gives per-layer features; it takes "
                                  "'random', 'random:DIM', a word-vector file or a model with static word vectors")
            self.table = word_table(self.word_source, train, held, seed=fcfg.seed)

    def module(self) -> WordInputs:
        if self.store is None and self.table is not None:
            return WordInputs(len(self.table.words), self.source.dim, name="inputs")
        vocab, dim = (len(self.table.words), self.word_source.dim) if self.table is not None else (0, 0)
        return WordInputs(vocab, dim, num_layers=self.source.num_layers, feature_norm=self.norm, name="inputs")

    def encode(self, sentences: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
        n = np.array([min(len(s), self.length) for s in sentences])
        mask = (np.arange(self.length)[None, :] < n[:, None]).astype(np.int32)
        words = ({"ids": np.stack([self.table.ids(s, self.length)[0] for s in sentences])}
                 if self.table is not None else {})
        if self.store is None and self.table is not None:
            return {**words, "mask": mask}
        if self.encoder is not None:
            rows = self.encoder.encode(self.source.tokenizer, [list(s) for s in sentences], self.length)
            S = T = self.length
            pieces = np.full((len(rows), S), self.source.tokenizer.pad_id, np.int32)
            piece_mask = np.zeros((len(rows), S), np.int32)
            first = np.full((len(rows), T), -1, np.int32)
            for r, row in enumerate(rows):
                pieces[r, :len(row.ids)], piece_mask[r, :len(row.ids)] = row.ids, 1
                first[r, :min(len(row.first), T)] = row.first[:T]
            return {"pieces": pieces, "piece_mask": piece_mask, "first": first, "mask": (first >= 0).astype(np.int32)}
        rows = self.store.append(cached_features(self.source, sentences, self.cache_dir))
        return {**words, "row": rows.astype(np.int64), "mask": mask}

    def expand(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.store is not None and ("row" in batch or "row_b" in batch):
            batch = dict(batch)
            for suffix in ("", "_b"):
                if "row" + suffix in batch:
                    batch["features" + suffix] = self.store.dense(batch.pop("row" + suffix), self.length)
        return batch

    def encoder_features(self, trunk_params: Any, batch: dict[str, Any], suffix: str = "") -> jax.Array:
        """[B, L+1, T, H]: every layer of the trunk at each word's first piece (zeros for cut words)."""
        hs = self.encoder.hidden_states(trunk_params, batch["pieces" + suffix], batch["piece_mask" + suffix])
        first = batch["first" + suffix]
        got = jnp.take_along_axis(hs, jnp.maximum(first, 0)[None, :, :, None], axis=2)  # [L+1, B, T, H]
        got = jnp.where((first >= 0)[None, :, :, None], got, 0.0)
        return jnp.transpose(got, (1, 0, 2, 3))

    def standardize(self, train: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``features.feature_norm='dimension'``: (mean, 1 / standard deviation), float32 [L, D] each, over the real
        words of the training rows ``train['row']`` (and ``row_b``) that the model reads (the first
        ``max_seq_length`` of each sentence), accumulated in float64; kept in :attr:`stats`."""
        store = self.store
        rows = np.unique(np.concatenate([train[k] for k in ("row", "row_b") if k in train]))
        L, D = store.data.shape[1:]
        total, sq, n = np.zeros((L, D)), np.zeros((L, D)), 0
        for chunk in np.array_split(rows, max(1, len(rows) // 4096)):
            spans = [np.arange(store.offsets[r], min(store.offsets[r + 1], store.offsets[r] + self.length))
                     for r in chunk]
            x = store.data[np.concatenate(spans)].astype(np.float64)
            total += x.sum(axis=0)
            sq += np.square(x).sum(axis=0)
            n += x.shape[0]
        if n == 0:
            raise DataError("features.feature_norm='dimension': the training rows have no words to take "
                            "statistics from")
        mean = total / n
        var = np.maximum(sq / n - np.square(mean), 0.0)
        self.stats = (mean.astype(np.float32), (1.0 / np.sqrt(var + STD_EPS)).astype(np.float32))
        return self.stats

    def initial_params(self):
        """``fit``'s init_params: the pretrained trunk (end to end); else the values put into the head's inputs:
        the table's rows from the static vectors and the training set's feature statistics
        (``feature_norm='dimension'``, after :meth:`standardize`). None when there is nothing to put."""
        if self.encoder is not None:
            from ptm_jax.export.params import to_layout

            return merge_encoder(to_layout(self.source.params, False), self.encoder.trunk)
        puts = {}
        if self.table is not None and self.table.matrix is not None:
            puts["embedding"] = ("word table", self.table.matrix)
        if self.stats is not None:
            mean, scale = self.stats
            puts.update(feature_mean=("feature statistics", mean), feature_scale=("feature statistics", scale))
        return put_into_inputs(puts)


def put_into_inputs(puts: dict[str, tuple[str, Any]]):
    """``fit``'s init_params that set the named leaves of the model's ``inputs`` module (``{leaf: (what, value)}``,
    e.g. the word table's rows from static vectors) in the fresh initialisation; None when there is nothing to put."""
    if not puts:
        return None

    def merge(fresh):
        fresh = jax.tree.map(lambda x: x, fresh)
        inputs = fresh["params"]["inputs"]
        for name, (what, value) in puts.items():
            if tuple(inputs[name].shape) != value.shape:
                raise ConfigError(f"{what} {value.shape} does not fit the model's {tuple(inputs[name].shape)}")
            inputs[name] = jax.device_put(value, inputs[name].sharding)
        return fresh

    return merge


class FeatureData:
    """Mixin over :class:`~ptm_jax.objectives.task_data.ArrayTaskData`: batches through ``FeatureInputs.expand``
    and the model called on a dict of inputs; end to end, the trunk's parameters sit beside the head's under
    its trunk key and its features are computed inside the loss."""

    features: FeatureInputs
    pair: bool = False
    """Whether the examples are sentence pairs (a classification task over two texts); a tagger's never are."""

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        ref = self.train if self.train is not None else self.dev
        out = {k: np.zeros((batch_size,) + v.shape[1:], v.dtype) for k, v in ref.items() if not k.startswith("row")}
        for suffix in ("", "_b"):
            if "row" + suffix in ref:
                store = self.features.store
                out["features" + suffix] = np.zeros(
                    (batch_size, store.num_layers, self.features.length, store.data.shape[2]), np.float32)
        return out

    def train_batches(self, start_example, global_batch, process_index, process_count):
        for b in super().train_batches(start_example, global_batch, process_index, process_count):
            yield self.features.expand(b)

    def eval_batches(self, global_batch, process_index, process_count):
        return (self.features.expand(b) for b in super().eval_batches(global_batch, process_index, process_count))

    def _split(self, params, batch) -> tuple[Any, dict[str, Any]]:
        """(the head model's variables, its inputs): end to end, the trunk's features of the batch."""
        enc = self.features.encoder
        if enc is None:
            return params, {k: batch[k] for k in INPUT_KEYS if k in batch}
        head = dict(params["params"])
        trunk = head.pop(enc.trunk)
        inputs = {"features": self.features.encoder_features(trunk, batch), "mask": batch["mask"]}
        if "pieces_b" in batch:
            inputs.update(features_b=self.features.encoder_features(trunk, batch, "_b"), mask_b=batch["mask_b"])
        return {**params, "params": head}, inputs

    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        enc = self.features.encoder
        if enc is None:
            return self.model.init(rng, {k: b[k] for k in INPUT_KEYS if k in b})
        trunk_rng, head_rng = jax.random.split(rng)
        trunk = enc.init(trunk_rng, b["pieces"], b["piece_mask"])
        shape = (1, self.features.source.num_layers, self.features.length, int(enc.cfg.hidden_size))
        inputs = {"features": jnp.zeros(shape), "mask": b["mask"]}
        if "pieces_b" in b:
            inputs.update(features_b=jnp.zeros(shape), mask_b=b["mask_b"])
        head = self.model.init(head_rng, inputs)
        return {**head, "params": {**head["params"], enc.trunk: trunk}}

    def _logits(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        variables, inputs = self._split(params, batch)
        return self.model.apply(variables, inputs, deterministic=not train, rngs=rngs)


class FeatureClassificationObjective(FeatureData, SequenceClassificationObjective):
    """A single-sentence task through the head, or a pair task (MRPC, STS-B, RTE, ...) through the same head on
    each sentence and ``[u; v; |u - v|; u * v]`` (``models/text_heads.FeatureClassifier`` ``pair``)."""

    head = "feature_classifier"

    def __init__(self, spec, train, dev, fcfg: FinetuneConfig, hcfg: Any, features: FeatureInputs):
        self.features, self.hcfg = features, hcfg
        self.pair = any(e.text_b is not None for e in [*(train or ()), *dev])
        super().__init__(None, spec, train, dev, None, fcfg)

    def build_model(self, model_cfg):
        f, h = self.fcfg, self.hcfg
        return FeatureClassifier(self.features.module(), h.head, self.num_labels, f.classifier_dropout,
                                 h.head_hidden, h.head_pool, pair=self.pair)

    def featurize(self, examples, tokenizer) -> dict[str, np.ndarray]:
        out = self.features.encode([text_words(e.text_a) for e in examples])
        if self.pair:
            out.update({f"{k}_b": v for k, v in self.features.encode([text_words(e.text_b or "")
                                                                       for e in examples]).items()})
        out["labels"] = np.asarray([(-1 if e.label is None else e.label) for e in examples],
                                   np.float32 if self.regression else np.int32)
        out["weights"] = np.ones(len(examples), np.float32)
        return out


class FeatureTaggingObjective(FeatureData, TaggingObjective):
    head = "feature_tagger"

    def __init__(self, fcfg: FinetuneConfig, hcfg: Any, train: Sequence[ConllSentence],
                 dev: Sequence[ConllSentence], labels: Sequence[str], features: FeatureInputs,
                 name: str = "conll2003", tagging: Any = None):
        if not train:
            raise DataError(f"{name}: no training sentences")
        self.name, self.fcfg, self.features = f"finetune-{name}", fcfg, features
        self.spec = TagSet(name, tuple(labels))
        self.label_to_id = {t: i for i, t in enumerate(self.spec.labels)}
        self.num_labels = len(labels)
        self.model = FeatureTagger(features.module(), self.num_labels, fcfg.classifier_dropout, hcfg.head_hidden)
        self._set_tagging(tagging)
        T = fcfg.max_seq_length
        self.train, self.num_train = self._arrays(train), len(train)
        self.train_truncated_words = sum(max(0, len(s.words) - T) for s in train)
        self.dev_sentences = list(dev)
        self.dev = self._arrays(dev) if dev else None
        self.dev_first_piece = [np.where(np.arange(len(s.words)) < T, np.arange(len(s.words)), -1).astype(np.int32)
                                for s in dev]
        self.dev_truncated_words = sum(max(0, len(s.words) - T) for s in dev)

    def init(self, rng, batch):
        return self._with_crf(rng, super().init(rng, batch))

    def _word_view(self, batch, logits):
        """A row is its words: (emissions, labels, word mask) as they are."""
        return logits, batch["labels"], batch["mask"].astype(bool)

    def _arrays(self, sentences: Sequence[ConllSentence]) -> dict[str, np.ndarray]:
        T = self.fcfg.max_seq_length
        out = self.features.encode([s.words for s in sentences])
        labels = np.full((len(sentences), T), IGNORE_INDEX, np.int32)
        for r, s in enumerate(sentences):
            tags = [self.label_to_id.get(t, IGNORE_INDEX) for t in s.tags[:T]]
            labels[r, :len(tags)] = tags
        out["labels"], out["weights"] = labels, np.ones(len(sentences), np.float32)
        return out


# ---------------------------------------------------------------------------------------------- the stage

def scalar_mix(params: Any) -> dict[str, Any] | None:
    """The learned mix: softmax of the weights per layer and gamma (None without a scalar mix)."""
    mix = params.get("params", params).get("inputs", {}).get("scalar_mix")
    if mix is None:
        return None
    w = np.asarray(jax.device_get(mix["weights"]), np.float64)
    s = np.exp(w - w.max())
    return {"weights": (s / s.sum()).round(6).tolist(), "gamma": float(np.asarray(jax.device_get(mix["gamma"]))[0])}


class KeepBestFeatures(Hook):
    """After each evaluation: the best parameters by the task metric go to ``<stage>/best`` (``params/`` and
    ``feature_model.json``), written in a staging folder and renamed into place (``export/params.py``).
    ``marker``: the record's file name (another job's word-feature model: its ``Job.model_marker``, ``cvt``)."""

    def __init__(self, stage: Path, objective: Any, info: dict[str, Any], marker: str = "feature_model.json"):
        self.stage, self.objective, self.info, self.marker = stage, objective, info, marker
        self.sign = -1.0 if objective.primary_metric.endswith("loss") else 1.0
        self.best: dict[str, Any] = {"step": -1, "value": -math.inf, "metrics": {}}
        if fs.exists(stage / "best.json") and fs.exists(stage / "best" / marker):
            self.best = json.loads(fs.read_text(stage / "best.json"))

    def on_eval(self, run: Run, metrics: dict[str, float]) -> None:
        value = self.sign * metrics.get(self.objective.primary_metric, float("nan"))
        if not (math.isfinite(value) and value > self.best["value"]):
            return
        import orbax.checkpoint as ocp

        from ptm_jax.export.params import _on_host
        from ptm_jax.export.staging import commit_dir, staging_dir

        self.best.update(step=run.step, value=value, metrics=metrics)
        out = self.stage / "best"
        tree = jax.tree.map(_on_host, run.state.params)  # every process: a sharded leaf is gathered
        tmp = staging_dir(out, overwrite=True, shared=True)
        ocp.PyTreeCheckpointer().save(fs.absolute(tmp / "params"), tree)
        if jax.process_index() == 0:
            meta = {**self.info, "step": run.step, "metrics": metrics, "scalar_mix": scalar_mix(run.state.params)}
            fs.write_text_atomic(tmp / self.marker, json.dumps(meta, indent=2) + "\n")
        commit_dir(tmp, out, shared=True)
        if jax.process_index() == 0:
            fs.write_text_atomic(self.stage / "best.json", json.dumps(self.best, indent=2))
