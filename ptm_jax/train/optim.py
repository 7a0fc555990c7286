"""The optimizer, chosen by ``train.optimizer``, with parameter groups (``ptm_jax.train.param_groups``).

adamw (default): BERT's optimizer (google-research/bert optimization.py): AdamW without bias correction,
update = m / (sqrt(v) + eps) + weight_decay * param (decoupled, masked to weights), scaled by the learning rate;
gradients clipped to global norm ``clip_norm`` first. adam: Adam with bias correction (Kingma & Ba 2015), weight
decay as an L2 term added to the gradient (torch.optim.Adam's weight_decay). Wherever Adam's bias correction
applies (``adam_bias_correction``), ``1 - b ** t`` is taken to a few float32 ulps, as PyTorch's double-precision
one. sgd: plain SGD (word2vec.c's update; its linear decay is ``lr_decay='bert'`` with no warmup), L2 as for
adam. adagrad: AdaGrad (Duchi et al. 2011; GloVe, ELMo) with accumulators starting at
``adagrad_initial_accumulator`` (glove.c: 1.0), L2 as for adam; the step is g / sqrt(sum of squares) with no
epsilon, as glove.c and TensorFlow's ApplyAdagrad (bilm-tf) take it (a leaf whose sum is still 0 does not move).
lamb: LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", Alg. 2;
optax's ``lamb`` chain): adamw's update (Adam moments with or without bias correction, decoupled decay on the
decayed leaves) times the trust ratio |param| / |update| of each leaf (1 when either is 0), for the leaves that
take weight decay only: the excluded LayerNorm and bias leaves keep the plain update, as NVIDIA's FusedLAMB does
(a trust ratio only where weight_decay != 0).

Learning rate: linear warmup to ``learning_rate`` over ``warmup_steps``, and a decay to 0 at ``steps`` counted from
step 0 (polynomial_decay, power ``lr_decay_power``: 1 linear, 0.5 NVIDIA's LAMB recipe), or with
``lr_decay='from_peak'`` from the peak at the end of warmup (transformers' get_linear_schedule_with_warmup), or none
(``lr_decay='constant'``), or ULMFiT's slanted triangular rates (``lr_decay='slanted_triangular'``: the rise is
``warmup_steps`` long, the ratio 1 / ``min_lr_ratio``, 32 when that is 0).

Parameter groups with a ``start_step`` (gradual unfreezing) are frozen until then: ``train_from`` wraps the chain
so that their gradients are zeroed before clipping, their optimizer state stays put and their update is zero;
Adam's bias correction then counts each parameter's own steps (``scale_by_adam``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ptm_jax.config import TrainConfig
from ptm_jax.train import param_groups as pg


def _step_float(step) -> jax.Array:
    """The step as the schedules compute with it: float32, float64 in JAX's 64-bit mode (a float64 parity run,
    ``model.dtype='float64'``), so that the rate is not rounded to float32 there."""
    return jnp.asarray(step, jnp.result_type(float))


def bert_schedule(peak: float, warmup_steps: int, total_steps: int, from_peak: bool = False, power: float = 1.0
                  ) -> Callable[[jax.Array], jax.Array]:
    """Step k (0 = the first update) -> learning rate: ``peak * k / warmup_steps`` during warmup, then
    ``peak * (1 - k / total_steps) ** power`` (BERT; NVIDIA's LAMB recipe: power 0.5) or
    ``peak * ((total_steps - k) / (total_steps - warmup_steps)) ** power`` (``from_peak``), never below 0."""

    def schedule(step):
        step = _step_float(step)
        if from_peak:
            left = jnp.maximum(0.0, (total_steps - step) / max(total_steps - warmup_steps, 1))
        else:
            left = jnp.maximum(0.0, 1.0 - step / max(total_steps, 1))
        decayed = peak * (left if power == 1.0 else left ** power)
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


def slanted_triangular(peak: float, total_steps: int, cut: int, ratio: float = 32.0
                       ) -> Callable[[jax.Array], jax.Array]:
    """Howard & Ruder 2018 eq. 3: p = t / cut before ``cut`` (ULMFiT: cut = cut_frac T, cut_frac 0.1), then
    1 - (t - cut) / (T - cut); lr = peak (1 + p (ratio - 1)) / ratio: from peak/ratio up to peak and back."""

    def schedule(step):
        t = _step_float(step)
        p = jnp.where(t < cut, t / max(cut, 1), 1.0 - (t - cut) / max(total_steps - cut, 1))
        return peak * (1.0 + jnp.clip(p, 0.0, 1.0) * (ratio - 1.0)) / ratio

    return schedule


def lr_schedule(cfg: TrainConfig) -> Callable[[jax.Array], jax.Array]:
    """``cfg``'s learning rate by step: warmup, then ``cfg.lr_decay``, never below ``cfg.min_lr_ratio`` x the
    peak after warmup (word2vec.c: ``alpha = max(alpha, starting_alpha * 0.0001)``)."""
    if cfg.min_lr_ratio > 0:
        inner, floor = lr_schedule(dataclasses.replace(cfg, min_lr_ratio=0.0)), cfg.min_lr_ratio * cfg.learning_rate

        def floored(step):
            return jnp.where(jnp.asarray(step) < cfg.warmup_steps, inner(step), jnp.maximum(inner(step), floor))

        return floored
    if cfg.lr_decay == "slanted_triangular":
        return slanted_triangular(cfg.learning_rate, cfg.steps, cfg.warmup_steps,
                                  1.0 / cfg.min_lr_ratio if cfg.min_lr_ratio > 0 else 32.0)
    if cfg.lr_decay == "constant":
        peak, warmup = cfg.learning_rate, cfg.warmup_steps

        def constant(step):
            step = _step_float(step)
            return jnp.where(step < warmup, peak * step / max(warmup, 1), jnp.asarray(peak, step.dtype))

        return constant
    return bert_schedule(cfg.learning_rate, cfg.warmup_steps, cfg.steps, from_peak=cfg.lr_decay == "from_peak",
                         power=cfg.lr_decay_power)


class TrainFromState(NamedTuple):
    count: jax.Array
    inner: Any


def train_from(inner: optax.GradientTransformation, starts_of: Callable[[Any], Any]) -> optax.GradientTransformation:
    """``inner`` for parameters that train from a step on: ``starts_of(tree)`` gives each leaf its first step.
    Before it a leaf's gradient is zeroed (so it adds nothing to clipping's global norm), its part of every
    parameter-shaped optimizer state (Adam's m and v, AdaGrad's sums) is kept as it was, and its update is 0:
    what fastai's ``requires_grad=False`` freezing gives. Scalars of the state (step counts) move on."""

    def init(params):
        return TrainFromState(jnp.zeros([], jnp.int32), inner.init(params))

    def update(updates, state, params=None):
        active = jax.tree.map(lambda s: state.count >= s, starts_of(updates))
        updates = jax.tree.map(lambda u, a: jnp.where(a, u, jnp.zeros_like(u)), updates, active)
        new_updates, new_inner = inner.update(updates, state.inner, params)
        shape = jax.tree.structure(updates)

        def keep(new, old):  # a parameter-shaped part of the state: only the active leaves move
            if jax.tree.structure(new) != shape:
                return new
            return jax.tree.map(lambda n, o, a: jnp.where(a, n, o), new, old, active)

        new_inner = jax.tree.map(keep, new_inner, state.inner, is_leaf=lambda x: jax.tree.structure(x) == shape)
        new_updates = jax.tree.map(lambda u, a: jnp.where(a, u, jnp.zeros_like(u)), new_updates, active)
        return new_updates, TrainFromState(optax.safe_increment(state.count), new_inner)

    return optax.GradientTransformation(init, update)


