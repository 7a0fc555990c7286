"""The classic task heads over word vectors: TextCNN, TextRNN, TextRCNN, and a BiLSTM tagger.

Every head reads word vectors ``x`` [B, T, D] with a mask [B, T] (1 = a real word, right padding) and never lets
padding change its output: the recurrent parts run A's masked ``lax.scan`` LSTM (``models/lstm.py``: a masked
step keeps the carry and outputs zeros; ``reverse=True`` starts a right-padded row at its last word), and the
pooling excludes positions past a row's length.

* :class:`TextCNN` (Kim 2014, "Convolutional Neural Networks for Sentence Classification", Sec. 2): filters of
  widths 3, 4 and 5 with 100 feature maps each, ReLU, max-over-time pooling, dropout 0.5 on the pooled vector
  before the output layer (Sec. 3.1). The convolution is wide: a row is padded with ``h - 1`` zeros on both
  sides (as Kim's ``process_data.py`` pads), and the max runs over the ``n + h - 1`` windows that hold at least
  one word of an ``n``-word row, so windows of padding alone never enter the max.
* :class:`TextRNN` (Liu et al. 2016, "Recurrent Neural Network for Text Classification with Multi-Task
  Learning", Sec. 2.2, bidirectional): a BiLSTM whose forward state after the last word and backward state after
  the first word are concatenated (``pool='last'``), or whose outputs are max-pooled over the words
  (``pool='max'``).
* :class:`TextRCNN` (Lai et al. 2015, "Recurrent Convolutional Neural Networks for Text Classification",
  Eq. 1-5): the left context of word i is the forward recurrent state after words 1..i-1, the right context the
  backward state after words n..i+1 (the zero initial state at the ends); ``[c_l; e; c_r]`` -> tanh projection
  -> max-pool over the words. The paper's recurrence is a plain RNN; here it is an LSTM.
* :class:`BiLstmTagger` (Huang et al. 2015, "Bidirectional LSTM-CRF Models for Sequence Tagging", the BiLSTM
  without the CRF; Peters et al. 2018 Sec. 5 put ELMo under such a tagger): per-word logits.

:class:`WordInputs` turns a batch into ``x``: word ids through an embedding table (random, or initialised from
static vectors; trainable or frozen by the optimizer's parameter groups), or precomputed frozen features of L
layers through the scalar mix (``models/scalar_mix.py``; one layer is used as it is). :class:`FeatureClassifier`
and :class:`FeatureTagger` put a head on top; ``objectives/feature_tasks.py`` trains them through ``fit``.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import partitioned
from ptm_jax.models.lstm import LSTM

HEADS = ("textcnn", "textrnn", "textrcnn")
"""Sentence-classification heads (``features.head``)."""
TAGGERS = ("bilstm",)
"""Token-tagging heads (``features.head`` for CoNLL-2003)."""


def _masked_max(x: jax.Array, valid: jax.Array) -> jax.Array:
    """Max over axis 1 of [B, T, F] at the ``valid`` [B, T] positions (a row without one gives zeros)."""
    neg = jnp.asarray(jnp.finfo(x.dtype).min, x.dtype)
    out = jnp.max(jnp.where(valid[..., None], x, neg), axis=1)
    return jnp.where(jnp.any(valid, axis=1)[:, None], out, jnp.zeros_like(out))


class TextCNN(nn.Module):
    """[B, T, D] words -> [B, maps x len(widths)] max-over-time features (Kim 2014)."""

    widths: tuple[int, ...] = (3, 4, 5)
    maps: int = 100

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        mask = mask.astype(bool)
        x = jnp.where(mask[..., None], x, 0.0)
        lengths = jnp.sum(mask, axis=1)
        pooled = []
        for h in self.widths:
            padded = jnp.pad(x, ((0, 0), (h - 1, h - 1), (0, 0)))
            conv = nn.Conv(self.maps, (h,), padding="VALID", name=f"conv_{h}",
                           kernel_init=partitioned(nn.initializers.lecun_normal(), (None, "embed", "mlp")),
                           bias_init=partitioned(nn.initializers.zeros, ("mlp",)))(padded)  # [B, T + h - 1, maps]
            windows = jnp.arange(conv.shape[1])[None, :] < (lengths + h - 1)[:, None]
            pooled.append(_masked_max(jax.nn.relu(conv), windows))
        return jnp.concatenate(pooled, axis=-1)


class BiLSTM(nn.Module):
    """Forward and backward LSTM over the real words: (outputs [B, T, H] each, final carries)."""

    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array):
        fwd, fwd_carry = LSTM(self.hidden, name="forward")(x, mask)
        bwd, bwd_carry = LSTM(self.hidden, reverse=True, name="backward")(x, mask)
        return fwd, bwd, fwd_carry, bwd_carry


class TextRNN(nn.Module):
    """[B, T, D] -> [B, 2H]: BiLSTM last states (``pool='last'``) or max-pooled outputs (``pool='max'``)."""

    hidden: int = 100
    pool: str = "last"

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        fwd, bwd, fwd_carry, bwd_carry = BiLSTM(self.hidden, name="bilstm")(x, mask)
        if self.pool == "last":
            return jnp.concatenate([fwd_carry.h, bwd_carry.h], axis=-1)
        return _masked_max(jnp.concatenate([fwd, bwd], axis=-1), mask.astype(bool))


class TextRCNN(nn.Module):
    """[B, T, D] -> [B, proj]: max-pooled tanh(W [c_l; e; c_r] + b) (Lai et al. 2015)."""

    hidden: int = 100
    proj: int = 100

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        fwd, bwd, _, _ = BiLSTM(self.hidden, name="bilstm")(x, mask)
        left = jnp.pad(fwd[:, :-1], ((0, 0), (1, 0), (0, 0)))  # state after the words before i
        right = jnp.pad(bwd[:, 1:], ((0, 0), (0, 1), (0, 0)))  # zeros past a row's end (masked steps output 0)
        y = nn.Dense(self.proj, name="projection",
                     kernel_init=partitioned(nn.initializers.lecun_normal(), ("embed", "mlp")),
                     bias_init=partitioned(nn.initializers.zeros, ("mlp",)))(
            jnp.concatenate([left, x, right], axis=-1))
        return _masked_max(jnp.tanh(y), mask.astype(bool))


def head_module(name: str, hidden: int = 100, pool: str = "last") -> nn.Module:
    if name == "textcnn":
        return TextCNN(name="textcnn")
    if name == "textrnn":
        return TextRNN(hidden, pool, name="textrnn")
    if name == "textrcnn":
        return TextRCNN(hidden, hidden, name="textrcnn")
    raise ValueError(f"unknown sentence head {name!r}; known: {', '.join(HEADS)}")


class WordInputs(nn.Module):
    """A batch -> word vectors [B, T, D]. ``vocab_size`` > 0: ``batch['ids']`` through an embedding table
    (U(-0.25, 0.25) as Kim's random vectors; static vectors replace it in ``fit``'s ``init_params``); else
    ``batch['features']`` [B, L, T, D]: L > 1 layers go through the scalar mix, one layer is used as it is.

    With both (``features.word_init``), the table's vector and the mixed features are concatenated, ``[x_k;
    ELMo_k]`` (Peters et al. 2018 Sec. 3.3).

    ``feature_norm`` (``features.feature_norm``): 'layer' turns on the scalar mix's layer normalisation;
    'dimension' standardises each layer's dimensions first, ``(h - feature_mean) * feature_scale`` with the
    parameters ``feature_mean`` / ``feature_scale`` [L, D] (zeros and ones at init; the training set's mean and
    1 / standard deviation are put there by ``fit``'s ``init_params`` and a frozen parameter-group rule keeps
    them: ``objectives/feature_tasks.py``)."""

    vocab_size: int = 0
    dim: int = 0
    num_layers: int = 1
    feature_norm: str = "none"

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], suffix: str = "") -> jax.Array:
        """``suffix`` '_b': the second sentence of a pair (``ids_b`` / ``features_b``, ``mask_b``), read through
        the same table or scalar mix."""
        if self.vocab_size:
            def init(key, shape, dtype=jnp.float32):
                return jax.random.uniform(key, shape, dtype, -0.25, 0.25)

            emb = self.param("embedding", partitioned(init, ("vocab", "embed")), (self.vocab_size, self.dim))
            words = jnp.take(emb, batch["ids" + suffix], axis=0)
            if "features" + suffix not in batch:
                return words
            return jnp.concatenate([words, self._features(batch, suffix)], axis=-1)  # [x_k; ELMo_k]
        return self._features(batch, suffix)

    def _features(self, batch: dict[str, jax.Array], suffix: str) -> jax.Array:
        feats = batch["features" + suffix].astype(jnp.float32)
        if self.feature_norm == "dimension":
            shape = (self.num_layers, feats.shape[-1])
            mean = self.param("feature_mean", partitioned(nn.initializers.zeros, (None, "embed")), shape)
            scale = self.param("feature_scale", partitioned(nn.initializers.ones, (None, "embed")), shape)
            real = batch["mask" + suffix].astype(jnp.float32)[:, None, :, None]
            feats = (feats - mean[None, :, None]) * scale[None, :, None] * real
        if self.num_layers == 1 and self.feature_norm != "layer":
            return feats[:, 0]
        from ptm_jax.models.scalar_mix import ScalarMix

        layers = [feats[:, i] for i in range(self.num_layers)]
        return ScalarMix(self.num_layers, layer_norm=self.feature_norm == "layer", name="scalar_mix")(
            layers, batch["mask" + suffix])


class FeatureClassifier(nn.Module):
    """Word inputs -> sentence head -> dropout -> linear logits [B, num_labels]. ``pair``: both sentences go
    through the same inputs and head (a siamese encoder, u and v) and the output layer reads
    ``[u; v; |u - v|; u * v]`` (Conneau et al. 2017, InferSent Sec. 3.1; SentEval's pair-task features)."""

    inputs: WordInputs
    head: str
    num_labels: int
    dropout: float = 0.5
    hidden: int = 100
    pool: str = "last"
    pair: bool = False

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> jax.Array:
        head = head_module(self.head, self.hidden, self.pool)
        pooled = head(self.inputs(batch), batch["mask"])
        if self.pair:
            v = head(self.inputs(batch, "_b"), batch["mask_b"])
            pooled = jnp.concatenate([pooled, v, jnp.abs(pooled - v), pooled * v], axis=-1)
        pooled = Dropout(self.dropout)(pooled, deterministic)
        return nn.Dense(self.num_labels, name="output",
                        kernel_init=partitioned(nn.initializers.lecun_normal(), ("embed", "classes")),
                        bias_init=partitioned(nn.initializers.zeros, ("classes",)))(pooled)


class FeatureTagger(nn.Module):
    """Word inputs -> dropout -> BiLSTM -> dropout -> linear logits per word [B, T, num_labels]."""

    inputs: WordInputs
    num_labels: int
    dropout: float = 0.5
    hidden: int = 100

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> jax.Array:
        x = Dropout(self.dropout)(self.inputs(batch), deterministic)
        fwd, bwd, _, _ = BiLSTM(self.hidden, name="bilstm")(x, batch["mask"])
        h = Dropout(self.dropout)(jnp.concatenate([fwd, bwd], axis=-1), deterministic)
        return nn.Dense(self.num_labels, name="output",
                        kernel_init=partitioned(nn.initializers.lecun_normal(), ("embed", "classes")),
                        bias_init=partitioned(nn.initializers.zeros, ("classes",)))(h)
