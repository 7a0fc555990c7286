"""ELMo's scalar mix of layer representations (Peters et al. 2018 Sec. 3.2, eq. 1):

    ELMo_k = gamma * sum_j s_j h_{k,j},    s = softmax(w)   (w initialised to 0, gamma to 1)

with the optional layer normalisation of each h_j before the mix (Sec. 3.2, "in some cases it helped to apply
layer normalization (Ba et al., 2016) to each biLM layer before weighting"). As AllenNLP's ``ScalarMix``
(``allennlp/modules/scalar_mix.py``), the normalisation is over ALL the real positions of the batch and all
dimensions of a layer (one mean and variance per layer, the mask excluding padding), with no learned scale.

Task models use it on frozen or trainable features (``Inspection.word_features`` / ``evaluate/features.py``):
``ScalarMix(num_layers)(layers [L, ..., D], mask [...])``. ``trainable=False`` keeps s uniform and gamma 1
(a fixed average of the layers).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.layers import partitioned


class ScalarMix(nn.Module):
    num_layers: int
    layer_norm: bool = False
    trainable: bool = True
    initial_weights: tuple[float, ...] | None = None
    """Initial w (default zeros: equal weights)."""
    initial_gamma: float = 1.0
    eps: float = 1e-12

    @nn.compact
    def __call__(self, layers: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """``layers`` [L, ..., D] (or a list of L arrays), ``mask`` [...] (1 = a real position; None: all
        real) -> [..., D]."""
        layers = jnp.stack(layers) if isinstance(layers, (list, tuple)) else layers
        if layers.shape[0] != self.num_layers:
            raise ValueError(f"ScalarMix(num_layers={self.num_layers}) got {layers.shape[0]} layers")
        w0 = jnp.asarray(self.initial_weights if self.initial_weights is not None else [0.0] * self.num_layers,
                         jnp.float32)
        if w0.shape != (self.num_layers,):
            raise ValueError(f"ScalarMix initial_weights has {w0.shape[0]} values for {self.num_layers} layers")
        w = self.param("weights", partitioned(lambda k, s, d=jnp.float32: w0, ("layers",)), (self.num_layers,))
        gamma = self.param("gamma", partitioned(lambda k, s, d=jnp.float32: jnp.full(s, self.initial_gamma, d),
                                                (None,)), (1,))
        if not self.trainable:
            w, gamma = jax.lax.stop_gradient(w), jax.lax.stop_gradient(gamma)
        x = layers.astype(jnp.float32)
        if self.layer_norm:
            m = (jnp.ones(x.shape[1:-1], jnp.float32) if mask is None else mask.astype(jnp.float32))[..., None]
            count = jnp.maximum(jnp.sum(m) * x.shape[-1], 1.0)
            axes = tuple(range(1, x.ndim))
            mean = jnp.sum(x * m, axis=axes, keepdims=True) / count
            var = jnp.sum(((x - mean) * m) ** 2, axis=axes, keepdims=True) / count
            x = (x - mean) / jnp.sqrt(var + self.eps)
        s = jax.nn.softmax(w)
        return gamma[0] * jnp.tensordot(s, x, axes=1)
