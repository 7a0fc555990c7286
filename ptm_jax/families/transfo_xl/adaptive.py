"""Adaptive input embeddings (Baevski & Auli 2019) and the projected adaptive log-softmax (Grave et al. 2017) of
Transformer-XL (kimiyoung/transformer-xl ``pytorch/utils/proj_adaptive_softmax.py``, ``mem_transformer.py``
``AdaptiveEmbedding``; transformers' ``ProjectedAdaptiveLogSoftmax``).

The vocabulary is cut at ``model.cutoffs`` into clusters, frequent words first. Cluster i embeds its words in
``embed_dim // div_val**i`` dimensions and projects them to ``hidden_size``; inputs are scaled by sqrt(hidden_size).
The output ties every cluster's word vectors to its embedding table (and the tail clusters' projections to their
input projections, ``share_projections``): the head scores the shortlist (cluster 0) and one logit per tail cluster;
log p(w) = log p_head(w) for w in the shortlist, else log p_head(cluster of w) + log p_cluster(w).

Static shapes: every position is scored by every cluster (no per-cluster gather), so the log-probabilities of the
whole vocabulary come out as one [.., V] array in float32. What adaptive softmax saves here is the tail clusters'
smaller dimensions (``div_val`` > 1), not skipped rows.

Parameters (under the trunk, ``word_emb``): ``emb_layers_i/embedding`` [V_i, d_i], ``emb_projs_i/kernel`` [d_i, H]
where a projection exists (div_val > 1: every cluster; div_val = 1: one, when embed_dim != hidden_size). Under the
head (``softmax``): ``bias`` [V] (all clusters' output biases, in id order), ``cluster_weight`` [C, d_0] and
``cluster_bias`` [C] (C tail clusters), ``out_projs_i/kernel`` [d_i, H] for the projections not shared.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.transfo_xl.config import TransfoXlConfig
from ptm_jax.models.layers import dtype_of, partitioned


def has_input_proj(cfg: TransfoXlConfig, i: int) -> bool:
    return cfg.div_val > 1 or (i == 0 and cfg.d_embed != cfg.hidden_size)


def has_own_output_proj(cfg: TransfoXlConfig, i: int) -> bool:
    """Cluster i's output projection is a parameter of the head (else it is the input projection, or none)."""
    if cfg.div_val == 1 and cfg.d_embed == cfg.hidden_size:
        return False
    return i == 0 or not cfg.share_projections


class Projection(nn.Module):
    """A [d_in, H] kernel without bias (transformers keeps its transpose, ``emb_projs.i`` [H, d_in])."""

    features_in: int
    features_out: int
    init_std: float

    @nn.compact
    def __call__(self) -> jax.Array:
        init = partitioned(nn.initializers.normal(self.init_std), (None, "embed"))
        return self.param("kernel", init, (self.features_in, self.features_out), jnp.float32)


class AdaptiveEmbedding(nn.Module):
    """Word ids [B, L] -> [B, L, H] (scaled by sqrt(H)); ``tables()``/``projections()`` for the tied output."""

    cfg: TransfoXlConfig

    def setup(self) -> None:
        c = self.cfg
        init = partitioned(nn.initializers.normal(c.initializer_range), ("vocab", "embed"))
        self.emb_layers = [nn.Embed(hi - lo, d, dtype=dtype_of(c.dtype), param_dtype=jnp.float32,
                                    embedding_init=init, name=f"emb_layers_{i}")
                           for i, (lo, hi, d) in enumerate(self.clusters)]
        self.emb_projs = {i: Projection(d, c.hidden_size, c.proj_init_std, name=f"emb_projs_{i}")
                          for i, (_, _, d) in enumerate(self.clusters) if has_input_proj(c, i)}

    @property
    def clusters(self) -> list[tuple[int, int, int]]:
        return self.cfg.clusters() if self.cfg.div_val > 1 else [(0, self.cfg.vocab_size, self.cfg.d_embed)]

    def __call__(self, ids: jax.Array) -> jax.Array:
        c, dt = self.cfg, dtype_of(self.cfg.dtype)
        out = None
        for i, (lo, hi, _) in enumerate(self.clusters):
            inside = (ids >= lo) & (ids < hi)
            e = self.emb_layers[i](jnp.clip(ids - lo, 0, hi - lo - 1))
            if i in self.emb_projs:
                e = jnp.einsum("bld,dh->blh", e, self.emb_projs[i]().astype(dt))
            e = jnp.where(inside[..., None], e, 0) if len(self.clusters) > 1 else e
            out = e if out is None else out + e
        return out * jnp.asarray(c.hidden_size ** 0.5, dt)

    def tables(self) -> list[jax.Array]:
        """Every cluster's output word vectors [V_i, d_i], the head first (div_val = 1: slices of one table)."""
        if self.cfg.div_val > 1:
            return [layer.embedding for layer in self.emb_layers]
        table = self.emb_layers[0].embedding
        return [table[lo:hi] for lo, hi, _ in self.cfg.clusters()]

    def projections(self) -> list[jax.Array | None]:
        """The input projection each cluster's output may share (div_val = 1: the one projection, or None)."""
        if self.cfg.div_val > 1:
            return [self.emb_projs[i]() for i in range(len(self.clusters))]
        p = self.emb_projs[0]() if 0 in self.emb_projs else None
        return [p] * len(self.cfg.clusters())


class AdaptiveLogSoftmax(nn.Module):
    """Hidden states [.., H] -> float32 log-probabilities [.., V] over the tied clusters (module docstring)."""

    cfg: TransfoXlConfig

    @nn.compact
    def __call__(self, hidden: jax.Array, tables: list[jax.Array], input_projs: list[jax.Array | None]
                 ) -> jax.Array:
        c, f32 = self.cfg, jnp.float32
        clusters = c.clusters()
        n_tail = len(clusters) - 1
        bias = self.param("bias", partitioned(nn.initializers.zeros, ("vocab",)), (c.vocab_size,), f32)
        projs = [Projection(d, c.hidden_size, c.proj_init_std, name=f"out_projs_{i}")()
                 if has_own_output_proj(c, i) else input_projs[i] for i, (_, _, d) in enumerate(clusters)]

        def logits(i: int, weight: jax.Array, b: jax.Array) -> jax.Array:
            x = hidden if projs[i] is None else jnp.einsum("...h,dh->...d", hidden, projs[i].astype(hidden.dtype))
            return jnp.einsum("...d,vd->...v", x, weight.astype(x.dtype), preferred_element_type=f32) + b

        head_w, head_b = tables[0], bias[:clusters[0][1]]
        if n_tail:
            init = partitioned(nn.initializers.normal(c.initializer_range), (None, "embed"))
            cw = self.param("cluster_weight", init, (n_tail, clusters[0][2]), f32)
            cb = self.param("cluster_bias", partitioned(nn.initializers.zeros, (None,)), (n_tail,), f32)
            head_w, head_b = jnp.concatenate([head_w, cw.astype(head_w.dtype)]), jnp.concatenate([head_b, cb])
        head = jax.nn.log_softmax(logits(0, head_w, head_b), axis=-1)
        shortlist = clusters[0][1]
        out = [head[..., :shortlist]]
        for i, (lo, hi, _) in enumerate(clusters[1:], start=1):
            tail = jax.nn.log_softmax(logits(i, tables[i], bias[lo:hi]), axis=-1)
            out.append(head[..., shortlist + i - 1:shortlist + i] + tail)
        return jnp.concatenate(out, axis=-1) if n_tail else out[0]
