"""The stochastic answer network (SAN): K steps of reasoning over a sentence pair's encoder states, averaged
(Liu, Duh & Gao 2018, "Stochastic Answer Networks for Natural Language Inference", Sec. 2; MT-DNN's pairwise
text classification output layer, Liu et al. 2019 Sec. 3.1; facts from namisan/mt-dnn ``module/san.py``
``SANClassifier``, ``module/similarity.py``, ``module/dropout_wrapper.py``, ``mt_dnn/batcher.py`` and the
``--answer_*`` defaults of its ``train.py``).

Inputs: the encoder's last layer ``seq`` [B, S, H] of a packed pair ``[CLS] A [SEP] B [SEP]``, its padding mask
and its segment ids. Two memories, as mt-dnn's batcher cuts them from the one sequence:

- segment 0 (``[CLS] A [SEP]``, mt-dnn's ``hyp_mask``): the initial state ``s_0`` is its self-attentive
  summary, ``s_0 = sum_j a_j M0_j`` with ``a = softmax(M0 w)`` (mt-dnn ``LinearSelfAttn``);
- segment 1 (``B [SEP]``, mt-dnn's ``premise_mask``): the memory read at every step.

(The SAN paper summarises the hypothesis and reads the premise; mt-dnn's batcher gives the first segment the
``hyp_mask`` and the second the ``premise_mask``, and this module follows the code.)

Step t = 0..K-1 (K = ``steps``, 5 in both papers):

- read ``x_t = sum_j b_j M1_j`` with ``b = softmax(M1 W s_t)`` (mt-dnn's default ``bilinear`` flat attention);
- predict ``P_t = softmax(U [x_t; s_t; |x_t - s_t|; x_t * s_t] + c)`` (``answer_merge_opt 1``);
- update ``s_{t+1} = GRU(x_t, s_t)`` (PyTorch ``GRUCell`` gates: reset, update, new).

The answer is the mean of the K step distributions. Stochastic prediction dropout (``answer_mem_type 1``,
``answer_mem_drop_p 0.1``): in training each row drops each step with probability ``step_dropout`` (one step of
every row is always kept) and averages the steps it kept; at inference all K are averaged. The module returns
the log of that mean, so softmax cross-entropy on it is the negative log-likelihood of the averaged prediction
(mt-dnn takes ``log`` of the masked mean and its ``cross_entropy`` renormalises it: the same number).

Dropout (rate ``dropout``, mt-dnn's task dropout 0.1): on the memories before each attention, one mask per row
and feature shared by all positions (mt-dnn's variational ``DropoutWrapper`` on 3-D inputs), on the state before
the attention and before the GRU, and on the merged features before the classifier. Every random bit comes from
the ``dropout`` rng stream, so a run is a function of its seed.

Parameters carry logical axis names (``parallel/rules.py`` shards them): the summary weight and the classifier
[..., 'classes'], the bilinear map ['embed', 'embed_out'], the GRU kernels ['embed', 'mlp'].
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import Dense, constrain, partitioned, truncated_normal

_NEG = -1e30  # masked scores: finite, so a row with an empty segment gets a uniform read, never a NaN


def masked_softmax(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax over the last axis where ``mask``; a row with nothing to attend reads every position evenly."""
    return jax.nn.softmax(jnp.where(mask, scores, _NEG), axis=-1)


class GRUCell(nn.Module):
    """PyTorch ``GRUCell`` equations: r, z = sigmoid(x W_ir,iz + b + h W_hr,hz + b'); n = tanh(x W_in + b_in +
    r * (h W_hn + b_hn)); h' = (1 - z) * n + z * h."""

    features: int
    init_std: float = 0.02

    @nn.compact
    def __call__(self, x: jax.Array, h: jax.Array) -> jax.Array:
        f, init = self.features, truncated_normal(self.init_std)
        wi = self.param("input_kernel", partitioned(init, ("embed", "mlp")), (x.shape[-1], 3 * f))
        wh = self.param("hidden_kernel", partitioned(init, ("embed", "mlp")), (f, 3 * f))
        bi = self.param("input_bias", partitioned(nn.initializers.zeros, ("mlp",)), (3 * f,))
        bh = self.param("hidden_bias", partitioned(nn.initializers.zeros, ("mlp",)), (3 * f,))
        gi, gh = x @ wi + bi, h @ wh + bh
        r = jax.nn.sigmoid(gi[..., :f] + gh[..., :f])
        z = jax.nn.sigmoid(gi[..., f:2 * f] + gh[..., f:2 * f])
        n = jnp.tanh(gi[..., 2 * f:] + r * gh[..., 2 * f:])
        return (1.0 - z) * n + z * h


