"""Contextual word features of any model with per-layer features, written to a file: ``ptm embed MODEL FILE
--layers ... [--mix ...]``. AllenNLP's ``allennlp elmo`` command is the model (``--all``,
``--top``, ``--average``; one hdf5 dataset per sentence).

- Input: one sentence per line, words separated by whitespace (as CoNLL-2003 and bilm-tf's ``Batcher`` read
  them). An empty line is a DataError naming the line (a sentence needs a word); non-UTF-8 bytes are one too
  (``export/inference.read_lines``).
- Features: ``evaluate/features.word_features`` asks the model's family (``Inspection.word_features``): ELMo's token
  representation and biLSTM layers, BERT/GPT/XLNet's hidden states at each word's first subword, or one layer of
  static vectors. ``--layers all | top | i,j,...`` picks layers (0 = the context-free token representation,
  negative indices count from the top).
- ``--mix`` combines the picked layers with ELMo's scalar mix (Peters et al. 2018 eq. 1, ``models/scalar_mix.py``):
  ``average`` (w = 0: equal weights), ``w0,w1,...`` (raw weights, softmaxed), or a feature head's
  ``feature_model.json`` (``ptm finetune ... finetune.job=features``: the mix a task learned, over all layers, with
  the normalisation it was learned over: ``features.feature_norm`` 'dimension' standardises each layer by the
  stored training statistics, 'layer' turns ``--layer-norm`` on), times ``--gamma``; ``--layer-norm``
  normalises each layer first, over the words of its sentence (the module normalises over a batch's real
  positions; per sentence here, so a sentence's features do not depend on which others are in the file).
- Output (``--out``): ``.npz`` (array ``"i"`` for sentence i: float32 [L, n_words, D], or [n_words, D] mixed),
  ``.hdf5`` / ``.h5`` (AllenNLP's layout: dataset ``"i"`` per sentence, and ``sentence_to_index``, a JSON string
  mapping the sentence text to i), ``.jsonl``; JSON lines on stdout without ``--out``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError, DataError


def parse_layers(spec: str, num_layers: int) -> list[int]:
    """``all`` | ``top`` | comma-separated indices (negative from the top) -> layer indices in [0, L)."""
    spec = spec.strip().lower()
    if spec == "all":
        return list(range(num_layers))
    if spec == "top":
        return [num_layers - 1]
    out = []
    for part in spec.split(","):
        try:
            i = int(part)
        except ValueError:
            raise ConfigError(f"--layers {spec!r}: expected 'all', 'top' or comma-separated layer indices "
                              f"(0..{num_layers - 1}, negative from the top)") from None
        if not -num_layers <= i < num_layers:
            raise ConfigError(f"--layers {spec!r}: layer {i} does not exist; this model has {num_layers} feature "
                              f"layers (0 = the token representation .. {num_layers - 1})")
        out.append(i % num_layers)
    return out


def mix_weights(spec: str, num_layers: int) -> tuple[np.ndarray, float | None, str, tuple | None]:
    """``--mix`` -> (softmax weights over the picked layers, gamma from a feature_model.json or None, the
    json's ``feature_norm`` ('none' otherwise), and its per-dimension (mean, scale) [L, D] with
    ``feature_norm='dimension'``, else None)."""
    if spec == "average":
        return np.full(num_layers, 1.0 / num_layers), None, "none", None
    path = Path(spec)
    if spec.endswith(".json") or path.is_dir():
        f = path / "feature_model.json" if path.is_dir() else path
        if not f.is_file():
            raise ConfigError(f"--mix {spec}: no such file (a feature head's feature_model.json, written beside "
                              "its best parameters by `ptm finetune ... finetune.job=features`)")
        meta = json.loads(f.read_text())
        mix = meta.get("scalar_mix")
        if not mix:
            raise ConfigError(f"--mix {f}: has no learned scalar mix (its head read one layer or a word table)")
        weights = np.asarray(mix["weights"], np.float64)
        if len(weights) != num_layers:
            raise ConfigError(f"--mix {f}: the mix has {len(weights)} layers but {num_layers} are picked; a learned "
                              "mix covers all layers (--layers all)")
        norm = meta.get("feature_norm", "none")
        stats = meta.get("feature_stats")
        if norm == "dimension" and not stats:
            raise ConfigError(f"--mix {f}: feature_norm is 'dimension' but the file has no feature_stats; "
                              "rerun the finetune that wrote it")
        stats = (np.asarray(stats["mean"], np.float64), np.asarray(stats["scale"], np.float64)) if stats else None
        return weights, float(mix["gamma"]), norm, stats
    try:
        w = np.asarray([float(x) for x in spec.split(",")], np.float64)
    except ValueError:
        raise ConfigError(f"--mix {spec!r}: expected 'average', comma-separated weights (one per picked layer, "
                          "softmaxed) or a feature_model.json") from None
    if len(w) != num_layers:
        raise ConfigError(f"--mix {spec!r}: {len(w)} weights for {num_layers} picked layers; give one per layer")
    e = np.exp(w - w.max())
    return e / e.sum(), None, "none", None


def scalar_mix(layers: np.ndarray, weights: np.ndarray, gamma: float, layer_norm: bool,
               eps: float = 1e-12) -> np.ndarray:
    """[L, n, D] -> [n, D]: gamma * sum_j s_j h_j (``models/scalar_mix.py``'s formula; the layer norm over the
    sentence's words and all dimensions of a layer)."""
    x = layers.astype(np.float64)
    if layer_norm:
        mean = x.mean(axis=(1, 2), keepdims=True)
        var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
        x = (x - mean) / np.sqrt(var + eps)
    return (gamma * np.tensordot(weights, x, axes=1)).astype(np.float32)


def sentences_of(lines: Sequence[str], where: str) -> list[list[str]]:
    out = []
    for i, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            raise DataError(f"{where}:{i}: empty line; every line must be a sentence of at least one word "
                            "(remove blank lines)")
        out.append(words)
    return out


def export_features(model: str, lines: Sequence[str], *, layers: str = "all", mix: str | None = None,
                    gamma: float | None = None, layer_norm: bool = False, batch_size: int = 32,
                    where: str = "input") -> list[np.ndarray]:
    """Per sentence: float32 [L, n_words, D] (the picked layers) or [n_words, D] (mixed)."""
    from ptm_jax.evaluate import features as feats

    params, cfg, tokenizer = feats.load_model(model)
    if not feats.supports_features(cfg):
        raise ConfigError(f"{model}: model.family={cfg.family!r} gives no word features (no word_features, "
                          "word_vectors or subword_vectors hook); --layers needs one")
    sentences = sentences_of(lines, where)
    picked = parse_layers(layers, feats.num_layers(cfg))  # before the work: a bad option fails at once
    weights, learned_gamma, norm, stats = (mix_weights(mix, len(picked)) if mix is not None
                                           else (None, None, "none", None))
    arrays = [a[picked] for a in feats.word_features(params, cfg, tokenizer, sentences, batch_size=batch_size)]
    if mix is None:
        return arrays
    if stats is not None:                      # the learned mix read standardised layers: standardise the same way
        if stats[0].shape != arrays[0][:, 0].shape:
            raise ConfigError(f"--mix {mix}: its feature statistics are {stats[0].shape} (layers x dimensions) but "
                              f"this model gives {arrays[0][:, 0].shape}; was the head trained on these features?")
        arrays = [((a - stats[0][:, None]) * stats[1][:, None]).astype(np.float32) for a in arrays]
    g = gamma if gamma is not None else (learned_gamma if learned_gamma is not None else 1.0)
    return [scalar_mix(a, weights, g, layer_norm or norm == "layer") for a in arrays]


def write(arrays: list[np.ndarray], lines: Sequence[str], out: str | None) -> str:
    """Writes the features (module doc); returns a one-line summary."""
    shape = "x".join(str(d) for d in arrays[0].shape[:-2]) if arrays and arrays[0].ndim == 3 else ""
    dim = arrays[0].shape[-1] if arrays else 0
    what = f"{len(arrays)} sentences, {shape + ' layers x ' if shape else ''}words x {dim}"
    if out is None or out.endswith(".jsonl"):
        text = "".join(json.dumps({"text": t, "words": t.split(),
                                   "features": np.round(a, 7).tolist()}) + "\n" for t, a in zip(lines, arrays))
        if out is None:
            sys.stdout.write(text)
        else:
            fs.write_text_atomic(out, text)
        return what
    suffix = Path(out).suffix
    if suffix == ".npz":
        import io

        buf = io.BytesIO()
        np.savez(buf, **{str(i): a for i, a in enumerate(arrays)})
        fs.write_bytes_atomic(out, buf.getvalue())
    elif suffix in (".hdf5", ".h5"):
        import h5py

        path = Path(out)
        tmp = path.with_name(f".{path.name}.tmp")
        with h5py.File(tmp, "w") as f:
            for i, a in enumerate(arrays):
                f.create_dataset(str(i), data=a)
            index = {t: i for i, t in enumerate(lines)}
            f.create_dataset("sentence_to_index", data=np.array([json.dumps(index)], dtype=h5py.string_dtype()))
        tmp.replace(path)
    else:
        raise ConfigError(f"--out {out}: use .npz, .hdf5/.h5 or .jsonl with --layers (or omit it for JSON lines "
                          "on stdout)")
    return what