def adam_bias_correction(decay: float, count: jax.Array) -> jax.Array:
    """Adam's bias correction ``1 - decay ** count`` (Kingma & Ba 2015, Alg. 1) in float32 to a few ulps, computed
    as ``-expm1(count * log1p(decay - 1))``. The direct float32 form (optax's ``tree_bias_correction``) rounds
    ``decay ** count`` near 1 and is off by up to 2e-5 of the value for b2 = 0.999 (1.3e-5 at the first step):
    a bias of every update's scale over the first hundreds of steps that PyTorch's Adam and AdamW, which take it
    in double precision, do not have."""
    return -jnp.expm1(jnp.asarray(count, jnp.float32) * jnp.log1p(jnp.float32(decay - 1.0)))


def scale_by_adam(b1: float, b2: float, eps: float, starts_of: Callable[[Any], Any] | None = None
                  ) -> optax.GradientTransformation:
    """``optax.scale_by_adam`` (the same state and moments) with the bias correction of ``adam_bias_correction``.
    ``starts_of``: bias correction counts a leaf's steps from its first one (t = count - start). PyTorch's Adam
    (and fastai's) keeps a step per parameter, so a layer group unfrozen at step s starts with t = 1, not s + 1
    (which would leave its first updates under-corrected: with betas (0.8, 0.99), twice the size)."""

    def init(params):
        return optax.scale_by_adam(b1, b2, eps).init(params)

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)

        def step(m, v, start):
            t = jnp.maximum(count - start, 1)
            m_hat = m / adam_bias_correction(b1, t).astype(m.dtype)
            return m_hat / (jnp.sqrt(v / adam_bias_correction(b2, t).astype(v.dtype)) + eps)

        starts = starts_of(updates) if starts_of is not None else jax.tree.map(lambda _: 0, updates)
        return jax.tree.map(step, mu, nu, starts), optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def make_optimizer(cfg: TrainConfig, rules: Sequence[pg.Rule] | None = None
                   ) -> tuple[optax.GradientTransformation, Callable]:
    """Returns (transformation, schedule) for ``cfg.optimizer``. ``rules``: the parameter groups of the model
    family and stage (default: BERT's weight-decay mask); the rules of ``cfg.param_groups`` follow them.

    With the default settings the chain is today's BERT AdamW op for op (same state tree, bit-identical
    updates): clip -> Adam moments -> masked decoupled decay -> [lr multipliers] -> -learning rate."""
    rules = list(pg.DEFAULT_RULES if rules is None else rules)
    rules += pg.rules_from_config(cfg.param_groups, "train.param_groups")
    schedule = lr_schedule(cfg)
    decay = _weight_decay(cfg.weight_decay, rules)
    timed = any(r.start_step > 0 for r in rules)

    def starts_of(tree):
        return pg.start_steps(rules, tree)

    def adam():
        return scale_by_adam(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps, starts_of if timed else None)

    parts = []
    if cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(cfg.clip_norm))
    if cfg.optimizer in ("adamw", "lamb"):
        parts += [adam() if cfg.adam_bias_correction
                  else scale_by_adam_no_bias_correction(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps), decay]
        if cfg.optimizer == "lamb":
            parts.append(_trust_ratio(rules))
    else:  # coupled L2: the decay term joins the gradient before the scaling
        if cfg.weight_decay > 0:
            parts.append(decay)
        if cfg.optimizer == "adam":
            parts.append(adam())
        elif cfg.optimizer == "adagrad":
            parts.append(optax.scale_by_rss(initial_accumulator_value=cfg.adagrad_initial_accumulator, eps=0.0))
    if any(r.lr != 1.0 for r in rules):
        parts.append(scale_per_leaf(lambda tree, step: pg.multipliers(rules, tree, "lr", step),
                                    pg.is_dynamic(rules, "lr")))
    parts.append(optax.scale_by_learning_rate(schedule))
    tx = optax.chain(*parts)
    if timed:  # groups frozen until their start step (gradual unfreezing)
        tx = train_from(tx, starts_of)
    if any(r.frozen for r in rules):  # frozen leaves: a zero update and no optimizer state
        tx = optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()},
                                   lambda params: pg.frozen_labels(rules, params))
    return _checked(tx, rules), schedule