def step_keep_mask(rng: jax.Array, rows: int, steps: int, rate: float) -> jax.Array:
    """[rows, steps] float mask: each step kept with probability 1 - ``rate``, and one step of every row (drawn
    uniformly) kept whatever its draw, so no row averages nothing (mt-dnn ``generate_mask``)."""
    k1, k2 = jax.random.split(rng)
    keep = jax.random.bernoulli(k1, 1.0 - rate, (rows, steps))
    forced = jax.nn.one_hot(jax.random.randint(k2, (rows,), 0, steps), steps, dtype=bool)
    return (keep | forced).astype(jnp.float32)


class SANAnswer(nn.Module):
    """[B, S, H] states of a pair -> float32 [B, num_labels] log of the averaged step predictions (module
    docstring). The step distributions [B, K, C] are sown as ``intermediates/step_probs``, and the step mask
    used for the average as ``intermediates/step_keep``."""

    num_labels: int
    steps: int = 5
    dropout: float = 0.1
    step_dropout: float = 0.1
    init_std: float = 0.02

    @nn.compact
    def __call__(self, seq: jax.Array, input_mask: jax.Array, segment_ids: jax.Array, *,
                 deterministic: bool = True) -> jax.Array:
        seq = constrain(seq.astype(jnp.float32), ("batch", "length", "act_embed"))
        hidden = seq.shape[-1]
        valid = input_mask > 0
        first, second = valid & (segment_ids == 0), valid & (segment_ids != 0)
        mem_drop = Dropout(self.dropout, broadcast_dims=(1,))  # one mask per (row, feature) over positions
        drop = Dropout(self.dropout)

        m0 = mem_drop(seq, deterministic)  # the summary reads the dropped states (mt-dnn LinearSelfAttn)
        a = masked_softmax(Dense(1, ("embed", "classes"), self.init_std, name="summary")(m0)[..., 0], first)
        s = jnp.einsum("bs,bsh->bh", a, m0)
        attend = Dense(hidden, ("embed", "embed_out"), self.init_std, name="attention")
        classify = Dense(self.num_labels, ("embed", "classes"), self.init_std, name="classifier")
        gru = GRUCell(hidden, self.init_std, name="gru")
        probs = []
        for _ in range(self.steps):
            m1 = mem_drop(seq, deterministic)
            b = masked_softmax(jnp.einsum("bsh,bh->bs", m1, attend(drop(s, deterministic))), second)
            x = jnp.einsum("bs,bsh->bh", b, seq)  # the read takes the undropped states
            merged = jnp.concatenate([x, s, jnp.abs(x - s), x * s], axis=-1)
            probs.append(jax.nn.softmax(classify(drop(merged, deterministic)), axis=-1))
            s = gru(x, drop(s, deterministic))
        probs = jnp.stack(probs, axis=1)  # [B, K, C]
        if deterministic or self.step_dropout == 0.0:
            keep = jnp.ones(probs.shape[:2], jnp.float32)
        else:
            keep = step_keep_mask(self.make_rng("dropout"), probs.shape[0], self.steps, self.step_dropout)
        self.sow("intermediates", "step_probs", probs)
        self.sow("intermediates", "step_keep", keep)
        mean = jnp.einsum("bk,bkc->bc", keep, probs) / jnp.sum(keep, axis=1, keepdims=True)
        return jnp.log(jnp.maximum(mean, 1e-30))


class EncoderWithSAN(nn.Module):
    """A family's encoder (``Finetuning.task_heads['encoder']``, under its trunk key) with a SAN answer module as
    its 'classifier': the single-task model of a pair task that MT-DNN trained with ``mtdnn.answer=san``
    (``ptm eval`` of its best model)."""

    encoder: Any
    cfg: Any
    trunk: str
    num_labels: int
    steps: int = 5
    dropout: float = 0.1
    step_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True):
        seq, _ = self.encoder(self.cfg, name=self.trunk)(input_ids, input_mask, segment_ids,
                                                         deterministic=deterministic)
        return SANAnswer(self.num_labels, self.steps, self.dropout, self.step_dropout, self.cfg.initializer_range,
                         name="classifier")(seq, input_mask, segment_ids, deterministic=deterministic)
