"""A linear-chain conditional random field over per-word emission scores (Lafferty et al. 2001; the tagger's
output layer of Huang et al. 2015, "Bidirectional LSTM-CRF Models for Sequence Tagging", and Lample et al. 2016,
"Neural Architectures for Named Entity Recognition", Sec. 2.2; Akbik et al. 2018 put it on Flair embeddings).

For emissions ``E`` [T, K] of one sentence of length n and a tag sequence y::

    score(y) = start[y_1] + sum_{t=1..n} E[t, y_t] + sum_{t=2..n} transitions[y_{t-1}, y_t] + end[y_n]
    log Z    = logsumexp over every y in K^n of score(y)      (the forward algorithm, in log space: O(n K^2))
    -log p(y) = log Z - score(y)
    decode   = argmax_y score(y)                               (Viterbi: the same recursion with max)

``transitions[i, j]`` scores tag i followed by tag j (pytorch-crf's convention); ``start`` and ``end`` score the
first and last tag. Every function takes a batch: emissions [B, T, K], a mask [B, T] marking each row's words
as a prefix (right padding; a row may be empty), and returns one value per row (an empty row scores 0 and has
log Z = 0, so its NLL is 0).

Allowed transitions (:func:`allowed_transitions`): a tag scheme ('iob1', 'iob2', 'bioes') forbids transitions
that cannot occur in it (IOB2: ``I-X`` only after ``B-X`` or ``I-X``); a forbidden one gets
:data:`FORBIDDEN` added to its score, so training and decoding never choose it (AllenNLP's
``allowed_transitions`` is the model). 'none' allows everything: the CRF learns its transitions.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.tasks.sections import TAG_SCHEMES as SCHEMES
from ptm_jax.errors import ConfigError
from ptm_jax.models.layers import partitioned
FORBIDDEN = -10000.0
"""Added to the score of a forbidden transition (finite: a row of forbidden choices still normalises)."""


class CrfParams(NamedTuple):
    """The CRF's scores: ``transitions`` [K, K] (from, to), ``start`` [K], ``end`` [K]."""

    transitions: jax.Array
    start: jax.Array
    end: jax.Array


def _lengths(mask: jax.Array) -> jax.Array:
    return jnp.sum(mask.astype(jnp.int32), axis=1)


def sequence_score(emissions: jax.Array, tags: jax.Array, mask: jax.Array, crf: CrfParams) -> jax.Array:
    """score(y) of ``tags`` [B, T] (values past a row's length are ignored): [B]."""
    mask = mask.astype(bool)
    e = emissions.astype(jnp.float32)
    tags = jnp.where(mask, tags, 0)
    emit = jnp.sum(jnp.take_along_axis(e, tags[..., None], axis=-1)[..., 0] * mask, axis=1)
    pair = crf.transitions[tags[:, :-1], tags[:, 1:]] * (mask[:, 1:] & mask[:, :-1])
    n = _lengths(mask)
    last = jnp.take_along_axis(tags, jnp.maximum(n - 1, 0)[:, None], axis=1)[:, 0]
    edges = crf.start[tags[:, 0]] + crf.end[last]
    return jnp.where(n > 0, emit + jnp.sum(pair, axis=1) + edges, 0.0)


def log_partition(emissions: jax.Array, mask: jax.Array, crf: CrfParams) -> jax.Array:
    """log Z per row by the forward algorithm in log space: [B]. alpha_1 = start + E_1; alpha_t[j] =
    logsumexp_i(alpha_{t-1}[i] + transitions[i, j]) + E_t[j] where row t is a word, else alpha_{t-1}."""
    mask = mask.astype(bool)
    e = emissions.astype(jnp.float32)
    alpha0 = crf.start[None, :] + e[:, 0]

    def step(alpha, xs):
        e_t, m_t = xs
        new = jax.nn.logsumexp(alpha[:, :, None] + crf.transitions[None], axis=1) + e_t
        return jnp.where(m_t[:, None], new, alpha), None

    alpha, _ = jax.lax.scan(step, alpha0, (jnp.swapaxes(e[:, 1:], 0, 1), jnp.swapaxes(mask[:, 1:], 0, 1)))
    return jnp.where(_lengths(mask) > 0, jax.nn.logsumexp(alpha + crf.end[None, :], axis=-1), 0.0)


def negative_log_likelihood(emissions: jax.Array, tags: jax.Array, mask: jax.Array, crf: CrfParams) -> jax.Array:
    """-log p(tags | emissions) = log Z - score(tags), per row: [B]."""
    return log_partition(emissions, mask, crf) - sequence_score(emissions, tags, mask, crf)


