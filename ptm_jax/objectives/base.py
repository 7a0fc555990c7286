"""What the loop needs from an objective: the plug-in point for BERT, GPT, XLNet, ELMo, word2vec, ...

An ``Objective`` binds a model, its loss and its data streams. The loop only calls the methods below, so a
new family plugs in by adding one class and registering it in its family package
(``ptm_jax/families/registry.py``).

The contracts are runtime-checkable protocols, asked with ``isinstance`` rather than attribute probing:
``Objective`` (every objective), ``CarriesState`` (a step feeds state to the next one), ``TaskObjective``
(finetuning tasks: predictions and task metrics), ``ReadsRows`` (one stream yields any rows of a batch),
``ReportsBaseline`` (a reference figure for the final report), ``SavesParams`` (the kept model differs from the
trained tree) and ``PacksExamples`` (rows hold several examples). ``accepts_grad_accum`` says whether an
objective's loss may be split into microbatches; ``check_grad_accum`` turns a refusal into a ConfigError naming
``train.grad_accum_steps``.

Loss terms are ``name -> (numerator, denominator)``. ``normalizers(batch)`` returns the denominators of the
loss terms computed from the global batch alone, so a step with gradient accumulation computes exactly the
loss of the whole batch (sum of microbatch numerators / global denominator).
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

import flax.linen as nn
import jax
import numpy as np

from ptm_jax.data.numpy_streams import numpy_batches, numpy_steps

Batch = dict[str, Any]
Terms = dict[str, tuple[jax.Array, jax.Array]]


@runtime_checkable
class Objective(Protocol):
    name: str
    model: nn.Module
    primary_metric: str
    """Eval metric used to pick the best checkpoint (higher is better unless it ends with 'loss')."""

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        """Zeros with the shapes and dtypes of one global batch (init, ahead-of-time compile)."""

    def init(self, rng: jax.Array, batch: Batch) -> Any:
        """Boxed parameters (``nn.LogicallyPartitioned`` leaves)."""

    def normalizers(self, batch: Batch) -> dict[str, jax.Array]:
        """Denominators of the loss terms from the global batch alone."""

    def loss(self, params: Any, batch: Batch, rng: jax.Array | None, normalizers: dict[str, jax.Array],
             train: bool) -> tuple[jax.Array, Terms]:
        """Scalar loss (already divided by the global normalizers) and metric terms."""

    def train_batches(self, start_example: int, global_batch: int, process_index: int,
                      process_count: int) -> Iterator[dict[str, np.ndarray]]:
        """Share ``process_index`` of ``process_count`` equal blocks of successive global batches (rows
        [i*B/n, (i+1)*B/n) of each), starting at global example ``start_example``; the same examples whatever
        ``process_count``. The loop asks for the blocks a process's devices hold (``parallel/feed.py``
        ``local_batches``): on a host-ordered mesh block ``process_index`` of ``jax.process_count()``."""

    def eval_batches(self, global_batch: int, process_index: int, process_count: int
                     ) -> Iterator[dict[str, np.ndarray]]:
        """Held-out batches (finite), shared out as ``train_batches`` are."""

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        """Derived figures for the final report (e.g. perplexity, majority baseline)."""


@runtime_checkable
class ReadsRows(Protocol):
    """Optional: an objective whose one stream yields any set of rows of each global batch (its examples are
    indexed by global example id: BERT's and ERNIE's pairing plan, GPT's and NNLM's packed rows, XLNet's rows). On a TPU
    mesh a host's devices hold several blocks of the batch (``parallel/feed.py``); with this it reads them at
    the cost of one share, without it the feed runs one ``train_batches`` stream per block. Row r of batch b is
    example b * global_batch + r either way."""

    def train_row_batches(self, start_example: int, global_batch: int, rows: np.ndarray
                          ) -> Iterator[dict[str, np.ndarray]]:
        """Rows ``rows`` (ascending) of successive global batches from ``start_example`` on."""

    def eval_row_batches(self, global_batch: int, rows: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        """Rows ``rows`` of the held-out batches."""


@runtime_checkable
class CarriesState(Protocol):
    """Optional: an objective whose step feeds state to the next one (XLNet's Transformer-XL memory: the
    hidden states of a segment are the memory of the next segment of the same batch row, Dai et al. 2019
    Sec. 3.2). The loop keeps it in ``TrainState.carry``; the step stops gradients through it."""

    def init_carry(self, global_batch: int) -> Any:
        """Boxed (``nn.LogicallyPartitioned``) initial carry for a global batch, or None to carry nothing."""

    def loss_carrying(self, params: Any, batch: Batch, carry: Any, rng: jax.Array | None,
                      normalizers: dict[str, jax.Array], train: bool) -> tuple[jax.Array, Terms, Any]:
        """As ``Objective.loss``, reading ``carry`` and also returning the carry of the next step."""


@runtime_checkable
class BuildsGroups(Protocol):
    """Optional: an objective that builds ``train.steps_per_call`` batches at once better than one by one
    (word2vec: one example-builder call over their positions). Without it the loop stacks ``train_batches``
    (``train/multi_step.py`` ``stacked_batches``); either way the groups hold the same batches."""

    def train_groups(self, start_example: int, global_batch: int, k: int, process_index: int,
                     process_count: int) -> Iterator[Batch]:
        """``train_batches(start_example, global_batch, process_index, process_count)`` k at a time, each
        feature stacked on a new leading axis ([k, rows, ...])."""


@runtime_checkable
class SetsStatistics(Protocol):
    """Optional: parameters that a training step sets instead of training them (BatchNorm's running mean and
    variance, ``models/batch_norm.py``). The loop's train step calls ``loss_and_statistics`` in place of ``loss``
    and writes the statistics into the parameters after the optimizer's update; the family's parameter groups
    freeze them (no optimizer state, no update). Needs ``grad_accum_steps = 1`` and no carried state."""

    def loss_and_statistics(self, params: Any, batch: Batch, rng: jax.Array | None,
                            normalizers: dict[str, jax.Array], train: bool) -> tuple[jax.Array, Terms, Any]:
        """As ``Objective.loss``, also returning the statistics' new values: a tree of the parameters' nesting
        (``{'params': {...}}``) that holds only those leaves."""


@runtime_checkable
class TaskObjective(Protocol):
    """A finetuning task: evaluation also predicts every held-out example and scores the predictions."""

    num_train: int

    def predict(self, params: Any, batch: Batch) -> dict[str, jax.Array]:
        """Per-example outputs of one batch (gathered over the mesh by the loop)."""

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Task metrics of the held-out split from all its outputs (example order)."""


@runtime_checkable
class WritesPredictions(Protocol):
    def write_predictions(self, outputs: dict[str, np.ndarray], out: Any, split: str) -> list:
        """Prediction files of a split (e.g. GLUE's submission TSV); returns their paths."""


@runtime_checkable
class ReportsBaseline(Protocol):
    def baseline(self, global_batch: int) -> dict[str, float]:
        """A reference figure the trained model must beat (e.g. a unigram model's perplexity)."""


@runtime_checkable
class SavesParams(Protocol):
    """Optional: the kept model (``<stage>/best``) holds other params than the trained tree (ConSERT's bare encoder
    without its NLI head, LoRA's kernels with the adapters merged); ``train/finetune.py`` KeepBest saves these."""

    def saved_params(self, params: Any) -> Any:
        """The tree to save from the trained ``params``."""


@runtime_checkable
class PacksExamples(Protocol):
    """Optional: several training examples share a row (``data/tasks/packing.py``); ``num_train`` counts rows and
    ``num_examples`` the examples in them, which the finetuning summary reports."""

    num_examples: int


def accepts_grad_accum(objective: Any) -> bool:
    """False for an objective whose loss couples the rows of a batch (in-batch negatives: splitting it into
    microbatches changes the loss). An objective says so with a class attribute ``grad_accum = False``."""
    return bool(getattr(type(objective), "grad_accum", True))


def check_grad_accum(objective: Any, grad_accum_steps: int, carries: bool = False) -> None:
    """ConfigError when ``train.grad_accum_steps`` > 1 for an objective that refuses accumulation, or whose step
    carries state (``carries``: a ``CarriesState`` objective whose ``init_carry`` gave a carry)."""
    if grad_accum_steps == 1 or (accepts_grad_accum(objective) and not carries):
        return
    from ptm_jax.errors import ConfigError

    why = ("carries state from one step to the next" if carries
           else "couples the rows of a batch (e.g. in-batch negatives)")
    raise ConfigError(f"train.grad_accum_steps={grad_accum_steps}: objective {objective.name!r} {why}, so its "
                      "loss cannot be split into microbatches; set train.grad_accum_steps=1 (and raise "
                      "train.batch_size or the mesh instead)")


class SourceStreams:
    """Mixin of the pretraining objectives: their train and eval batches come from ``self.train_source`` /
    ``self.eval_source`` through one ``dataset(...)`` builder (a tf.data.Dataset of this process's rows)."""

    train_source: Any
    eval_source: Any

    def dataset(self, source: Any, start: int, global_batch: int, process_index: int, process_count: int,
                repeat: bool):
        raise NotImplementedError

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int
                      ) -> Iterator[dict[str, np.ndarray]]:
        return numpy_batches(self.dataset(self.train_source, start_example, global_batch, process_index,
                                          process_count, True))

    def eval_batches(self, global_batch: int, process_index: int, process_count: int
                     ) -> Iterator[dict[str, np.ndarray]]:
        if self.eval_source is None:
            return iter(())
        return numpy_batches(self.dataset(self.eval_source, 0, global_batch, process_index, process_count, False))


