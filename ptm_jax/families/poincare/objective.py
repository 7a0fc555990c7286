"""The Poincare-embedding objective (Nickel & Kiela 2017, eq. 6) and its Riemannian SGD (Sec. 3, eq. 4-5).

Per example (u, v) with negatives N(u): L = -log( e^{-d(u, v)} / sum_{v' in {v} + N(u)} e^{-d(u, v')} ), plus
``model.regularization`` x |v|^2 (gensim's ``regularization_coeff``; 0 by default). The loss the step
differentiates is the SUM over the batch, as gensim's ``PoincareBatch`` gradients are per example (its alpha is
a per-example step): ``loss`` and ``poincare_loss`` log the mean per example, ``loss_sum`` the sum.

The step is the family's own optimizer, through the spine's sparse-rows step (``train/step.py`` ``SparseRows``):
``row_gradients`` gives the Euclidean gradient of each gathered row (a burn-in example's scaled by
``model.burn_in_factor``), and ``apply_rows`` sums them per row (gensim's ``_handle_duplicates``), rescales each by
(1 - |theta|^2)^2 / 4 and retracts the moved rows into the ball (``geometry.riemannian_step``). So
``train.optimizer`` must be 'sgd' (plain: no decay, clipping, groups or accumulation), ``train.learning_rate`` is
the paper's eta (gensim's alpha) and ``lr_decay='constant'`` keeps it, as both references do.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.poincare.data import Examples, feature_dtype, feature_shapes
from ptm_jax.families.poincare.geometry import distance, riemannian_step
from ptm_jax.families.poincare.model import TRUNK, Poincare
from ptm_jax.families.word2vec.data import batch_dataset
from ptm_jax.objectives.base import SourceStreams

EVAL_SEED_OFFSET = 1_000_003


def check_optimizer(train_cfg: Any) -> None:
    t = train_cfg
    if (t.optimizer != "sgd" or t.weight_decay or t.clip_norm or t.param_groups or t.grad_accum_steps != 1):
        raise ConfigError("the poincare family trains by its Riemannian SGD (the spine's sparse-rows step): set "
                          "train.optimizer='sgd' with weight_decay=0, clip_norm=0, no param_groups and "
                          "grad_accum_steps=1")


class PoincareObjective(SourceStreams):
    """``train_source`` / ``eval_source``: a ``hierarchy.Hierarchy`` (eval: the same relations with the
    negatives of another seed)."""

    primary_metric = "poincare_loss"
    trunk = TRUNK
    sparse_rows = True

    def __init__(self, cfg: Any, name: str, train_source, eval_source):
        cfg.model.validate()
        cfg.data.validate_poincare()
        check_optimizer(cfg.train)
        self.cfg, self.name = cfg, name
        self.train_source, self.eval_source = train_source, eval_source
        self.model = Poincare(cfg.model)

    def examples(self, source, repeat: bool) -> Examples:
        d = self.cfg.data
        seed = int(d.seed) if repeat else int(d.seed) + EVAL_SEED_OFFSET
        return Examples(source, negative=d.negative, power=float(d.negative_power), tries=d.negative_tries,
                        burn_in=d.burn_in if repeat else 0, seed=seed)

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        rows = global_batch // pc
        ex = self.examples(source, repeat)

        def make(batch: int) -> dict[str, np.ndarray]:
            return ex.rows(batch * global_batch + pi * rows, rows)

        return batch_dataset(make, feature_shapes(rows, self.cfg.data.negative), feature_dtype,
                             start // global_batch)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        shapes = feature_shapes(batch_size, self.cfg.data.negative)
        shapes.pop("example_id")
        return {k: np.zeros(s, feature_dtype(k)) for k, s in shapes.items()}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        return self.model.init(rng, {k: jnp.asarray(v) for k, v in batch.items()})

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"examples": jnp.sum(batch["target_weight"][:, 0]).astype(jnp.float32)}

    def loss(self, params, batch, rng, normalizers, train: bool):
        u, targets = self.model.apply(params, batch)
        return self.loss_of_rows(u, targets, batch, normalizers)

    def loss_of_rows(self, u, targets, batch, normalizers):
        """The summed loss (module doc) of the gathered rows ``u`` [B, d] and ``targets`` [B, 1 + K, d]."""
        w = batch["target_weight"]
        d = distance(u[:, None, :], targets)                                           # [B, 1 + K]
        logits = jnp.where(w > 0, -d, -jnp.inf)
        per = -(logits[:, 0] - jax.nn.logsumexp(logits, axis=1))
        reg = float(self.cfg.model.regularization)
        if reg:
            per = per + reg * jnp.sum(jnp.square(targets[:, 0]), axis=-1)
        total = jnp.sum(per * w[:, 0])
        n = normalizers["examples"]
        terms = {"loss": (total, n), "loss_sum": (total, jnp.ones(())), "poincare_loss": (total, n),
                 "poincare_distance": (jnp.sum(d[:, 0] * w[:, 0]), n),
                 "poincare_burn_in": (jnp.sum(batch["burn_in"] * w[:, 0]), n)}
        return total, terms

    def row_gradients(self, params, batch, rng, normalizers):
        """(loss, terms, {'embedding': (ids [B (2 + K)], Euclidean gradient rows)}), a burn-in example's rows
        scaled by ``model.burn_in_factor`` (its rate is eta x that)."""
        table = params["params"][TRUNK]["embedding"]
        u = table.at[batch["u"]].get(mode="promise_in_bounds")
        targets = table.at[batch["targets"]].get(mode="promise_in_bounds")

        def loss_fn(rows):
            return self.loss_of_rows(*rows, batch, normalizers)

        (loss, terms), (gu, gt) = jax.value_and_grad(loss_fn, has_aux=True)((u, targets))
        rate = jnp.where(batch["burn_in"] > 0, float(self.cfg.model.burn_in_factor), 1.0)
        gu, gt = gu * rate[:, None], gt * rate[:, None, None]
        ids = jnp.concatenate([batch["u"], batch["targets"].reshape(-1)])
        rows = jnp.concatenate([gu, gt.reshape(-1, gt.shape[-1])])
        return loss, terms, {"embedding": (ids, rows)}

    def apply_rows(self, params, rows, step_size):
        """Riemannian SGD (module doc) on the rows the batch read."""
        table = params["params"][TRUNK]["embedding"]
        ids, g = rows["embedding"]
        summed = jnp.zeros_like(table).at[ids].add(g)
        touched = jnp.zeros(table.shape[0], bool).at[ids].set(True)
        new = riemannian_step(table, summed, touched, step_size, float(self.cfg.model.epsilon))
        return {**params, "params": {**params["params"], TRUNK: {**params["params"][TRUNK], "embedding": new}}}

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return dict(metrics)