def viterbi_decode(emissions: jax.Array, mask: jax.Array, crf: CrfParams) -> tuple[jax.Array, jax.Array]:
    """(best tags int32 [B, T] with 0 past each row's length, their score [B]): the forward recursion with max
    and back-pointers, then the path read backwards from the best last tag."""
    mask = mask.astype(bool)
    e = emissions.astype(jnp.float32)
    B, T, K = e.shape
    delta0 = crf.start[None, :] + e[:, 0]

    def forward(delta, xs):
        e_t, m_t = xs
        cand = delta[:, :, None] + crf.transitions[None]            # [B, from, to]
        best_from = jnp.argmax(cand, axis=1).astype(jnp.int32)      # [B, to]
        new = jnp.max(cand, axis=1) + e_t
        keep = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (B, K))  # a padded step points to itself
        return jnp.where(m_t[:, None], new, delta), jnp.where(m_t[:, None], best_from, keep)

    delta, back = jax.lax.scan(forward, delta0, (jnp.swapaxes(e[:, 1:], 0, 1), jnp.swapaxes(mask[:, 1:], 0, 1)))
    final = delta + crf.end[None, :]
    last = jnp.argmax(final, axis=-1).astype(jnp.int32)
    score = jnp.max(final, axis=-1)

    def backward(tag, ptr):                                          # ptr: [B, K], step t -> t - 1
        prev = jnp.take_along_axis(ptr, tag[:, None], axis=1)[:, 0]
        return prev, tag

    first, path = jax.lax.scan(backward, last, back, reverse=True)   # path[t - 1] = tag at t, t = 1..T-1
    tags = jnp.concatenate([first[:, None], jnp.swapaxes(path, 0, 1)], axis=1)
    n = _lengths(mask)
    return jnp.where(mask, tags, 0).astype(jnp.int32), jnp.where(n > 0, score, 0.0)


# ------------------------------------------------------------------------------------------------ constraints

def _split(label: str, scheme: str, where: str) -> tuple[str, str]:
    prefixes = {"iob1": "BI", "iob2": "BI", "bioes": "BIES"}[scheme]
    if label == "O":
        return "O", ""
    if len(label) > 2 and label[1] == "-" and label[0] in prefixes:
        return label[0], label[2:]
    raise ConfigError(f"{where}: label {label!r} does not fit tag scheme {scheme!r} (O or "
                      f"{'/'.join(prefixes)}-TYPE); set the scheme of the labels or 'none'")


def _allowed(prev: tuple[str, str] | None, cur: tuple[str, str] | None, scheme: str) -> bool:
    """Whether tag ``cur`` may follow ``prev`` (None: the sentence's start, as prev; its end, as cur)."""
    p, pt = prev if prev is not None else ("START", "")
    c, ct = cur if cur is not None else ("END", "")
    if scheme == "iob2":
        return not (c == "I" and not (p in "BI" and p != "START" and pt == ct))
    if scheme == "iob1":  # B- only separates two adjacent chunks of one type
        return not (c == "B" and not (p in ("B", "I") and pt == ct))
    inside = p in ("B", "I") and p != "START"  # bioes: B/I must be continued by I/E of their type
    if inside:
        return c in ("I", "E") and ct == pt
    return c in ("O", "B", "S", "END")


def allowed_transitions(labels: Sequence[str], scheme: str, where: str = "tagging.crf_constraints"
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(allowed [K, K] from->to, allowed at the start [K], allowed at the end [K]) for ``labels`` in ``scheme``;
    an unknown scheme or a label outside it is a ConfigError naming ``where``."""
    if scheme not in SCHEMES:
        raise ConfigError(f"{where}={scheme!r} is not a tag scheme the CRF knows; use one of {', '.join(SCHEMES)}")
    k = len(labels)
    if scheme == "none":
        return np.ones((k, k), bool), np.ones(k, bool), np.ones(k, bool)
    parts = [_split(label, scheme, where) for label in labels]
    trans = np.array([[_allowed(a, b, scheme) for b in parts] for a in parts], bool)
    start = np.array([_allowed(None, b, scheme) for b in parts], bool)
    end = np.array([_allowed(a, None, scheme) for a in parts], bool)
    return trans, start, end


class CRF(nn.Module):
    """The CRF's parameters for ``num_tags`` tags, U(-0.1, 0.1) as pytorch-crf, with the scheme's forbidden
    transitions (``allowed``: :func:`allowed_transitions`' three masks, or None) pushed to :data:`FORBIDDEN`:
    ``() -> CrfParams``."""

    num_tags: int
    allowed: tuple | None = None

    @nn.compact
    def __call__(self) -> CrfParams:
        k = self.num_tags

        def init(key, shape, dtype=jnp.float32):
            return jax.random.uniform(key, shape, dtype, -0.1, 0.1)

        trans = self.param("transitions", partitioned(init, (None, "classes")), (k, k))
        start = self.param("start", partitioned(init, ("classes",)), (k,))
        end = self.param("end", partitioned(init, ("classes",)), (k,))
        if self.allowed is not None:
            a_trans, a_start, a_end = (jnp.asarray(np.asarray(m), bool) for m in self.allowed)
            trans = jnp.where(a_trans, trans, trans + FORBIDDEN)
            start = jnp.where(a_start, start, start + FORBIDDEN)
            end = jnp.where(a_end, end, end + FORBIDDEN)
        return CrfParams(trans.astype(jnp.float32), start.astype(jnp.float32), end.astype(jnp.float32))


def crf_module(num_tags: int, scheme: str, labels: Sequence[str] | None = None,
               where: str = "tagging.crf_constraints") -> CRF:
    """A :class:`CRF` for ``labels`` with ``scheme``'s constraints ('none': unconstrained), its masks kept as
    nested tuples (a module's fields stay hashable)."""
    if scheme == "none":
        allowed_transitions([], scheme, where)
        return CRF(num_tags, None)

    def frozen(m: np.ndarray) -> tuple:
        return tuple(frozen(row) for row in m) if m.ndim > 1 else tuple(bool(x) for x in m)

    return CRF(num_tags, tuple(frozen(np.asarray(m)) for m in allowed_transitions(list(labels or []), scheme, where)))