class RowStreams(SourceStreams):
    """``SourceStreams`` whose ``dataset`` also takes ``rows=`` (the rows of each global batch in place of a
    share) and may group ``steps_per_item`` local batches per element: the objective ``ReadsRows``, and a
    process with few rows pays a step's fixed cost once per ``GROUP_ROWS`` rows (``data/numpy_streams.py``)."""

    def dataset(self, source: Any, start: int, global_batch: int, process_index: int, process_count: int,
                repeat: bool, rows: np.ndarray | None = None):
        raise NotImplementedError

    def _batches(self, source: Any, start: int, global_batch: int, repeat: bool, process_index: int = 0,
                 process_count: int = 1, rows: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
        if source is None:
            return iter(())
        n = len(rows) if rows is not None else global_batch // process_count
        return numpy_steps(numpy_batches(self.dataset(source, start, global_batch, process_index, process_count,
                                                      repeat, rows=rows)), n)

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int
                      ) -> Iterator[dict[str, np.ndarray]]:
        return self._batches(self.train_source, start_example, global_batch, True, process_index, process_count)

    def eval_batches(self, global_batch: int, process_index: int, process_count: int
                     ) -> Iterator[dict[str, np.ndarray]]:
        return self._batches(self.eval_source, 0, global_batch, False, process_index, process_count)

    def train_row_batches(self, start_example: int, global_batch: int, rows: np.ndarray
                          ) -> Iterator[dict[str, np.ndarray]]:
        return self._batches(self.train_source, start_example, global_batch, True, rows=rows)

    def eval_row_batches(self, global_batch: int, rows: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        return self._batches(self.eval_source, 0, global_batch, False, rows=rows)
