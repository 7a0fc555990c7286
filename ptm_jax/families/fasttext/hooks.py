"""What the spine asks of the fastText family besides its model and objective: the vectors of words given as
strings (in the vocabulary or not; ``Inspection.subword_vectors``), gradient-norm groups and a synthetic batch for
``ptm bench``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ptm_jax.errors import DataError
from ptm_jax.families.fasttext.model import TRUNK
from ptm_jax.families.fasttext.ngrams import ngram_buckets


def input_table(params: Any) -> np.ndarray:
    tree = params.get("params", params)
    table = tree[TRUNK]["input"]
    table = getattr(table, "value", table)  # a boxed (LogicallyPartitioned) leaf
    return np.asarray(table, dtype=np.float32)


def subword_vectors(params: Any, model_cfg: Any, tokenizer: Any, words: Sequence[str]) -> np.ndarray:
    """float32 [len(words), dim]: fastText's ``getWordVector``, the mean of the word's input units: its own row
    when the tokenizer knows it (words are lower-cased first when the tokenizer is) and the rows of its
    character n-grams. An out-of-vocabulary word is the mean of its n-gram rows alone (gensim's
    ``FastTextKeyedVectors.get_vector``); one without any n-gram (shorter than ``model.minn`` - 2 characters)
    is a DataError naming it. The vocabulary's specials are their own row."""
    table = input_table(params)
    lower = bool(getattr(tokenizer, "lower_case", False))
    unk = getattr(tokenizer, "unk_id", None)
    special = set(tokenizer.special_ids())
    out = np.zeros((len(words), table.shape[1]), np.float32)
    for n, word in enumerate(words):
        key = word.lower() if lower else word
        i = tokenizer.token_to_id(key)
        known = i is not None and (i != unk or key == tokenizer.id_to_token(unk))
        if known and i in special:
            out[n] = table[i]
            continue
        rows = ([i] if known else []) + [model_cfg.vocab_size + b for b in
                                         ngram_buckets(key, model_cfg.minn, model_cfg.maxn, model_cfg.bucket)]
        if not rows:
            raise DataError(f"word {word!r} is not in the vocabulary and has no character n-gram of "
                            f"{model_cfg.minn}..{model_cfg.maxn} characters (with '<' and '>'), so it has no "
                            f"vector; query a longer word or train with a smaller model.minn")
        out[n] = table[rows].mean(axis=0)
    return out


def forward_flops(cfg: Any) -> dict[str, float]:
    """2 x multiply-adds of one forward pass over the expected pairs of a batch without subsampling: B centers,
    S = window + 1 contexts a center, K negatives, U input units of a word, taken as a
    ``subwords.SYNTHETIC_LETTERS``-letter word's; the table lookups are gathers."""
    from ptm_jax.families.fasttext.subwords import SYNTHETIC_LETTERS

    m, d, b, s, k = cfg.model, cfg.model.dim, cfg.train.batch_size, cfg.data.window + 1, cfg.data.negative
    units = 1 + sum(max(0, SYNTHETIC_LETTERS + 3 - n) for n in range(m.minn, m.maxn + 1))
    cbow = cfg.objective.endswith("cbow")
    macs = {"unit_mean": b * units * d * (s if cbow else 1), "pair_scores": b * ((1 if cbow else s) + k) * d}
    return {key: 2.0 * v for key, v in macs.items()}


def step_flops(cfg: Any):
    from ptm_jax.bench.flops import StepFlops

    return StepFlops(forward=forward_flops(cfg), recompute=0.0, tokens=cfg.train.batch_size)


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: the table's name ('input', 'output')."""
    keys = [str(k) for k in keys]
    for name in ("output", "input"):
        if name in keys:
            return name
    return "other"


def infer_head(params: dict) -> str:
    return "word_vectors"


def synthetic_batch(example: dict[str, np.ndarray], cfg: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """word2vec's synthetic batch (random word ids, every slot training) with random n-gram rows as units."""
    from ptm_jax.families.word2vec.hooks import synthetic_batch as word2vec_batch

    out = word2vec_batch(example, cfg, rng)
    if "units" in out:
        out["units"] = rng.integers(3, cfg.model.input_rows, out["units"].shape).astype(np.int32)
    return out
