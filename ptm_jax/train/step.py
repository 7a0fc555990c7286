"""Pure step functions: ``train_step(state, batch, rng) -> (state, metrics)`` and ``eval_step(params, batch)``.

They know nothing about meshes, files or logging; the loop jits them with shardings and donation.
Gradient accumulation scans over microbatches: microbatch i takes rows ``i::accum`` of the global batch, so
each device keeps its own rows (no communication) and the loss equals the whole-batch loss exactly.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from ptm_jax.objectives.base import Objective
from ptm_jax.train.state import TrainState


def _microbatches(batch: dict[str, jax.Array], accum: int) -> dict[str, jax.Array]:
    def split(x):
        b = x.shape[0]
        x = x.reshape((b // accum, accum) + x.shape[1:]).swapaxes(0, 1)
        # keep every device on its own rows: [accum, micro(batch-sharded), ...]
        return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))

    return jax.tree.map(split, batch)


def make_train_step(objective: Objective, tx: optax.GradientTransformation, schedule: Callable,
                    grad_accum_steps: int = 1, param_shardings: Any = None
                    ) -> Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]:
    """``param_shardings`` (optional) pins the accumulated gradients to the parameters' layout."""

    def grads_of(params, batch, rng, norms):
        def loss_fn(p):
            return objective.loss(p, batch, rng, norms, train=True)

        return jax.value_and_grad(loss_fn, has_aux=True)(params)

    def train_step(state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict[str, Any]]:
        rng = jax.random.fold_in(rng, state.step)
        norms = objective.normalizers(batch)
        if grad_accum_steps == 1:
            (loss, terms), grads = grads_of(state.params, batch, rng, norms)
        else:
            micro = _microbatches(batch, grad_accum_steps)

            def body(carry, xs):
                mb, i = xs
                (l, t), g = grads_of(state.params, mb, jax.random.fold_in(rng, i), norms)
                return jax.tree.map(jnp.add, carry, (l, t, g)), None

            first = jax.tree.map(lambda x: x[0], micro)
            zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(lambda: grads_of(state.params, first, rng, norms)))
            (loss, terms), grads = _unpack(jax.lax.scan(body, _pack(zeros), (micro, jnp.arange(grad_accum_steps)))[0])
            if param_shardings is not None:
                grads = jax.lax.with_sharding_constraint(grads, param_shardings)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(grads), "learning_rate": schedule(state.step),
                   **terms}
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return train_step


def _pack(zeros):
    (loss, terms), grads = zeros
    return loss, terms, grads


def _unpack(carry):
    loss, terms, grads = carry
    return (loss, terms), grads


def make_eval_step(objective: Objective) -> Callable[[Any, dict], dict]:
    def eval_step(params: Any, batch: dict) -> dict[str, Any]:
        loss, terms = objective.loss(params, batch, None, objective.normalizers(batch), train=False)
        return terms

    return eval_step
