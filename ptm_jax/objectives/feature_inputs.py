"""What a feature-based task model reads for each word: the source named by ``finetune.init`` when
``finetune.job=features`` (``objectives/feature_tasks.py``, ``jobs/features``).

Four kinds of source, one rule each:

* ``random`` / ``random:DIM``: an embedding table over the task's training words, trained from U(-0.25, 0.25)
  (Kim 2014 Sec. 3.2, CNN-rand; DIM 100 unless given).
* a word-vector file (word2vec text or binary, ``export/vector_files.read_vectors``), or a model whose family
  gives only static ``word_vectors`` (word2vec, GloVe, NNLM): the same table, its rows initialised from the
  vectors (Kim's CNN-static / CNN-non-static, ``features.freeze_embeddings``). The table covers the training
  words and the evaluation words that the vectors know; a word the vectors lack gets U(-a, a) with a chosen so
  that it has the variance of the pretrained rows (Kim Sec. 3.1). A file lookup takes the exact word, else its
  first case-insensitive match; a model's lookup follows its tokenizer's case rule (``evaluate/features.py``).
  A subword family (``Inspection.subword_vectors``: fastText, Bojanowski et al. 2017 Sec. 3.2) has a vector for
  every word, composed from its character n-grams: the table holds every training and evaluation word.
* a model whose family gives per-layer features (``Inspection.word_features``: BERT, GPT, XLNet, ELMo, ...):
  ``evaluate/features.word_features`` of every sentence, computed once and cached on disk
  (:func:`cached_features`, keyed by the model's files and the sentences), held as one float16 array of all
  words (:class:`FeatureStore`) and gathered into dense ``[B, L, T, D]`` batches. The task model mixes the L
  layers with a learned scalar mix (Peters et al. 2018 Eq. 1).

Words are CoNLL's words, or the words of a GLUE text (:func:`text_words`): its whitespace-separated tokens with
brackets, quotes and sentence punctuation split off their ends (SST-2 is distributed tokenized, so its tokens
stay as they are; MRPC, STS-B and RTE are raw text, where 'dog.' is the two words 'dog' and '.').
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax import digest
from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)

_LEAD = "([{\"'`"
_TRAIL = ".,;:!?)]}\"'`"
_CLITICS = {"'s", "'re", "'ll", "'ve", "'d", "'m", "n't"}


def text_words(text: str) -> list[str]:
    """The words of a raw text (module doc): a token with a letter or digit loses its leading ``_LEAD`` and trailing
    ``_TRAIL`` characters, each one a word of its own; a clitic token ('s, n't) and an apostrophe inside a word stay;
    a token of punctuation alone ('...', '--') is one word."""
    out: list[str] = []
    for tok in text.split():
        if not any(c.isalnum() for c in tok) or tok.lower() in _CLITICS:
            out.append(tok)
            continue
        i, j = 0, len(tok)
        while i < j and tok[i] in _LEAD:
            i += 1
        while j > i and tok[j - 1] in _TRAIL and not (tok[j - 1] == "'" and j - 2 >= i and tok[j - 2] == "s"):
            j -= 1
        out.extend(tok[:i])
        out.append(tok[i:j])
        out.extend(tok[j:])
    return out


PAD, UNK = 0, 1
"""Rows 0 and 1 of a word table: padding and words outside it."""
RANDOM_DIM = 100


@dataclasses.dataclass
class Source:
    """A resolved ``finetune.init``. ``kind``: 'random', 'static' (``lookup(word) -> vector or None``, or for a
    subword family ``vectors_of(words) -> [n, dim]``, a vector for every word) or 'layers' (``params``,
    ``model_cfg``, ``tokenizer``, ``num_layers``)."""

    kind: str
    description: str
    dim: int
    key: str = ""
    lookup: Any = None
    vectors_of: Any = None
    params: Any = None
    model_cfg: Any = None
    tokenizer: Any = None
    num_layers: int = 1


def _files_key(path: Path) -> str:
    """The identity of a model on disk: its absolute path and every file's relative path, size and mtime."""
    entries = []
    for root, _, files in os.walk(path):
        for name in sorted(files):
            p = Path(root) / name
            st = p.stat()
            entries.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
    return json.dumps([str(path.resolve()), sorted(entries)])


