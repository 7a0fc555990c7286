"""Data streams shared by the finetuning objectives: featurised examples held as numpy arrays.

Training: epochs of a permutation keyed on (seed, epoch) (file order with finetune.shuffle=false), this
process's rows of each global batch, resumable at any global example (the loop's data cursor). Evaluation:
every row once, in order, the last global batch padded with weight-0 rows so that metrics see each example
exactly once.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ptm_jax.errors import DataError


def shuffled_stream(n: int, seed: int, start: int, global_batch: int, process_index: int, process_count: int,
                    shuffle: bool = True) -> Iterator[np.ndarray]:
    """Row indices of this process's share of successive global batches over epochs of a seeded permutation
    (keyed on (seed, epoch): the same stream whatever the number of processes, resumable at any example).
    ``shuffle=False``: every epoch in row order."""
    per = global_batch // process_count
    k = start
    perms: dict[int, np.ndarray] = {}
    while True:
        idx = np.arange(k + process_index * per, k + (process_index + 1) * per)
        epochs = idx // n
        out = np.empty(per, np.int64)
        for e in np.unique(epochs):
            if e not in perms:
                perms = {e: np.random.default_rng([seed, int(e)]).permutation(n) if shuffle else np.arange(n)}
            sel = epochs == e
            out[sel] = perms[e][idx[sel] % n]
        yield out
        k += global_batch


def padded_batches(features: dict[str, np.ndarray], global_batch: int, process_index: int, process_count: int
                   ) -> Iterator[dict[str, np.ndarray]]:
    """All rows in order; the last global batch padded with weight-0 copies of row 0."""
    n = len(features["weights"])
    per = global_batch // process_count
    for start in range(0, n, global_batch):
        idx = np.arange(start + process_index * per, start + (process_index + 1) * per)
        real = idx < n
        batch = {k: v[np.where(real, idx, 0)] for k, v in features.items()}
        w = batch["weights"]  # [rows] or [rows, examples per row] (packed)
        batch["weights"] = np.where(real.reshape((-1,) + (1,) * (w.ndim - 1)), w, 0.0).astype(np.float32)
        yield batch


class ArrayTaskData:
    """Mixin: ``self.train`` / ``self.dev`` are dicts of equal-length arrays; ``self.num_train`` rows."""

    name: str
    train: dict[str, np.ndarray] | None
    dev: dict[str, np.ndarray] | None
    num_train: int

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        ref = self.train if self.train is not None else self.dev
        return {k: np.zeros((batch_size,) + v.shape[1:], v.dtype) for k, v in ref.items()}

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int):
        if self.train is None:
            raise DataError(f"{self.name}: no training features (evaluation-only objective)")
        for idx in shuffled_stream(self.num_train, self.fcfg.seed, start_example, global_batch, process_index,
                                   process_count, shuffle=self.fcfg.shuffle):
            yield {k: v[idx] for k, v in self.train.items()}

    def eval_batches(self, global_batch: int, process_index: int, process_count: int):
        if self.dev is None:
            return iter(())
        return padded_batches(self.dev, global_batch, process_index, process_count)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics


def task_head(model_cfg, head: str) -> type:
    """The Flax module class of finetuning head ``head`` of the model's family (``Finetuning.task_heads``), or a
    ConfigError saying that the family has none."""
    from ptm_jax.errors import ConfigError
    from ptm_jax.families import registry

    get = registry.get(model_cfg.family).finetuning.task_heads.get(head)
    if get is None:
        raise ConfigError(f"model.family={model_cfg.family!r} has no {head.replace('_', ' ')} head")
    return get()
