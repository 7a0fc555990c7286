"""ConSERT's data augmentations on the embedding output (Yan et al. 2021, ACL, Sec. 3.2 and Fig. 2).

Each view of a sentence is the encoder run with one augmentation applied where the embedding layer hands its
output (after LayerNorm and dropout) to the first Transformer layer; the encoder takes it through its
``embedding_hook`` argument (``families/bert/model.py``), token shuffle through its ``position_ids``:

- ``shuffle``: the position ids of the real tokens are permuted, per example (padding keeps its positions);
- ``token_cutoff:r``: floor(n * r) of the n real token rows of each example are zeroed;
- ``feature_cutoff:r``: floor(H * r) of the H embedding columns of each example are zeroed, at every position;
- ``dropout:r``: floor(n * H * r) of the real tokens' embedding elements are zeroed (no rescaling: the
  reference's "random" cutoff, not inverted dropout);
- ``adversarial:eps``: the embedding output plus eps * g / ||g|| per token, g the gradient of the contrastive
  loss with respect to this view's embedding output (FGSM-style, Goodfellow et al. 2015; one extra forward and
  backward pass per step, computed in ``objectives/contrastive.py``);
- ``none``: the embedding output as it is.

Counts follow the reference implementation (yym6472/ConSERT, ``transformers/modeling_bert.py``): exact numbers
of rows, columns or elements per example, chosen uniformly without replacement. Augmentations apply in training
only; evaluation encodes every sentence as it is.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from ptm_jax.errors import ConfigError

DEFAULT_STRENGTH = {"none": None, "shuffle": None, "token_cutoff": 0.1, "feature_cutoff": 0.2, "dropout": 0.1,
                    "adversarial": 1.0}
"""Strength when a view names none: the reference's rates (unsupervised: feature cutoff 0.2; joint: token cutoff
0.1) and its default perturbation norm (``main.py --noise_norm 1.0``)."""
NEEDS_HOOK = ("token_cutoff", "feature_cutoff", "dropout", "adversarial")


@dataclass(frozen=True)
class View:
    name: str
    strength: float | None = None

    def __str__(self) -> str:
        return self.name if self.strength is None else f"{self.name}:{self.strength:g}"


def parse_views(spec: str, field: str = "consert.views") -> tuple[View, View]:
    """'feature_cutoff:0.2,shuffle' -> the augmentation of each of the two views; a ConfigError naming
    ``field`` for an unknown name, a missing or out-of-range strength, or other than two views."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if len(parts) != 2:
        raise ConfigError(f"{field}={spec!r}: give exactly two views, comma-separated, each 'name[:strength]' "
                          f"with name in {', '.join(DEFAULT_STRENGTH)} (e.g. 'feature_cutoff:0.2,shuffle')")
    views = []
    for part in parts:
        name, _, value = part.partition(":")
        name = name.strip().lower()
        if name not in DEFAULT_STRENGTH:
            raise ConfigError(f"{field}={spec!r}: unknown augmentation {name!r}; choose from "
                              f"{', '.join(DEFAULT_STRENGTH)}")
        default = DEFAULT_STRENGTH[name]
        if default is None:
            if value.strip():
                raise ConfigError(f"{field}={spec!r}: augmentation {name!r} takes no strength")
            views.append(View(name))
            continue
        try:
            strength = float(value) if value.strip() else default
        except ValueError:
            raise ConfigError(f"{field}={spec!r}: strength {value!r} of {name!r} is not a number") from None
        if name == "adversarial" and not strength > 0:
            raise ConfigError(f"{field}={spec!r}: the adversarial perturbation norm must be > 0")
        if name != "adversarial" and not 0.0 < strength < 1.0:
            raise ConfigError(f"{field}={spec!r}: the {name} rate must be in (0, 1), got {strength}")
        views.append(View(name, strength))
    return views[0], views[1]


def _ranks(keys: jax.Array) -> jax.Array:
    """Rank of each entry along the last axis (0 = smallest key)."""
    return jnp.argsort(jnp.argsort(keys, axis=-1), axis=-1)


def _count(n: jax.Array, rate: float) -> jax.Array:
    """floor(n * rate), robust to float rounding (10 * 0.1 -> 1)."""
    return jnp.floor(n.astype(jnp.float32) * rate + 1e-4).astype(jnp.int32)


def shuffle_positions(rng: jax.Array, mask: jax.Array) -> jax.Array:
    """int32 [B, S] position ids: a random permutation of 0..n-1 over the n real tokens (a prefix of the row),
    one per example; padding positions keep their own index."""
    b, s = mask.shape
    keys = jnp.where(mask > 0, jax.random.uniform(rng, (b, s)), 2.0 + jnp.arange(s) / s)
    return jnp.argsort(keys, axis=-1).astype(jnp.int32)


def token_cutoff(rng: jax.Array, x: jax.Array, mask: jax.Array, rate: float) -> jax.Array:
    """``x`` [B, S, H] with floor(n * rate) of each example's n real token rows zeroed."""
    real = mask > 0
    keys = jnp.where(real, jax.random.uniform(rng, mask.shape), 2.0)
    drop = real & (_ranks(keys) < _count(real.sum(-1), rate)[:, None])
    return jnp.where(drop[..., None], jnp.zeros((), x.dtype), x)


def feature_cutoff(rng: jax.Array, x: jax.Array, rate: float) -> jax.Array:
    """``x`` [B, S, H] with floor(H * rate) embedding columns of each example zeroed at every position."""
    b, _, h = x.shape
    drop = _ranks(jax.random.uniform(rng, (b, h))) < int(h * rate + 1e-4)
    return jnp.where(drop[:, None, :], jnp.zeros((), x.dtype), x)


def element_dropout(rng: jax.Array, x: jax.Array, mask: jax.Array, rate: float) -> jax.Array:
    """``x`` [B, S, H] with floor(n * H * rate) of the real tokens' elements zeroed, per example."""
    b, s, h = x.shape
    real = jnp.broadcast_to((mask > 0)[..., None], x.shape).reshape(b, s * h)
    keys = jnp.where(real, jax.random.uniform(rng, (b, s * h)), 2.0)
    drop = real & (_ranks(keys) < _count(real.sum(-1), rate)[:, None])
    return jnp.where(drop.reshape(b, s, h), jnp.zeros((), x.dtype), x)


def perturbation(grad: jax.Array, eps: float) -> jax.Array:
    """eps * g / ||g|| per token (the L2 norm over the embedding axis; ConSERT's noise normalisation)."""
    g = grad.astype(jnp.float32)
    norm = jnp.sqrt(jnp.sum(jnp.square(g), axis=-1, keepdims=True))
    return eps * g / (norm + 1e-10)


def augment(view: View, rng: jax.Array, mask: jax.Array, delta: jax.Array | None = None
            ) -> tuple[jax.Array | None, object]:
    """(position_ids or None, embedding hook or None) of one view in training. ``delta``: the adversarial
    perturbation of this view's embedding output (None for the clean pass that computes it)."""
    name, r = view.name, view.strength
    if name == "shuffle":
        return shuffle_positions(rng, mask), None
    if name == "token_cutoff":
        return None, lambda x: token_cutoff(rng, x, mask, r)
    if name == "feature_cutoff":
        return None, lambda x: feature_cutoff(rng, x, r)
    if name == "dropout":
        return None, lambda x: element_dropout(rng, x, mask, r)
    if name == "adversarial" and delta is not None:
        return None, lambda x: x + delta.astype(x.dtype)
    return None, None
