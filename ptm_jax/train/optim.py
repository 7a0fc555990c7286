"""BERT's optimizer (google-research/bert optimization.py): AdamW without bias correction.

update = m / (sqrt(v) + eps) + weight_decay * param (decoupled, masked to weights), scaled by the learning rate;
gradients clipped to global norm ``clip_norm`` first. Learning rate: linear warmup to ``learning_rate`` over
``warmup_steps``, and a linear decay to 0 at ``steps`` counted from step 0 (polynomial_decay, power 1), or with
``lr_decay='from_peak'`` from the peak at the end of warmup (transformers' get_linear_schedule_with_warmup).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ptm_jax.config import TrainConfig
from ptm_jax.objectives.base import decay_mask


def bert_schedule(peak: float, warmup_steps: int, total_steps: int, from_peak: bool = False
                  ) -> Callable[[jax.Array], jax.Array]:
    """Step k (0 = the first update) -> learning rate: ``peak * k / warmup_steps`` during warmup, then
    ``peak * (1 - k / total_steps)`` (BERT) or ``peak * (total_steps - k) / (total_steps - warmup_steps)``
    (``from_peak``), never below 0."""

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        if from_peak:
            decayed = peak * jnp.maximum(0.0, (total_steps - step) / max(total_steps - warmup_steps, 1))
        else:
            decayed = peak * jnp.maximum(0.0, 1.0 - step / max(total_steps, 1))
        warm = peak * step / max(warmup_steps, 1)
        return jnp.where(step < warmup_steps, warm, decayed)

    return schedule


class ScaleByAdamNoBiasState(NamedTuple):
    mu: Any
    nu: Any


def scale_by_adam_no_bias_correction(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Adam moments as BERT's AdamWeightDecayOptimizer keeps them: no bias correction of m and v."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return ScaleByAdamNoBiasState(mu=zeros, nu=jax.tree.map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        del params
        mu = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g), state.nu, grads)
        updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, ScaleByAdamNoBiasState(mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def make_optimizer(cfg: TrainConfig, lr_scale: Callable[[Any], Any] | None = None
                   ) -> tuple[optax.GradientTransformation, Callable]:
    """Returns (transformation, schedule). ``lr_scale`` optionally maps params -> per-leaf lr multipliers
    (layer-wise learning-rate decay for finetuning)."""
    schedule = bert_schedule(cfg.learning_rate, cfg.warmup_steps, cfg.steps, from_peak=cfg.lr_decay == "from_peak")
    parts = []
    if cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(cfg.clip_norm))
    adam = (optax.scale_by_adam(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps) if cfg.adam_bias_correction
            else scale_by_adam_no_bias_correction(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps))
    parts += [
        adam,
        optax.add_decayed_weights(cfg.weight_decay, mask=decay_mask),
    ]
    if lr_scale is not None:
        parts.append(_scale_per_leaf(lr_scale))
    parts.append(optax.scale_by_learning_rate(schedule))
    return optax.chain(*parts), schedule


def _scale_per_leaf(lr_scale: Callable[[Any], Any]) -> optax.GradientTransformation:
    def init(params):
        return optax.EmptyState()

    def update(updates, state, params=None):
        scales = lr_scale(updates)
        return jax.tree.map(lambda u, s: u * s, updates, scales), state

    return optax.GradientTransformation(init, update)