def _weight_decay(rate: float, rules: list[pg.Rule]) -> optax.GradientTransformation:
    """``update + rate * multiplier * param`` per leaf. Multipliers that are all 0 or 1 and static give optax's
    masked ``add_decayed_weights`` (BERT's mask: the state tree of checkpoints written before the seam)."""
    if not pg.is_dynamic(rules, "weight_decay") and not any(
            isinstance(r.weight_decay, pg.PerLayer) or r.weight_decay not in (0.0, 1.0) for r in rules):
        def mask(tree):
            return jax.tree.map(lambda m: m == 1.0, pg.multipliers(rules, tree, "weight_decay"))

        return optax.add_decayed_weights(rate, mask=mask)
    dynamic = pg.is_dynamic(rules, "weight_decay")

    def init(params):
        return CountState(jnp.zeros([], jnp.int32)) if dynamic else optax.EmptyState()

    def update(updates, state, params=None):
        step = state.count if dynamic else None
        mults = pg.multipliers(rules, updates, "weight_decay", step)
        updates = jax.tree.map(lambda u, m, p: u if isinstance(m, float) and m == 0.0 else u + rate * m * p,
                               updates, mults, params)
        return updates, CountState(optax.safe_increment(state.count)) if dynamic else state

    return optax.GradientTransformation(init, update)


def _trust_ratio(rules: list[pg.Rule]) -> optax.GradientTransformation:
    """LAMB's layer-wise adaptation (optax ``scale_by_trust_ratio``: |param| / |update|, 1 when either is 0) on the
    leaves that take weight decay; the leaves a rule gives weight decay 0 (BERT: LayerNorm, biases) keep their
    update, as NVIDIA's FusedLAMB adapts only the parameters with weight_decay != 0."""

    def adapted(tree):
        return jax.tree.map(lambda m: not (isinstance(m, float) and m == 0.0),
                            pg.multipliers(rules, tree, "weight_decay", jnp.zeros((), jnp.int32)))

    return optax.masked(optax.scale_by_trust_ratio(), adapted)


class CountState(NamedTuple):
    count: jax.Array


def scale_per_leaf(multipliers: Callable[[Any, jax.Array | None], Any], dynamic: bool
                   ) -> optax.GradientTransformation:
    """``update * multiplier`` leaf by leaf (``multipliers(updates, step)``); a static 1.0 leaves its leaf as is.
    ``dynamic``: the multipliers depend on the step (counted in the state)."""

    def init(params):
        return CountState(jnp.zeros([], jnp.int32)) if dynamic else optax.EmptyState()

    def update(updates, state, params=None):
        mults = multipliers(updates, state.count if dynamic else None)
        updates = jax.tree.map(lambda u, m: u if isinstance(m, float) and m == 1.0 else u * m, updates, mults)
        return updates, CountState(optax.safe_increment(state.count)) if dynamic else state

    return optax.GradientTransformation(init, update)


def _checked(tx: optax.GradientTransformation, rules: list[pg.Rule]) -> optax.GradientTransformation:
    """``tx`` whose init first checks that every rule matches some parameter (a ConfigError otherwise)."""

    def init(params):
        pg.check_rules_match(rules, params)
        return tx.init(params)

    return optax.GradientTransformation(init, tx.update)