def resolve_source(init: str) -> Source:
    """``finetune.init`` -> :class:`Source` (module doc), or a ConfigError saying what it may be."""
    if not init:
        raise ConfigError("finetune.job=features but finetune.init is empty: name the word features: 'random' (or "
                          "'random:DIM'), a word-vector file, or a model (params directory, run, Hugging Face "
                          "folder) whose family gives word vectors or per-layer word features")
    if init == "random" or init.startswith("random:"):
        dim = init.partition(":")[2] or str(RANDOM_DIM)
        if not dim.isdigit() or int(dim) < 1:
            raise ConfigError(f"finetune.init={init!r}: write 'random' or 'random:DIM' with DIM a positive integer")
        return Source("random", f"random embeddings, dim {dim}, trained", int(dim))
    path = Path(init)
    if path.is_file():
        from ptm_jax.export.vector_files import read_vectors

        words, vectors = read_vectors(path)
        exact: dict[str, int] = {}
        folded: dict[str, int] = {}
        for i, w in enumerate(words):
            exact.setdefault(w, i)
            folded.setdefault(w.lower(), i)

        def lookup(word: str):
            i = exact.get(word, folded.get(word.lower()))
            return None if i is None else vectors[i]

        return Source("static", f"{len(words)} static vectors of dim {vectors.shape[1]} from {path}",
                      int(vectors.shape[1]), lookup=lookup)
    if not path.exists():
        raise ConfigError(f"finetune.init={init!r} does not exist; for feature heads it is 'random', a word-vector "
                          "file, or a model directory")
    from ptm_jax.evaluate import features

    params, model_cfg, tokenizer = features.load_model(init)
    fam = features.family_of(model_cfg)
    if not features.supports_features(model_cfg):  # no hooks, or vectors of a graph's nodes rather than of words
        raise ConfigError(f"finetune.init={init!r}: model.family={model_cfg.family!r} gives neither word vectors nor "
                          "per-layer word features; pick another model, a vector file or 'random'")
    if fam.inspection.word_features is not None:
        n = features.num_layers(model_cfg)
        return Source("layers", f"frozen per-layer features of {path} (family {model_cfg.family}, {n} layers)",
                      0, key=_files_key(path), params=params, model_cfg=model_cfg, tokenizer=tokenizer,
                      num_layers=n)
    if fam.inspection.subword_vectors is not None:  # fastText: any word's vector from its character n-grams
        hook = fam.inspection.subword_vectors

        def vectors_of(words: Sequence[str]) -> np.ndarray:
            return np.asarray(hook(params, model_cfg, tokenizer, list(words)), np.float32)

        dim = int(vectors_of(["a"]).shape[1])
        return Source("static", f"subword vectors of {path} (family {model_cfg.family}, dim {dim})", dim,
                      vectors_of=vectors_of)
    matrix = np.asarray(fam.inspection.word_vectors(params, model_cfg), np.float32)

    def lookup(word: str):
        i = features.static_ids(tokenizer, word)
        return None if i < 0 or i >= len(matrix) else matrix[i]

    return Source("static", f"static vectors of {path} (family {model_cfg.family}, dim {matrix.shape[1]})",
                  int(matrix.shape[1]), lookup=lookup)


# ---------------------------------------------------------------------------------------------- word tables

@dataclasses.dataclass
class WordTable:
    """The words of an embedding table (row i = ``words[i]``; rows 0/1 padding and unknown) and its initial
    rows (None: random init); ``found`` counts the rows taken from the vectors."""

    words: list[str]
    matrix: np.ndarray | None
    found: int

    def ids(self, sentence: Sequence[str], length: int) -> tuple[np.ndarray, np.ndarray]:
        index = self.index
        ids = np.zeros(length, np.int32)
        row = [index.get(w, UNK) for w in sentence[:length]]
        ids[:len(row)] = row
        mask = (np.arange(length) < len(row)).astype(np.int32)
        return ids, mask

    @property
    def index(self) -> dict[str, int]:
        if not hasattr(self, "_index"):
            self._index = {w: i for i, w in enumerate(self.words)}
        return self._index


