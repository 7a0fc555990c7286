"""The skip-gram and CBOW objectives (Mikolov et al. 2013b, eq. 4 for negative sampling, Sec. 2.1 for the
hierarchical softmax) on the examples of ``families/word2vec/data.py``.

Per (input h, target w) pair the terms are word2vec.c's: negative sampling
``-log s(u_w . h) - sum_k log s(-u_k . h)`` and, with hs, ``-sum_j log s((1 - 2 code_j) u_{point_j} . h)``
over the target's Huffman path (s the logistic function; word2vec.c's gradient ``(label - s(f)) alpha``).

The loss is the SUM of these terms over the global batch, not their mean. So plain SGD at word2vec.c's
``alpha`` (``train.optimizer='sgd'``, ``train.learning_rate`` = alpha) moves every row by exactly the step
word2vec.c gives each pair, ``alpha (label - s(f)) h``; a mean would need the learning rate multiplied by the
number of pairs of each batch, which varies with subsampling and the dynamic window. The differences from
word2vec.c: a batch's pairs are applied together (to the parameters before the batch) rather than one after
the other (word2vec.c's threads already apply theirs without locks, Hogwild), and a row taking part in more
than ``model.duplicate_cap`` pairs of one batch has its summed step scaled down to that many (``model.py``
``Word2VecTables``: without it the commonest words' stale summed steps diverge at batch 4096). Linear decay to
1e-4 alpha is ``train.lr_decay='bert'``, ``warmup_steps=0``, ``min_lr_ratio=1e-4`` (word2vec.c decays by words
read, and a step reads ``batch_size`` running words, so the two schedules are the same).

Reported: ``loss`` and ``w2v_loss`` (the same: terms per pair, the mean over the batch's pairs), ``loss_sum``
(the summed loss the step differentiates, which grows with the batch's pair count: not a curve to read for
convergence) and ``w2v_pairs``. The gradient is the sum's; only what is logged as ``loss`` is the mean.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.families.word2vec.artifacts import source_counts  # noqa: F401  (its home before artifacts.py)
from ptm_jax.families.word2vec.data import (Tables, block_rows, feature_dtype, feature_shapes, pair_slots,
                                            word2vec_batches)
from ptm_jax.families.word2vec.model import TRUNK, Word2Vec, per_pair, row_ids, scores_from_rows
from ptm_jax.families.word2vec.streams import MakerStreams
from ptm_jax.families.word2vec.table_steps import TableSteps, sparse_rows
from ptm_jax.train.step import capped_row_gradients

EVAL_SEED_OFFSET = 1_000_003


class Word2VecObjective(TableSteps, MakerStreams):
    """``cfg``: a run config whose ``model`` is a ``Word2VecConfig`` and ``data`` a ``Word2VecDataConfig``;
    ``counts``: occurrences of each word id (the word vocabulary's ``vocab.tsv`` counts); ``tables``: the sampling
    tables already built from them (the ``sampling_tables`` artifact, ``artifacts.py``), else built here."""

    primary_metric = "w2v_loss"
    trunk = TRUNK

    def __init__(self, cfg: Any, name: str, train_source: DocumentSource, eval_source: DocumentSource | None,
                 counts: np.ndarray | None, special_ids, eos_id: int, pad_id: int, tables: Tables | None = None,
                 initial_vectors: tuple[np.ndarray, np.ndarray] | None = None):
        cfg.model.validate()
        cfg.data.validate_word2vec()
        self.cfg, self.name = cfg, name
        self.cbow = name == "cbow"
        d = cfg.data
        if tables is None:
            counts = np.asarray(counts)
            if counts.shape[0] > cfg.model.vocab_size:
                from ptm_jax.errors import ConfigError

                raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the word vocabulary "
                                  f"({counts.shape[0]} entries); set model.vocab_size >= {counts.shape[0]}")
            counts = np.pad(counts, (0, cfg.model.vocab_size - counts.shape[0]))
            tables = Tables.build(counts, special_ids, sample=float(d.sample), negative=d.negative, hs=d.hs)
        elif tables.keep.shape[0] != cfg.model.vocab_size:
            from ptm_jax.errors import ConfigError

            raise ConfigError(f"the sampling tables have {tables.keep.shape[0]} rows but model.vocab_size="
                              f"{cfg.model.vocab_size}; delete the sampling_tables artifact to rebuild it")
        self.tables = tables
        self.initial_vectors = initial_vectors
        """(matrix [V, dim], found [V]): rows of the input table taken from ``model.init_vectors``."""
        self.block = block_rows(cfg.train.batch_size, d.pack_rows)
        """Rows of a packing block (``data.py``): a function of the config, not of the mesh or host count."""
        self.slots = pair_slots(tables, d.window, d.pair_slots)
        self.model = Word2Vec(cfg.model, cbow=self.cbow, negative=d.negative > 0, hs=bool(d.hs), block=self.block,
                              window=d.window, trunk=self.trunk)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)
        self.sparse_rows = sparse_rows(cfg)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        d = self.cfg.data
        shapes = feature_shapes(batch_size, window=d.window, negative=d.negative, cbow=self.cbow,
                                depth=self.tables.depth, slots=self.slots, shared=d.shared_negatives)
        shapes.pop("example_id")
        return {k: np.zeros(s, feature_dtype(k)) for k, s in shapes.items()}  # 'center' first: words per step

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        params = self.model.init(rng, {k: jnp.zeros((self.block,) + v.shape[1:], v.dtype) for k, v in batch.items()})
        if self.initial_vectors is not None:
            from ptm_jax.export.vector_files import with_initial_rows

            params = with_initial_rows(params, (self.trunk, "input"), *self.initial_vectors)
        return params

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        pairs = batch["center_weight"].sum() if self.cbow else batch["pair_weight"].sum()
        return {"pairs": pairs.astype(jnp.float32)}

    def loss(self, params, batch, rng, normalizers, train: bool):
        return self.loss_of_scores(self.model.apply(params, batch), batch, normalizers)

    def loss_of_scores(self, scores, batch, normalizers):
        """The summed terms (module doc) of the scores of ``model.scores_from_rows``: per pair slot (skip-gram,
        its center's negative and path weights) or per center (CBOW)."""
        if self.cbow:
            pair_w = batch["center_weight"][:, None]                                          # [R, 1]

            def of_center(x):
                return x[:, None]
        else:
            pair_w = batch["pair_weight"]                                                      # [R, c]

            def of_center(x):
                return per_pair(x, batch["pair_row"], self.block)
        total = jnp.zeros((), jnp.float32)
        if "positive" in scores:
            total += -jnp.sum(jax.nn.log_sigmoid(scores["positive"]) * pair_w)
            neg_w = batch["negative_weight"]
            neg_w = of_center(neg_w) if neg_w.ndim == 2 else neg_w                           # [R, P, K]
            total += -jnp.sum(jax.nn.log_sigmoid(-scores["negative"]) * neg_w * pair_w[:, :, None])
        if "hs" in scores:
            sign = 1.0 - 2.0 * of_center(batch["code"])                                        # bit 0 -> label 1
            w = pair_w[:, :, None] * of_center(batch["path_weight"])
            total += -jnp.sum(jax.nn.log_sigmoid(sign * scores["hs"]) * w)
        return self.loss_terms(total, batch, normalizers)

    def loss_terms(self, total, batch, normalizers):
        pairs = jnp.sum(batch["pair_weight"])
        # "loss" overrides the step's scalar (the sum it differentiates) in the logged metrics with the mean
        terms = {"loss": (total, normalizers["pairs"]), "loss_sum": (total, jnp.ones(())),
                 "w2v_loss": (total, normalizers["pairs"]), "w2v_pairs": (pairs, jnp.ones(())),
                 "w2v_dropped_pairs": (jnp.sum(batch["dropped"]), jnp.ones(()))}
        return total, terms

    def row_gradients(self, params, batch, rng, normalizers):
        """The sparse path (``train/step.py`` ``sparse_sgd_step``): (loss, terms, {table: (ids [N], rows [N, d])})
        with ``rows`` the gradient of the loss with respect to each gathered row, scaled by
        min(1, duplicate_cap / n) for a row read n times by live entries. Adding ``-lr x rows`` at ``ids`` is the
        dense path's SGD step on the gradient of ``Word2VecTables`` (the same sums), touching only these rows."""
        tables = params["params"][self.trunk]
        ids = row_ids(batch, self.model.negative, self.model.hs)
        rows = {k: tables[k].at[i].get(mode="promise_in_bounds") for k, (i, _) in ids.items()}

        def loss_fn(r):
            scores = scores_from_rows(r, batch, self.cbow, self.block, self.cfg.data.window)
            return self.loss_of_scores(scores, batch, normalizers)

        (loss, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(rows)
        return loss, terms, capped_row_gradients({k: i for k, (i, _) in ids.items()}, grads, tables,
                                                 float(self.cfg.model.duplicate_cap),
                                                 updates={k: (w > 0).astype(jnp.float32) for k, (_, w) in ids.items()})

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return dict(metrics)

    def batch_maker(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        """(``make``, ``shapes``) of ``data.word2vec_batches``: ``make(i)`` builds batch ``i``'s numpy arrays."""
        d = self.cfg.data
        seed = int(d.seed) if repeat else int(d.seed) + EVAL_SEED_OFFSET
        return word2vec_batches(source, self.tables, eos_id=self.eos_id, pad_id=self.pad_id, window=d.window,
                                negative=d.negative, cbow=self.cbow, reach=d.reach, seed=seed, start_index=start,
                                global_batch=global_batch, block=self.block, slots=self.slots,
                                process_index=pi, process_count=pc, shared=d.shared_negatives)
