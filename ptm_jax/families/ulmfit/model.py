"""AWD-LSTM (Merity, Keskar & Socher 2018, Sec. 4) and ULMFiT's language model and classifier (Howard & Ruder
2018, Sec. 3) as Flax Linen modules, on the project's ``lax.scan`` LSTM layer (``ptm_jax/models/lstm.py``).

The facts follow fastai's ``AWD_LSTM`` (``fastai/text/models/awdlstm.py``), whose forward pass the parity test
matches on imported weights (``families/ulmfit/weights.py``, ``tests/test_ulmfit.py``):

- embedding dropout (``EmbeddingDropout``): whole rows of the table (words) zeroed with p = ``embed_p``, the kept
  rows scaled by 1/(1-p); one mask per forward pass;
- locked (variational) dropout (``RNNDropout``): one mask per row and feature, the same at every time step, on the
  embedded input (``input_p``), between layers (``hidden_p``) and on the last layer's output (``output_p``,
  fastai's ``LinearDecoder``/classifier head applies it);
- weight dropout (``WeightDropout``): DropConnect on each layer's hidden-to-hidden matrix, one mask per forward
  pass (passed to the LSTM layer as ``recurrent_fn``);
- layer i maps hidden_dim -> hidden_dim except the last, which outputs embed_dim so that the decoder's weight is
  the embedding (tied weights, Inan et al. 2017; Press & Wolf 2017), plus its own bias.
- each LSTM layer keeps PyTorch's two gate biases (``bias`` = ``bias_ih``, ``recurrent_bias`` = ``bias_hh``,
  ``models/lstm.py``), each initialised U(-1/sqrt(H), 1/sqrt(H)) and trained as its own parameter, as fastai's
  ``nn.LSTM`` trains them: one summed bias would get one optimizer step where fastai's pair gets two.

Params tree: ``{'ulmfit': {'embedding', 'layers_0', ..., 'layers_{n-1}'}, 'lm_head': {'bias'[, 'kernel']}}`` for
the language model; the classifier keeps the trunk and puts its head under ``'classifier'``. The per-layer LSTM
weights follow ``models/lstm.py``'s layout (kernel [D, 4H], recurrent_kernel [H, 4H], bias [4H], recurrent_bias
[4H], gates i, f, g, o).

The classifier head is fastai's ``PoolingLinearClassifier`` (``fastai/text/models/core.py``, two ``LinBnDrop``
blocks): concat pooling -> BatchNorm -> dropout(output_p) -> linear(50, no bias) -> ReLU -> BatchNorm ->
dropout(head_p) -> linear(labels, no bias). The batch norms (``models/batch_norm.py``) put the pooled features on
a unit scale: without them a head trained at ULMFiT's rate 0.01 from a frozen trunk whose pooled outputs are
~0.03 in size moves its ReLU biases faster than its inputs can, and every ReLU dies within the first epoch
(docs/benchmarks.md, "ULMFiT").
"""
from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.ulmfit.config import UlmfitConfig
from ptm_jax.models.batch_norm import BatchNorm
from ptm_jax.models.layers import constrain, dtype_of, partitioned
from ptm_jax.models.lstm import LSTM, LstmCarry, uniform_init, zero_carry

TRUNK, LM_HEAD, CLASSIFIER = "ulmfit", "lm_head", "classifier"


def zero_carries(cfg: UlmfitConfig, batch: int) -> tuple[LstmCarry, ...]:
    """The reset state: zeros for every layer (fastai ``AWD_LSTM.reset``)."""
    return tuple(zero_carry(batch, hid) for _, hid in cfg.layer_sizes)


def locked_dropout(module: nn.Module, x: jax.Array, p: float, deterministic: bool) -> jax.Array:
    """x [B, T, D] times one Bernoulli(1-p)/(1-p) mask of shape [B, 1, D] (fastai ``RNNDropout``)."""
    if deterministic or p == 0.0:
        return x
    keep = jax.random.bernoulli(module.make_rng("dropout"), 1.0 - p, (x.shape[0], 1, x.shape[2]))
    return x * keep.astype(x.dtype) / (1.0 - p)


class AwdLstm(nn.Module):
    """ids [B, T], mask [B, T] (1 = real token), carry (one ``LstmCarry`` per layer, None = zeros) ->
    (last layer's output before output dropout [B, T, E], the new carry). Masked steps keep the carry."""

    config: UlmfitConfig

    @nn.compact
    def __call__(self, ids: jax.Array, mask: jax.Array | None = None, carry: Sequence[LstmCarry] | None = None,
                 deterministic: bool = True) -> tuple[jax.Array, tuple[LstmCarry, ...]]:
        cfg = self.config
        dtype = dtype_of(cfg.dtype)
        table = self.param("embedding", partitioned(uniform_init(cfg.init_range), ("vocab", "embed")),
                           (cfg.vocab_size, cfg.embed_dim), jnp.float32)
        if not deterministic and cfg.embed_p > 0:
            keep = jax.random.bernoulli(self.make_rng("dropout"), 1.0 - cfg.embed_p, (cfg.vocab_size, 1))
            table = table * keep.astype(table.dtype) / (1.0 - cfg.embed_p)
        x = constrain(jnp.take(table, ids, axis=0).astype(dtype), ("batch", "length", "act_embed"))
        x = locked_dropout(self, x, cfg.input_p, deterministic)
        carry = tuple(carry) if carry is not None else zero_carries(cfg, ids.shape[0])
        new_carry = []
        for i, (_, hid) in enumerate(cfg.layer_sizes):
            drop = None
            if not deterministic and cfg.weight_p > 0:
                rng = self.make_rng("dropout")

                def drop(w, rng=rng):  # DropConnect: one mask over the whole matrix for this forward pass
                    keep = jax.random.bernoulli(rng, 1.0 - cfg.weight_p, w.shape)
                    return w * keep.astype(w.dtype) / (1.0 - cfg.weight_p)

            x, c = LSTM(hid, recurrent_bias=True, dtype=dtype, implementation=cfg.lstm_impl, name=f"layers_{i}")(
                x, mask, carry[i], recurrent_fn=drop)
            new_carry.append(c)
            if i != cfg.num_layers - 1:
                x = locked_dropout(self, x, cfg.hidden_p, deterministic)
        return x, tuple(new_carry)