def word_table(source: Source, train: Sequence[Sequence[str]], held: Sequence[Sequence[str]], seed: int = 0
               ) -> WordTable:
    """The table over the training words (first-seen order), plus the held-out words the vectors know."""
    words = ["<pad>", "<unk>"]
    seen = set(words)
    for s in train:
        for w in s:
            if w not in seen:
                seen.add(w)
                words.append(w)
    if source.kind == "random":
        return WordTable(words, None, 0)
    if source.vectors_of is not None:  # every word has a vector: the held-out words join the table too
        for s in held:
            for w in s:
                if w not in seen:
                    seen.add(w)
                    words.append(w)
        known = source.vectors_of(words[UNK + 1:])
        return WordTable(words, _with_pad_and_unk(known, seed), len(words) - UNK - 1)
    rows: dict[int, np.ndarray] = {}
    for i, w in enumerate(words):
        v = source.lookup(w) if i > UNK else None
        if v is not None:
            rows[i] = v
    for s in held:
        for w in s:
            if w not in seen and (v := source.lookup(w)) is not None:
                seen.add(w)
                rows[len(words)] = v
                words.append(w)
    if not rows:
        raise DataError(f"{source.description}: none of the task's {len(words) - 2} words has a vector; check the "
                        "vectors' language and case")
    known = np.stack(list(rows.values())).astype(np.float32)
    a = float(np.sqrt(3.0 * np.var(known)))  # U(-a, a) has variance a^2 / 3
    matrix = np.random.default_rng(seed).uniform(-a, a, (len(words), source.dim)).astype(np.float32)
    matrix[PAD] = 0.0
    for i, v in rows.items():
        matrix[i] = v
    return WordTable(words, matrix, len(rows))


def _with_pad_and_unk(known: np.ndarray, seed: int) -> np.ndarray:
    """Rows PAD (zeros) and UNK (uniform with the variance of ``known``, as a missing word's row) above
    ``known``."""
    known = np.asarray(known, np.float32)
    a = float(np.sqrt(3.0 * np.var(known)))
    unk = np.random.default_rng(seed).uniform(-a, a, (1, known.shape[1])).astype(np.float32)
    return np.concatenate([np.zeros_like(unk), unk, known])


# ---------------------------------------------------------------------------------------------- frozen layers

class FeatureStore:
    """The [L, n, D] features of many sentences as one float16 array [sum n, L, D] plus row offsets."""

    def __init__(self, arrays: Sequence[np.ndarray] = (), data: np.ndarray | None = None,
                 offsets: np.ndarray | None = None):
        if data is None:
            lengths = np.array([a.shape[1] for a in arrays], np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            data = (np.concatenate([np.transpose(a, (1, 0, 2)) for a in arrays]).astype(np.float16)
                    if len(arrays) else np.zeros((0, 1, 1), np.float16))
        self.data, self.offsets = data, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_layers(self) -> int:
        return int(self.data.shape[1])

    def append(self, other: FeatureStore) -> np.ndarray:
        """Adds ``other``'s rows after this store's; returns their row numbers here."""
        first = len(self)
        if len(self) == 0:
            self.data, self.offsets = other.data, other.offsets
        else:
            self.data = np.concatenate([self.data, other.data])
            self.offsets = np.concatenate([self.offsets, self.offsets[-1] + other.offsets[1:]])
        return np.arange(first, len(self))

    def dense(self, rows: np.ndarray, length: int) -> np.ndarray:
        """float32 [len(rows), L, length, D]: each row's first ``length`` words, zeros after."""
        out = np.zeros((len(rows), self.data.shape[1], length, self.data.shape[2]), np.float32)
        for j, r in enumerate(rows):
            a, b = self.offsets[r], min(self.offsets[r + 1], self.offsets[r] + length)
            out[j, :, : b - a] = np.transpose(self.data[a:b], (1, 0, 2))
        return out


def cached_features(source: Source, sentences: Sequence[Sequence[str]], cache_dir: str | Path,
                    batch_size: int = 32) -> FeatureStore:
    """The features of ``sentences`` from ``source`` (a 'layers' source), read from ``cache_dir`` when this model
    and these sentences were seen before, else computed and written there (atomically)."""
    from ptm_jax.evaluate.features import word_features

    h = hashlib.sha256(source.key.encode())
    digest.update_nested(h, sentences)  # each sentence's word count, then its words, length-prefixed
    path = Path(cache_dir) / f"{h.hexdigest()[:32]}.npz"
    if path.is_file():
        with np.load(path) as z:
            store = FeatureStore(data=z["data"], offsets=z["offsets"])
        if len(store) == len(sentences):
            log.info("features of %d sentences read from %s", len(sentences), path)
            return store
    stats: dict = {}
    arrays = word_features(source.params, source.model_cfg, source.tokenizer, [list(s) for s in sentences],
                           batch_size=batch_size, stats=stats)
    store = FeatureStore(arrays)
    import jax

    if jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
        np.savez(tmp, data=store.data, offsets=store.offsets)
        os.replace(tmp, path)
    log.info("features of %d sentences (%d words, %d zero) computed and cached in %s", len(sentences),
             stats.get("words", 0), stats.get("oov", 0), path)
    return store
