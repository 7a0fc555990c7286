"""The n-gram ids of every vocabulary word: the fastText family's ``Pretraining.artifacts`` entry ``subwords``, built
once beside the token cache (fastText's ``Dictionary::initNgrams``, which fills each word's ``subwords`` when
the dictionary is built).

The table is small (the vocabulary's words x their longest n-gram list) but hashing every word in Python takes
seconds on a 100k vocabulary, so process 0 writes it to ``<cache_dir>/artifacts/subwords/<key>/subwords.npz``
and every process reads it after a barrier. The key covers the vocabulary's fingerprint and the settings
(``model.vocab_size``, ``minn``, ``maxn``, ``bucket``), so changing any of them builds a new table.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from typing import Any, Callable

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.fasttext.ngrams import subword_table

ARTIFACT = "subwords"
TABLE_FILE = "subwords.npz"


@dataclasses.dataclass(frozen=True)
class Subwords:
    """``ids`` int32 [vocab_size, N]: row i = word i's own id, then its n-gram rows (``nwords + bucket id``),
    padded with 0; ``lengths`` int32 [vocab_size]: the used entries of each row."""

    ids: np.ndarray
    lengths: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return np.arange(self.ids.shape[1])[None, :] < self.lengths[:, None]

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, ids=self.ids, lengths=self.lengths)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "Subwords":
        try:
            with np.load(io.BytesIO(data)) as z:
                return cls(ids=z["ids"], lengths=z["lengths"])
        except (OSError, KeyError, ValueError) as e:
            raise DataError(f"{where}: not a readable n-gram table ({e}); delete it to rebuild") from e


def vocabulary_words(tokenizer: Any, vocab_size: int) -> list[str]:
    """The tokenizer's words by id, padded with '' up to ``model.vocab_size`` (unused rows)."""
    n = int(tokenizer.vocab_size)
    if n > vocab_size:
        raise ConfigError(f"model.vocab_size={vocab_size} is smaller than the word vocabulary ({n} entries); set "
                          f"model.vocab_size >= {n}")
    return [tokenizer.id_to_token(i) for i in range(n)] + [""] * (vocab_size - n)


SYNTHETIC_LETTERS = 8
"""``synthetic_table``: each id stands for a word of this many letters (4 x 8 - 6 = 26 n-grams of 3-6)."""


def synthetic_table(model_cfg: Any) -> Subwords:
    """For a tokenizer without words (``ptm bench``/``ptm compile``'s synthetic corpus): every id gets its own
    row and the n-gram count of a ``SYNTHETIC_LETTERS``-letter word, spread over the buckets by a
    multiplicative hash, so the shapes and the rows touched are a real vocabulary's."""
    v, n = int(model_cfg.vocab_size), max(1, sum(max(0, SYNTHETIC_LETTERS + 3 - k)
                                                 for k in range(model_cfg.minn, model_cfg.maxn + 1)))
    i = np.arange(v, dtype=np.int64)[:, None]
    k = np.arange(1, n + 1, dtype=np.int64)[None, :]
    grams = v + (i * 2654435761 + k * 40503) % int(model_cfg.bucket)
    ids = np.concatenate([i, grams], axis=1).astype(np.int32)
    return Subwords(ids, np.full(v, n + 1, np.int32))


def build_table(model_cfg: Any, tokenizer: Any) -> Subwords:
    """The table of ``tokenizer``'s words under ``model_cfg``'s n-gram settings (no cache); a tokenizer
    without words (a synthetic corpus) gets ``synthetic_table``."""
    model_cfg.validate()
    if not hasattr(tokenizer, "id_to_token"):
        return synthetic_table(model_cfg)
    words = vocabulary_words(tokenizer, model_cfg.vocab_size)
    specials = set(tokenizer.special_ids()) | set(range(int(tokenizer.vocab_size), model_cfg.vocab_size))
    ids, lengths = subword_table(words, specials, nwords=model_cfg.vocab_size, minn=model_cfg.minn,
                                 maxn=model_cfg.maxn, bucket=model_cfg.bucket)
    return Subwords(ids, lengths)


def artifact_key(model_cfg: Any, tokenizer: Any) -> str:
    fingerprint = tokenizer.fingerprint() if hasattr(tokenizer, "fingerprint") else None
    spec = {"vocab": fingerprint, "vocab_size": int(model_cfg.vocab_size), "minn": model_cfg.minn,
            "maxn": model_cfg.maxn, "bucket": model_cfg.bucket, "version": 1}
    return "s-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_subwords(cfg: Any, corpus: Any, directory: Any, *, process_index: int | None = None,
                   barrier: Callable[[str], None] | None = None) -> Subwords:
    """The ``Pretraining.artifacts`` builder (module doc). A complete folder is reused."""
    import jax

    from ptm_jax.parallel.distributed import barrier as jax_barrier

    pi = jax.process_index() if process_index is None else process_index
    meet = barrier or jax_barrier
    cfg.model.validate()  # on every process, before any of them waits at the barrier
    root = fs.path(directory) / artifact_key(cfg.model, corpus.tokenizer)
    final = root / TABLE_FILE
    if pi == 0 and not fs.is_complete(root):
        fs.write_bytes_atomic(final, build_table(cfg.model, corpus.tokenizer).to_bytes())
        fs.mark_complete(root)
    meet("fasttext_subwords")  # by every process, whatever it found on disk (word2vec's sampling tables say why)
    if not fs.exists(final):
        raise DataError(f"{root}: marked complete but {TABLE_FILE} is missing; delete the folder to rebuild")
    return Subwords.from_bytes(fs.read_bytes(final), str(final))
