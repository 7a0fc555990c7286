"""How word2vec's and fastText's objectives stream their batches: the objective's ``batch_maker`` (numpy, no
TensorFlow; ``data.grouped_maker``) through tf.data, one batch at a time (``SourceStreams.train_batches``) or
one ``train.steps_per_call`` group at a time (``train_groups``, ``objectives.base.BuildsGroups``)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ptm_jax.data.numpy_streams import numpy_batches
from ptm_jax.families.word2vec.data import batch_dataset, feature_dtype
from ptm_jax.objectives.base import SourceStreams


class MakerStreams(SourceStreams):
    """``dataset`` and ``train_groups`` from the objective's ``batch_maker(source, start, global_batch,
    process_index, process_count, repeat) -> (make, shapes)``."""

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        make, shapes = self.batch_maker(source, start, global_batch, pi, pc, repeat)
        return batch_dataset(make, shapes, feature_dtype, start // global_batch)

    def train_groups(self, start_example: int, global_batch: int, k: int, process_index: int, process_count: int
                     ) -> Iterator[dict[str, np.ndarray]]:
        """``train_batches`` k at a time, stacked ([k, rows, ...]): one builder call a group."""
        make, shapes = self.batch_maker(self.train_source, start_example, global_batch, process_index,
                                        process_count, True)
        first = start_example // global_batch
        return numpy_batches(batch_dataset(lambda g: make(first + g * k, k),
                                           {name: (k,) + shape for name, shape in shapes.items()}, feature_dtype, 0))