class LmHead(nn.Module):
    """Decoder: h @ embedding.T + bias (tied) or its own kernel (untied)."""

    config: UlmfitConfig

    @nn.compact
    def __call__(self, h: jax.Array, embedding: jax.Array) -> jax.Array:
        cfg = self.config
        bias = self.param("bias", partitioned(nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), jnp.float32)
        if cfg.tie_weights:
            kernel = embedding.T
        else:
            kernel = self.param("kernel", partitioned(uniform_init(cfg.init_range), ("embed", "vocab")),
                                (cfg.embed_dim, cfg.vocab_size), jnp.float32)
        logits = jnp.einsum("btd,dv->btv", h, kernel.astype(h.dtype)) + bias.astype(h.dtype)
        return constrain(logits, ("batch", "length", "act_vocab"))


class AwdLstmLanguageModel(nn.Module):
    """ids [B, T] -> (logits [B, T, V], raw last output [B, T, E], dropped last output, new carry)."""

    config: UlmfitConfig

    @nn.compact
    def __call__(self, ids, mask=None, carry=None, deterministic: bool = True):
        trunk = AwdLstm(self.config, name=TRUNK)
        raw, new_carry = trunk(ids, mask, carry, deterministic)
        dropped = locked_dropout(self, raw, self.config.output_p, deterministic)
        embedding = trunk.variables["params"]["embedding"]
        embedding = embedding.unbox() if isinstance(embedding, nn.meta.AxisMetadata) else embedding
        logits = LmHead(self.config, name=LM_HEAD)(dropped, embedding)
        return logits, raw, dropped, new_carry


def concat_pool(h: jax.Array, mask: jax.Array) -> jax.Array:
    """[last real step, max over real steps, mean over real steps] of h [B, T, E] -> [B, 3E] (fastai
    ``masked_concat_pool``; rows are right-padded here, so "last" is the step before the padding)."""
    m = mask.astype(h.dtype)[..., None]
    lengths = jnp.maximum(jnp.sum(mask.astype(jnp.int32), axis=1), 1)
    last = jnp.take_along_axis(h, (lengths - 1)[:, None, None], axis=1)[:, 0]
    mx = jnp.max(jnp.where(m > 0, h, jnp.finfo(h.dtype).min), axis=1)
    mean = jnp.sum(h * m, axis=1) / lengths[:, None].astype(h.dtype)
    return jnp.concatenate([last, mx, mean], axis=-1)


def _linear(features: int, names: tuple, name: str) -> nn.Dense:
    """PyTorch's ``nn.Linear`` without bias (fastai's ``LinBnDrop`` drops it after a batch norm): kernel
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5))."""
    return nn.Dense(features, use_bias=False, name=name, kernel_init=partitioned(
        nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"), names))


class PoolingClassifier(nn.Module):
    """Concat pooling -> BatchNorm -> dropout(output_p) -> linear(head_hidden) -> ReLU -> BatchNorm ->
    dropout(head_p) -> linear(labels) (module doc). ``rows`` [B]: the real rows of a training batch (the batch
    statistics leave padding rows out)."""

    config: UlmfitConfig
    num_labels: int

    @nn.compact
    def __call__(self, h: jax.Array, mask: jax.Array, deterministic: bool = True,
                 rows: jax.Array | None = None) -> jax.Array:
        cfg = self.config
        x = concat_pool(h.astype(jnp.float32), mask)
        x = BatchNorm(name="bn_0")(x, rows, deterministic)
        x = nn.Dropout(cfg.output_p)(x, deterministic=deterministic)
        x = nn.relu(_linear(cfg.head_hidden, (None, "mlp"), "hidden")(x))
        x = BatchNorm(name="bn_1")(x, rows, deterministic)
        x = nn.Dropout(cfg.head_p)(x, deterministic=deterministic)
        return _linear(self.num_labels, ("mlp", None), "output")(x)


class AwdLstmClassifier(nn.Module):
    """ids [B, T], mask [B, T] -> logits [B, labels]; the trunk starts from the zero state for every row.
    ``rows`` [B] (training): the real rows, for the head's batch statistics."""

    config: UlmfitConfig
    num_labels: int

    @nn.compact
    def __call__(self, ids: jax.Array, mask: jax.Array, deterministic: bool = True,
                 rows: jax.Array | None = None) -> jax.Array:
        h, _ = AwdLstm(self.config, name=TRUNK)(ids, mask, None, deterministic)
        return PoolingClassifier(self.config, self.num_labels, name=CLASSIFIER)(h, mask, deterministic, rows)


def lm_scores(model: AwdLstmLanguageModel, params: Any, ids: jax.Array, carry=None):
    """Evaluation forward pass: (logits, new carry)."""
    logits, _, _, new_carry = model.apply(params, ids, None, carry, True)
    return logits, new_carry
