"""fastText's skip-gram and CBOW objectives with negative sampling (Bojanowski et al. 2017, Sec. 3.1, eq. on
the binary logistic loss; facebookresearch/fastText ``src/loss.cc`` ``NegativeSamplingLoss``) on the examples of
``families/fasttext/data.py``.

Per (hidden h, target w) pair the terms are ``-log s(u_w . h) - sum_k log s(-u_k . h)`` over the K negatives
(s the logistic function), fastText's ``binaryLogistic`` with labels 1 and 0. A negative equal to the pair's
target is masked (fastText redraws it). As word2vec's objective (``families/word2vec/objective.py``), the loss
is the SUM over the global batch, so plain SGD at fastText's ``lr`` moves each row by the step fastText gives
each pair, and linear decay to zero is ``train.lr_decay='bert'``, ``warmup_steps=0`` (fastText decays
``lr * (1 - progress)`` by tokens read; a step reads ``batch_size`` running words). Differences from fastText:
a batch's pairs are applied together, rows in more than ``model.duplicate_cap`` pair updates of one batch (a
skip-gram center's unit rows count each of its pairs) have their summed step scaled down (word2vec's ``Word2VecTables``), and the K negatives of a center are shared by its
skip-gram pairs by default (``data.shared_negatives=false``: drawn per pair, as fastText and gensim do).

With plain SGD (``model.sparse_update``, the default) the step is ``train/step.py``'s ``sparse_sgd_step``:
``row_gradients`` gives the gradient of each row the batch read (the capped sums above) and ``apply_rows``
scatter-adds ``-lr x`` them into the tables, as fastText touches only those rows; the dense path's update
(``tests/test_fasttext.py`` checks both on one batch).

Reported: ``loss`` and ``ft_loss`` (the same: terms per pair, the mean over the batch's pairs), ``loss_sum``
(the summed loss the step differentiates) and ``ft_pairs``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.errors import ConfigError
from ptm_jax.families.fasttext.data import fasttext_batches, feature_dtype, feature_shapes, unit_slots
from ptm_jax.families.fasttext.model import TRUNK, FastText, row_ids, scores_from_rows
from ptm_jax.families.fasttext.subwords import Subwords
from ptm_jax.families.word2vec import sampling
from ptm_jax.families.word2vec.data import Tables, block_rows, pair_slots
from ptm_jax.families.word2vec.streams import MakerStreams
from ptm_jax.families.word2vec.table_steps import TableSteps, sparse_rows
from ptm_jax.train.step import capped_row_gradients

EVAL_SEED_OFFSET = 1_000_003


class FastTextObjective(TableSteps, MakerStreams):
    """``cfg``: a run config whose ``model`` is a ``FastTextConfig`` and ``data`` a ``FastTextDataConfig``;
    ``counts``: occurrences of each word id; ``subwords``: the vocabulary's n-gram table (``subwords.py``)."""

    primary_metric = "ft_loss"
    trunk = TRUNK

    def __init__(self, cfg: Any, name: str, train_source: DocumentSource, eval_source: DocumentSource | None,
                 counts: np.ndarray, special_ids, subwords: Subwords, eos_id: int, pad_id: int,
                 initial_vectors: tuple[np.ndarray, np.ndarray] | None = None):
        cfg.model.validate()
        cfg.data.validate_word2vec()
        self.cfg, self.name = cfg, name
        self.cbow = name.endswith("cbow")
        d = cfg.data
        if self.cbow and not d.shared_negatives:
            raise ConfigError("data.shared_negatives=false draws negatives per (center, context) pair, which only "
                              f"skip-gram has; {name} predicts each center once: leave it true")
        counts = np.asarray(counts)
        if counts.shape[0] > cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the word vocabulary "
                              f"({counts.shape[0]} entries); set model.vocab_size >= {counts.shape[0]}")
        if subwords.ids.shape[0] != cfg.model.vocab_size:
            raise ConfigError(f"the n-gram table has {subwords.ids.shape[0]} rows but model.vocab_size="
                              f"{cfg.model.vocab_size}; rebuild it with this config (prepare_corpus)")
        counts = np.pad(counts, (0, cfg.model.vocab_size - counts.shape[0]))
        tables = Tables.build(counts, special_ids, sample=float(d.sample), negative=d.negative, hs=False)
        cdf = sampling.unigram_cdf(sampling.word_counts(counts, special_ids), float(d.ns_exponent))
        self.tables = dataclasses.replace(tables, cdf=cdf)
        self.subwords = subwords
        self.initial_vectors = initial_vectors
        """(matrix [vocab_size, dim], found [vocab_size]): the words' own input rows from ``model.init_vectors``."""
        self.block = block_rows(cfg.train.batch_size, d.pack_rows)
        self.slots = pair_slots(self.tables, d.window, d.pair_slots)
        self.units = unit_slots(self.tables, subwords.lengths, sampling.word_counts(counts, special_ids), d.window,
                                self.cbow, d.unit_slots)
        """Pair and unit slots per row of a packing block of ``block`` rows (``data.py``)."""
        self.train_units = 0 if cfg.model.updates == "sequential" else self.units
        """The training batches' unit slots: none for the sequential updates, whose kernel reads the units from
        the subword table (``kernel_subwords``; evaluation batches keep ``units``)."""
        self._subwords_key = 0
        self.model = FastText(cfg.model, cbow=self.cbow, block=self.block)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)
        self.sparse_rows = sparse_rows(cfg)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        d = self.cfg.data
        shapes = feature_shapes(batch_size, window=d.window, negative=d.negative, cbow=self.cbow, slots=self.slots,
                                units=self.train_units, shared=bool(d.shared_negatives))
        shapes.pop("example_id")
        return {k: np.zeros(s, feature_dtype(k)) for k, s in shapes.items()}  # 'center' first: words per step

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        params = self.model.init(rng, {k: jnp.zeros((self.block,) + v.shape[1:], v.dtype) for k, v in batch.items()})
        if self.initial_vectors is None:
            return params
        matrix, found = self.initial_vectors
        v = matrix.shape[0]
        boxed = params["params"][TRUNK]["input"]
        table = getattr(boxed, "value", boxed)
        head = jnp.where(jnp.asarray(found)[:, None], jnp.asarray(matrix, table.dtype), table[:v])
        table = table.at[:v].set(head)                  # the words' own rows; the n-gram rows stay as drawn
        table = boxed.replace_boxed(table) if hasattr(boxed, "replace_boxed") else table
        trunk = {**params["params"][TRUNK], "input": table}
        return {**params, "params": {**params["params"], TRUNK: trunk}}

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        pairs = batch["center_weight"].sum() if self.cbow else batch["pair_weight"].sum()
        return {"pairs": pairs.astype(jnp.float32)}

    def loss(self, params, batch, rng, normalizers, train: bool):
        return self.loss_of_scores(self.model.apply(params, batch), batch, normalizers)

    def loss_of_scores(self, scores, batch, normalizers):
        if self.cbow:
            cw = batch["center_weight"]
            pos_w, neg_w = cw[:, None], cw[:, None] * batch["negative_weight"]
        else:
            pos_w, neg_w = batch["pair_weight"], batch["negative_weight"]
        total = (-jnp.sum(jax.nn.log_sigmoid(scores["positive"]) * pos_w)
                 - jnp.sum(jax.nn.log_sigmoid(-scores["negative"]) * neg_w))
        return self.loss_terms(total, batch, normalizers)

    def loss_terms(self, total, batch, normalizers):
        pairs = jnp.sum(batch["pair_weight"])
        # "loss" (the mean per pair) replaces the step's summed loss in the logged metrics; "loss_sum" is the sum
        return total, {"loss": (total, normalizers["pairs"]), "loss_sum": (total, jnp.ones(())),
                       "ft_loss": (total, normalizers["pairs"]), "ft_pairs": (pairs, jnp.ones(())),
                       "ft_dropped_pairs": (jnp.sum(batch["dropped"]), jnp.ones(()))}

    def row_gradients(self, params, batch, rng, normalizers):
        """The sparse path (``train/step.py`` ``sparse_sgd_step``): (loss, terms, {table: (ids [N], rows [N, d])}),
        ``rows`` the gradient of the loss with respect to each gathered row scaled by min(1, duplicate_cap / n)
        for a row taking part in n pair updates (``model.row_ids``): adding ``-lr x rows`` at ``ids`` is the dense path's SGD step (the
        same sums, ``FastTextTables``), touching only the rows read."""
        tables = params["params"][TRUNK]
        ids = row_ids(batch, self.cbow, self.block)
        rows = {k: tables[k].at[i].get(mode="promise_in_bounds") for k, (i, _) in ids.items()}

        def loss_fn(r):
            return self.loss_of_scores(scores_from_rows(r["input"], r["output"], batch, self.cbow, self.block),
                                       batch, normalizers)

        (loss, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(rows)
        return loss, terms, capped_row_gradients({k: i for k, (i, _) in ids.items()}, grads, tables,
                                                 float(self.cfg.model.duplicate_cap),
                                                 updates={k: n for k, (_, n) in ids.items()})

    def kernel_subwords(self) -> int:
        """The subword table, registered with the fused kernel once (``cpu_kernel.register_subwords``)."""
        if not self._subwords_key:
            from ptm_jax.families.word2vec import cpu_kernel

            self._subwords_key = cpu_kernel.register_subwords(self.subwords.ids, self.subwords.lengths)
        return self._subwords_key

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return dict(metrics)

    def batch_maker(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        """(``make``, ``shapes``) of ``data.fasttext_batches``: ``make(i)`` builds batch ``i``'s numpy arrays
        (training batches, ``repeat``, with ``train_units`` unit slots)."""
        d = self.cfg.data
        seed = int(d.seed) if repeat else int(d.seed) + EVAL_SEED_OFFSET
        return fasttext_batches(source, self.tables, self.subwords, eos_id=self.eos_id, pad_id=self.pad_id,
                                window=d.window, negative=d.negative, cbow=self.cbow, reach=d.reach, seed=seed,
                                start_index=start, global_batch=global_batch, block=self.block, slots=self.slots,
                                units=self.train_units if repeat else self.units, process_index=pi,
                                process_count=pc,
                                shared=bool(d.shared_negatives))
