"""Per-word, per-layer features of any model: the spine's reader of ``Inspection.word_features``.

``word_features(params, model_cfg, tokenizer, sentences)`` returns one float32 ``[L, n_words, D]`` array per
sentence (a sentence is a list of words, as CoNLL-2003 gives them). A contextual family (BERT, GPT, XLNet)
computes it in its own ``word_features`` hook: the hidden state of every layer, layer 0 the context-free
embedding output, each word read at its first subword (the BERT paper's feature-based NER setup, Devlin et
al. 2019 Sec. 5.4, and the probing papers' convention: Tenney et al. 2019, Liu et al. 2019 "Linguistic
Knowledge and Transferability of Contextual Representations"). A family that has only static
``word_vectors`` (word2vec, GloVe, NNLM) is read as ONE layer: the word's row of the vector matrix; a family
with ``subword_vectors`` (fastText) as one layer of the vectors it composes for the words themselves (character
n-grams: out-of-vocabulary words get a vector too).

Static out-of-vocabulary rule: a word the vocabulary does not know (its id is the tokenizer's ``unk_id``, or
it has none) gets a row of ZEROS (not the ``<unk>`` vector, which word2vec never trains); how many words that
was is in ``stats['oov']`` when a ``stats`` dict is passed, and logged.

The helpers here are what the families' hooks share: :func:`encode_words` (each word's pieces, memoised per
word, laid out with the family's specials, the first piece's position kept), :func:`run_layers` (a jitted
``[B, S] -> [L, B, S, D]`` forward over length-bucketed batches, gathered back to words) and
:func:`inference_model` (dropout off, no remat, the loop layout of the layer stack, so Flax's
``capture_intermediates`` sees each layer). A Transformer family gives its trunk as a :class:`WordEncoder`
(``Inspection.word_encoder``: the differentiable ``[B, S] -> [L+1, B, S, H]`` function, its init and input layout),
and its ``word_features`` hook is then :func:`encoder_word_features`; the same encoder is what a task model
finetunes end to end under a word-level head (``objectives/feature_tasks.py``).

``load_model(path)`` loads what ``ptm embed`` and ``ptm neighbors`` load (``export/params.load_params``: a
params directory, a training run, a Hugging Face folder) with its tokenizer.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)

BUCKETS = (16, 32, 64, 128, 256, 512)
_COMPILED: dict[tuple, Callable] = {}


# ----------------------------------------------------------------------------------------------------
# Loading


def load_model(path: str) -> tuple[dict, Any, Any]:
    """(params, model config, tokenizer) of a params directory, training run or Hugging Face folder."""
    from ptm_jax.export.params import load_params, load_tokenizer

    params, cfg, info, tok_dir = load_params(path)
    return params, cfg, load_tokenizer(info, tok_dir)


def family_of(model_cfg: Any):
    from ptm_jax.families import registry

    return registry.get(model_cfg.family)


def supports_features(model_cfg: Any) -> bool:
    fam = family_of(model_cfg)
    return bool({"word_features", "word_vectors"} & fam.capabilities)


def num_layers(model_cfg: Any) -> int:
    """How many feature layers :func:`word_features` returns: 1 + the layer stack, or 1 for static vectors."""
    fam = family_of(model_cfg)
    if fam.inspection.word_features is None:
        return 1
    return 1 + int(model_cfg.num_layers)


# ----------------------------------------------------------------------------------------------------
# The reader


def _check_sentences(sentences: Sequence[Sequence[str]]) -> list[list[str]]:
    out = []
    for i, s in enumerate(sentences):
        if isinstance(s, str):
            raise DataError(f"sentence {i}: expected a list of words, got a string ({s[:40]!r}); split it first")
        out.append([str(w) for w in s])
    return out


def select_layers(arrays: list[np.ndarray], layers: Sequence[int] | None) -> list[np.ndarray]:
    """Keeps the layers ``layers`` (Python indices: -1 is the last) of each [L, n, D] array."""
    if layers is None or not arrays:
        return arrays
    n = arrays[0].shape[0]
    idx = []
    for k in layers:
        if not -n <= int(k) < n:
            raise ConfigError(f"layer {k} does not exist: the model has feature layers 0..{n - 1} (0 = the "
                              "embedding output)")
        idx.append(int(k) % n)
    return [a[idx] for a in arrays]


def word_features(params: dict, model_cfg: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], *,
                  layers: Sequence[int] | None = None, batch_size: int = 32,
                  stats: dict | None = None) -> list[np.ndarray]:
    """float32 [L, n_words, D] per sentence (module doc); ``layers`` picks some of the L layers. ``stats``, when
    given, receives 'words', 'layers' and 'oov': the words whose features are all zeros (static vectors: out of
    the vocabulary; contextual: cut by the model's maximum length, which the hook logs)."""
    sentences = _check_sentences(sentences)
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1")
    fam = family_of(model_cfg)
    if fam.inspection.word_features is not None:
        arrays = fam.inspection.word_features(params, model_cfg, tokenizer, sentences, batch_size=batch_size)
        oov = sum(int(np.sum(~np.any(a != 0, axis=(0, 2)))) for a in arrays)
    elif fam.inspection.subword_vectors is not None:  # fastText: every word has a vector (n-grams)
        vocab = list(dict.fromkeys(w for s in sentences for w in s))
        table = np.asarray(fam.inspection.subword_vectors(params, model_cfg, tokenizer, vocab), np.float32)
        row = {w: i for i, w in enumerate(vocab)}
        arrays = [table[[row[w] for w in s]][None].reshape(1, len(s), table.shape[1]) for s in sentences]
        oov = sum(int(np.sum(~np.any(a != 0, axis=(0, 2)))) for a in arrays)
    elif fam.inspection.word_vectors is not None:
        arrays, oov = static_features(np.asarray(fam.inspection.word_vectors(params, model_cfg), np.float32), tokenizer,
                                      sentences)
        if oov:
            log.info("%d of %d words are out of the vocabulary: their features are zeros", oov,
                     sum(map(len, sentences)))
    else:
        from ptm_jax.families import registry

        able = sorted(n for n, f in registry.families().items()
                      if f.inspection.word_features or f.inspection.word_vectors or f.inspection.subword_vectors)
        raise ConfigError(f"model.family={model_cfg.family!r} gives no word features; the families that do: "
                          f"{', '.join(able)}")
    arrays = [np.asarray(a, np.float32) for a in arrays]
    if stats is not None:
        stats.update(words=sum(map(len, sentences)), layers=int(arrays[0].shape[0]) if arrays else 0, oov=oov)
    return select_layers(arrays, layers)


def static_ids(tokenizer: Any, word: str) -> int:
    """The vocabulary id of ``word`` (the tokenizer's case rule applied), or -1 when it has none."""
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1:
        return -1
    i = int(tokenizer.token_to_id(pieces[0]))
    unk = getattr(tokenizer, "unk_id", -1)
    return -1 if i < 0 or i == unk or i in set(getattr(tokenizer, "special_ids", list)()) else i


def static_features(matrix: np.ndarray, tokenizer: Any, sentences: list[list[str]]
                    ) -> tuple[list[np.ndarray], int]:
    """One layer of static vectors per word: ([1, n, D] per sentence, number of words given zeros)."""
    cache: dict[str, int] = {}
    out, oov = [], 0
    dim = matrix.shape[1]
    for s in sentences:
        for w in s:
            if w not in cache:
                cache[w] = static_ids(tokenizer, w)
        ids = np.array([cache[w] for w in s], np.int64).reshape(-1)
        known = (ids >= 0) & (ids < matrix.shape[0])
        a = np.zeros((1, len(s), dim), np.float32)
        a[0, known] = matrix[ids[known]]
        oov += int(np.sum(~known))
        out.append(a)
    return out, oov


# ----------------------------------------------------------------------------------------------------
# Helpers for the families' hooks


@dataclasses.dataclass
class EncodedWords:
    """One sentence laid out for a model: ``ids`` [S] (specials included) and ``first`` [n_words], each word's
    first piece position (-1: cut by the maximum length)."""

    ids: np.ndarray
    first: np.ndarray


def encode_words(tokenizer: Any, sentences: list[list[str]], *, prefix: Sequence[int] = (),
                 suffix: Sequence[int] = (), max_length: int = 512, space_before: bool = False
                 ) -> list[EncodedWords]:
    """Each word's pieces (``tokenizer.tokenize(word)``, memoised per word; a word with none gets ``unk_id``, or
    is skipped when the tokenizer has none), between ``prefix`` and ``suffix`` ids, cut at ``max_length``.
    ``space_before``: words after the first are tokenized with a leading space (byte-level BPE, where a
    word in running text carries its space: 'Ġword')."""
    memo: dict[str, list[int]] = {}
    budget = max_length - len(prefix) - len(suffix)
    if budget < 1:
        raise ConfigError(f"max_length={max_length} leaves no room for words beside {len(prefix) + len(suffix)} "
                          "special tokens")
    unk = getattr(tokenizer, "unk_id", -1)
    out = []
    for words in sentences:
        ids: list[int] = list(prefix)
        first = np.full(len(words), -1, np.int32)
        for w, word in enumerate(words):
            key = (" " + word) if space_before and w > 0 else word
            pieces = memo.get(key)
            if pieces is None:
                pieces = [int(tokenizer.token_to_id(p)) for p in tokenizer.tokenize(key)]
                if not pieces and unk is not None and unk >= 0:
                    pieces = [unk]
                memo[key] = pieces
            if not pieces:
                continue
            if len(ids) - len(prefix) + len(pieces) > budget:
                break
            first[w] = len(ids)
            ids.extend(pieces)
        ids.extend(suffix)
        out.append(EncodedWords(np.asarray(ids, np.int32), first))
    return out


def _bucket(n: int) -> int:
    return next((b for b in BUCKETS if b >= n), n)


def run_layers(key: tuple, build: Callable[[], Callable], params: Any, rows: list[EncodedWords], *,
               batch_size: int, pad_id: int = 0) -> tuple[list[np.ndarray], int]:
    """Runs ``fn(params, ids [B,S], mask [B,S]) -> [L, B, S, D]`` (``build()``, jitted once per ``key``) over
    batches of rows sorted by length, padded on the right to a bucket length; returns each row's features at
    its words' first pieces ([L, n_words, D], zeros for cut words) and the number of cut words."""
    import jax

    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(build())
    fn = _COMPILED[key]
    params = jax.device_put(params)
    lengths = np.array([len(r.ids) for r in rows], np.int64)
    order = np.argsort(lengths, kind="stable")
    out: list[np.ndarray | None] = [None] * len(rows)
    for start in range(0, len(rows), batch_size):
        idx = order[start:start + batch_size]
        width = _bucket(int(lengths[idx].max()))
        ids = np.full((batch_size, width), pad_id, np.int32)
        mask = np.zeros((batch_size, width), np.int32)
        for j, r in enumerate(idx):
            ids[j, : lengths[r]] = rows[r].ids
            mask[j, : lengths[r]] = 1
        h = np.asarray(fn(params, ids, mask), np.float32)  # [L, B, S, D]
        for j, r in enumerate(idx):
            first = rows[r].first
            a = np.zeros((h.shape[0], len(first), h.shape[-1]), np.float32)
            kept = first >= 0
            a[:, kept] = h[:, j, first[kept]]
            out[r] = a
    cut = int(sum(np.sum(r.first < 0) for r in rows))
    if cut:
        log.warning("%d words lay beyond the model's maximum length: their features are zeros", cut)
    return [a for a in out if a is not None] if len(rows) else [], cut


@dataclasses.dataclass(frozen=True)
class WordEncoder:
    """A family's trunk as a differentiable function of its parameters (``Inspection.word_encoder``): what
    ``word_features`` runs frozen, and what a task model trains end to end under a word-level head
    (``objectives/feature_tasks.py`` with ``features.freeze_features=false``).

    ``hidden_states(trunk params, ids [B,S], mask [B,S]) -> [L+1, B, S, H]`` float32 (layer 0 the embedding
    output); ``init(rng, ids, mask) -> trunk params`` (boxed with their logical axes, for the loop's shardings);
    a sentence is laid out as ``prefix`` + its words' pieces + ``suffix`` (``space_before``: byte-level BPE words
    after the first carry their space) in at most ``max_length`` ids; ``trunk`` is the params key."""

    trunk: str
    cfg: Any
    hidden_states: Callable[..., Any]
    init: Callable[..., Any]
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    space_before: bool = False

    @property
    def max_length(self) -> int:
        return int(self.cfg.max_position_embeddings)

    @property
    def key(self) -> tuple:
        from ptm_jax.config_loading import to_dict

        return (self.trunk, type(self.cfg).__name__, json.dumps(to_dict(self.cfg), sort_keys=True))

    def encode(self, tokenizer: Any, sentences: list[list[str]], max_length: int | None = None
               ) -> list[EncodedWords]:
        return encode_words(tokenizer, sentences, prefix=self.prefix, suffix=self.suffix,
                            max_length=min(max_length or self.max_length, self.max_length),
                            space_before=self.space_before)


def encoder_word_features(encoder: WordEncoder, params: dict, tokenizer: Any, sentences: list[list[str]], *,
                          batch_size: int = 32) -> list[np.ndarray]:
    """``Inspection.word_features`` of a family with a :class:`WordEncoder`: every layer at each word's first piece."""
    from ptm_jax.export.params import to_layout

    rows = encoder.encode(tokenizer, sentences)
    out, _ = run_layers(encoder.key, lambda: encoder.hidden_states, to_layout(params, False)[encoder.trunk], rows,
                        batch_size=batch_size, pad_id=tokenizer.pad_id)
    return out


def inference_config(model_cfg: Any) -> Any:
    """The config with dropout 0, no remat, no scan (the loop layout, so ``capture_intermediates`` sees each
    layer), for a ``TransformerConfig`` family (``models/config.py``: the fields replaced here)."""
    return dataclasses.replace(model_cfg, remat="none", hidden_dropout=0.0, attention_dropout=0.0,
                               scan_layers=False)


def trunk_of(model_cfg: Any) -> str:
    """The params key of the family's trunk (``ParamLayout.trunk``)."""
    trunk = family_of(model_cfg).layout.trunk
    if not trunk:
        raise ConfigError(f"model.family={model_cfg.family!r} declares no trunk key")
    return trunk


def inference_model(params: dict, model_cfg: Any) -> tuple[dict, Any, str]:
    """(params in the loop layout, the config with dropout 0, no remat, no scan, a cache key of it), for a
    ``TransformerConfig`` family (``models/config.py``: the fields replaced here)."""
    from ptm_jax.config_loading import to_dict
    from ptm_jax.export.params import to_layout

    cfg = inference_config(model_cfg)
    return to_layout(params, False), cfg, json.dumps(to_dict(cfg), sort_keys=True)
