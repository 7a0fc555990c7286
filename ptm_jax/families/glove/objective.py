"""GloVe's weighted least squares (Pennington et al. 2014, eq. 8-9; stanfordnlp/GloVe src/glove.c):

    J = sum_ij f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2,   f(x) = (x / x_max)^alpha if x < x_max else 1

over the nonzero entries of the co-occurrence matrix (``families/glove/cooccur.py``), batched by
``families/glove/data.py``. As in glove.c each entry contributes 0.5 f diff^2 and the step's loss is the *sum*
over the batch (not the mean), so an entry's gradient is glove.c's per-entry gradient f diff w~_j; the
reported ``glove_loss`` is the mean 0.5 f diff^2 per entry, the cost glove.c prints. The logged ``loss`` is that
mean too (the step's summed loss, which is what is differentiated, is logged as ``loss_sum``).

The optimizer is the loop's AdaGrad (``train.optimizer='adagrad'``). glove.c accumulates the squares of
eta * g from 1.0 and steps eta g / sqrt(1 + sum (eta g)^2) = g / sqrt(1/eta^2 + sum g^2): that is AdaGrad with
``learning_rate=1.0`` and ``adagrad_initial_accumulator=1/eta^2`` (400 for eta 0.05), as the presets set it
(optax adds the current g^2 before dividing; glove.c after). glove.c also clips each component of f diff w to
[-100, 100]; with f diff bounded by the data that never binds here, and it is not reproduced.
"""
from __future__ import annotations

from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.glove.cooccur import Cooccurrence
from ptm_jax.families.glove.model import GloveModel


def weighting(x: jax.Array, x_max: float, alpha: float) -> jax.Array:
    """f(x) = min(1, (x / x_max)^alpha) (paper eq. 9)."""
    return jnp.minimum(1.0, (x / x_max) ** alpha)


def glove_costs(pred: jax.Array, x: jax.Array, x_max: float, alpha: float) -> jax.Array:
    """0.5 f(X) (pred - log X)^2 per entry (glove.c's ``cost``)."""
    diff = pred - jnp.log(x)
    return 0.5 * weighting(x, x_max, alpha) * diff * diff


class GloveObjective:
    """``cfg``: a run config whose ``model`` is a ``GloveConfig``; ``cooc``: the corpus's co-occurrence
    matrix; ``data.seed`` keys each epoch's order of the entries."""

    primary_metric = "glove_loss"

    def __init__(self, cfg: Any, cooc: Cooccurrence):
        cfg.model.validate()
        if cooc.vocab_size != cfg.model.vocab_size:
            raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} but the co-occurrence matrix is over "
                              f"{cooc.vocab_size} words; set model.vocab_size={cooc.vocab_size}")
        if cooc.nnz == 0:
            raise ConfigError("the co-occurrence matrix is empty: nothing to train on")
        self.cfg = cfg
        self.name = "glove"
        self.model = GloveModel(cfg.model)
        self.cooc = cooc
        self._order = None

    @property
    def order(self):
        from ptm_jax.families.glove.data import TripleOrder

        if self._order is None:
            self._order = TripleOrder(self.cooc, self.cfg.data.seed)
        return self._order

    def epoch_steps(self, global_batch: int) -> float:
        """Steps per pass over the nonzero entries (glove.c's one iteration)."""
        return self.cooc.nnz / global_batch

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"x": np.ones(batch_size, np.float32), "row": np.zeros(batch_size, np.int32),
                "col": np.zeros(batch_size, np.int32)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        return self.model.init(rng, jnp.asarray(batch["row"][:1]), jnp.asarray(batch["col"][:1]))

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"glove": jnp.float32(batch["x"].shape[0])}

    def loss(self, params, batch, rng, normalizers, train: bool):
        m = self.cfg.model
        pred = self.model.apply(params, batch["row"], batch["col"])
        total = jnp.sum(glove_costs(pred, batch["x"], m.x_max, m.alpha))
        n = jnp.float32(batch["x"].shape[0])
        return total, {"loss": (total, n), "loss_sum": (total, jnp.ones(())), "glove_loss": (total, n)}

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int
                      ) -> Iterator[dict[str, np.ndarray]]:
        from ptm_jax.data.numpy_streams import numpy_batches
        from ptm_jax.families.glove.data import glove_dataset

        return numpy_batches(glove_dataset(self.order, start_index=start_example, global_batch=global_batch,
                                           process_index=process_index, process_count=process_count))

    def eval_batches(self, global_batch: int, process_index: int, process_count: int
                     ) -> Iterator[dict[str, np.ndarray]]:
        return iter(())  # GloVe holds out no entries: judge the vectors (evaluate/word_vectors.py)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return dict(metrics)
