"""The CVT sequence tagger and its losses (Clark et al. 2018, Sec. 2 and Sec. 3.1, "Sequence Tagging").

The network::

    x       = dropout(word vectors)                          [B, T, D]  (models/text_heads.WordInputs)
    h1      = dropout([fwd_1; bwd_1]) = dropout(BiLSTM_1(x))  [B, T, 2 H1]
    h2      = dropout(BiLSTM_2(h1))                          [B, T, 2 H2]
    primary = NN(h1 ⊕ h2)                                    the primary prediction module, full view
    forward = NN_fwd(fwd_1^t)                                the auxiliary modules (Sec. 3.1), restricted views
    backward= NN_bwd(bwd_1^t)                                of the first layer
    future  = NN_future(fwd_1^{t-1})                         (t = 0: the forward LSTM's initial state, zeros)
    past    = NN_past(bwd_1^{t+1})                           (past the last word: the backward initial state)

with NN(h) = softmax(U ReLU(W h + b) + c), "a one-hidden-layer neural network" for every module; the model gives
the logits. The recurrences are the masked ``lax.scan`` LSTM (``models/lstm.py``): a row's padding never reaches
its words, so the future module at t reads words < t only and the past module words > t only.

Losses (Sec. 2): on a labelled minibatch the cross-entropy of the primary module, per labelled word (Eq. 1's
L_sup); on an unlabelled one ``L_CVT = sum_j D(p_θ(y|x), p_θ^j(y|x))`` per word (Eq. 2), D the KL divergence and
the primary module's predictions held fixed (``stop_gradient``), computed on the full view without dropout (the
teacher) while the auxiliary modules see the dropout-noised representations (the students), as the
authors' code runs its teacher (tensorflow/models research/cvt_text, ``run_teacher`` with ``is_training`` off).
That code also has a fifth module reading both layers without the ReLU ('full'); the paper's Sec. 3.1 lists the
four here. It feeds character-CNN and GloVe word vectors; here the words are ``finetune.init``'s table alone.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import partitioned
from ptm_jax.models.text_heads import BiLSTM, WordInputs

VIEWS = ("forward", "backward", "future", "past")
"""The auxiliary prediction modules, in the order of the paper's Sec. 3.1."""


class PredictionModule(nn.Module):
    """NN(h): Dense(projection) -> ReLU -> Dense(num_labels) logits (the softmax is the loss's)."""

    projection: int
    num_labels: int

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:
        dense = dict(kernel_init=partitioned(nn.initializers.lecun_normal(), ("embed", "mlp")),
                     bias_init=partitioned(nn.initializers.zeros, ("mlp",)))
        z = jax.nn.relu(nn.Dense(self.projection, name="hidden", **dense)(h))
        return nn.Dense(self.num_labels, name="output",
                        kernel_init=partitioned(nn.initializers.lecun_normal(), ("mlp", "classes")),
                        bias_init=partitioned(nn.initializers.zeros, ("classes",)))(z)


def restricted_views(fwd: jax.Array, bwd: jax.Array) -> dict[str, jax.Array]:
    """The first layer's states each auxiliary module reads at position t: fwd^t, bwd^t, fwd^{t-1}, bwd^{t+1}
    (zeros, the LSTMs' initial states, beyond the ends; a masked step's output is zeros, so bwd^{t+1} after a
    row's last word is zeros too)."""
    future = jnp.pad(fwd[:, :-1], ((0, 0), (1, 0), (0, 0)))
    past = jnp.pad(bwd[:, 1:], ((0, 0), (0, 1), (0, 0)))
    return {"forward": fwd, "backward": bwd, "future": future, "past": past}


class CvtTagger(nn.Module):
    """Word inputs -> two BiLSTM layers -> {'primary', 'forward', 'backward', 'future', 'past'} logits
    [B, T, num_labels] (module doc)."""

    inputs: WordInputs
    num_labels: int
    dropout: float = 0.5
    hidden_1: int = 100
    hidden_2: int = 100
    projection: int = 50

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> dict[str, jax.Array]:
        mask = batch["mask"]
        x = Dropout(self.dropout)(self.inputs(batch), deterministic)
        fwd1, bwd1, _, _ = BiLSTM(self.hidden_1, name="bilstm_1")(x, mask)
        h1 = Dropout(self.dropout)(jnp.concatenate([fwd1, bwd1], axis=-1), deterministic)
        fwd2, bwd2, _, _ = BiLSTM(self.hidden_2, name="bilstm_2")(h1, mask)
        h2 = Dropout(self.dropout)(jnp.concatenate([fwd2, bwd2], axis=-1), deterministic)
        out = {"primary": PredictionModule(self.projection, self.num_labels, name="primary")(
            jnp.concatenate([h1, h2], axis=-1))}
        views = restricted_views(h1[..., :self.hidden_1], h1[..., self.hidden_1:])
        for name in VIEWS:
            out[name] = PredictionModule(self.projection, self.num_labels, name=name)(views[name])
        return out


def supervised_sums(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sum of the primary module's cross-entropy over the labelled words, number of correct ones); ``labels``
    [B, T] with any value where ``weights`` [B, T] is 0."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    safe = jnp.maximum(labels, 0)
    nll = -jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    hit = (jnp.argmax(logits, -1) == safe).astype(jnp.float32)
    return jnp.sum(nll * weights), jnp.sum(hit * weights)


def cvt_sum(teacher_logits: jax.Array, students: dict[str, jax.Array], weights: jax.Array) -> jax.Array:
    """Sum over the words (``weights`` [B, T]) and over the auxiliary modules of KL(p_teacher || p_module), the
    teacher's distribution held fixed (Eq. 2)."""
    p_log = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_logits), axis=-1)
    p = jnp.exp(p_log)
    total = jnp.zeros((), jnp.float32)
    for name in VIEWS:
        q_log = jax.nn.log_softmax(students[name], axis=-1)
        total = total + jnp.sum(jnp.sum(p * (p_log - q_log), axis=-1) * weights)
    return total
