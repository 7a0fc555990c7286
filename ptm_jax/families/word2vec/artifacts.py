"""word2vec's sampling tables as a ``Pretraining.artifacts`` entry: the subsampling keep probabilities, the
unigram^0.75 distribution of the negatives and the Huffman tree of the hierarchical softmax (``sampling.py``,
word2vec.c ``InitUnigramTable`` / ``CreateBinaryTree``), built once from the vocabulary's counts and cached
beside the token cache (``<cache_dir>/artifacts/sampling_tables/<key>/tables.npz``), instead of for every
objective build (the Huffman tree of a 3M-word vocabulary is a Python heap walk of seconds).

The key hashes what the tables depend on: the counts (padded to ``model.vocab_size``), the special ids,
``data.sample``, whether there are negatives and ``data.hs``. Process 0 builds and writes the file; after a
barrier every process reads it (the same pattern as GloVe's co-occurrence artifact).
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any, Callable

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import DataError
from ptm_jax.families.word2vec.data import Tables

ARTIFACT = "sampling_tables"
TABLES_FILE = "tables.npz"
_FIELDS = ("keep", "cdf", "points", "codes", "lengths")


def vocabulary_counts(cfg: Any, corpus: Any) -> tuple[np.ndarray, list[int]]:
    """(int64 counts padded to ``model.vocab_size``, sorted special ids) of ``corpus``'s word tokenizer: its
    ``vocab.tsv`` counts, else occurrences counted over the train source."""
    from ptm_jax.errors import ConfigError

    tok = corpus.tokenizer
    counts = getattr(tok, "counts", None)
    if counts is None:
        counts = source_counts(corpus.train, cfg.model.vocab_size)
    counts = np.asarray(counts, np.int64)
    if counts.shape[0] > cfg.model.vocab_size:
        raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the word vocabulary "
                          f"({counts.shape[0]} entries); set model.vocab_size >= {counts.shape[0]}")
    counts = np.pad(counts, (0, cfg.model.vocab_size - counts.shape[0]))
    specials = sorted({int(i) for i in (getattr(tok, "pad_id", None), getattr(tok, "unk_id", None),
                                        getattr(tok, "eos_id", None)) if i is not None})
    return counts, specials


def source_counts(source: Any, vocab_size: int) -> np.ndarray:
    """int64 [vocab_size] occurrences of each id over ``source`` (for a tokenizer without counts)."""
    counts = np.zeros(vocab_size, np.int64)
    for d in range(source.num_docs):
        counts += np.bincount(source.doc_tokens(d), minlength=vocab_size)[:vocab_size]
    return counts


def build_tables(cfg: Any, counts: np.ndarray, specials: list[int]) -> Tables:
    d = cfg.data
    return Tables.build(counts, specials, sample=float(d.sample), negative=d.negative, hs=bool(d.hs))


def tables_key(cfg: Any, counts: np.ndarray, specials: list[int]) -> str:
    d = cfg.data
    spec = {"counts": hashlib.sha256(np.ascontiguousarray(counts, np.int64).tobytes()).hexdigest(),
            "specials": list(specials), "sample": float(d.sample), "negative": d.negative > 0, "hs": bool(d.hs),
            "version": 2}
    return "t-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def to_bytes(tables: Tables) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, kept=np.float64(tables.kept),
             **{k: getattr(tables, k) for k in _FIELDS if getattr(tables, k) is not None})
    return buf.getvalue()


def from_bytes(data: bytes, where: str) -> Tables:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            values = {k: (z[k] if k in z.files else None) for k in _FIELDS}
            kept = float(z["kept"]) if "kept" in z.files else None
    except (OSError, ValueError) as e:
        raise DataError(f"{where}: not a word2vec sampling-tables file ({e}); delete it to rebuild") from None
    if values["keep"] is None or kept is None:
        raise DataError(f"{where}: no 'keep' array or 'kept' fraction; delete the folder to rebuild")
    return Tables(**values, kept=kept)


def build_sampling_tables(cfg: Any, corpus: Any, directory: Any, *, process_index: int | None = None,
                          barrier: Callable[[str], None] | None = None) -> Tables:
    """The ``Pretraining.artifacts`` builder: the tables of ``corpus``'s counts under ``directory/<key>/``, built
    once (by process 0) and read by every process; a complete folder is reused."""
    import jax

    from ptm_jax.parallel.distributed import barrier as jax_barrier

    cfg.model.validate()
    cfg.data.validate_word2vec()
    pi = jax.process_index() if process_index is None else process_index
    meet = barrier or jax_barrier
    counts, specials = vocabulary_counts(cfg, corpus)
    root = fs.path(directory) / tables_key(cfg, counts, specials)
    final = root / TABLES_FILE
    if pi == 0 and not fs.is_complete(root):
        fs.write_bytes_atomic(final, to_bytes(build_tables(cfg, counts, specials)))
        fs.mark_complete(root)
    # every process meets, whatever it found on disk: a process that looked after process 0 had finished
    # would otherwise skip the barrier that process 0 waits at (a hang seen with 2 processes)
    meet("word2vec_sampling_tables")
    if not fs.exists(final):
        raise DataError(f"{root}: marked complete but {TABLES_FILE} is missing; delete the folder to rebuild")
    return from_bytes(fs.read_bytes(final), str(final))
