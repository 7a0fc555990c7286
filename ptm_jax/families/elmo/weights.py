"""Import of bilm-tf / AllenNLP ELMo weights: ``options.json`` + ``weights.hdf5`` (allenai/bilm-tf
``bilm/model.py`` ``dump_weights`` and ``_pretrained_initializer``; AllenNLP ``allennlp/modules/elmo.py``
``_ElmoCharacterEncoder._load_*`` and ``elmo_lstm.py`` ``ElmoLstm.load_weights``).

``options.json``: ``{"char_cnn": {"embedding": {"dim"}, "filters", "n_highway", "activation",
"n_characters", "max_characters_per_token"}, "lstm": {"dim", "projection_dim", "n_layers", "cell_clip",
"proj_clip", "use_skip_connections"}}`` (plus training fields we ignore unless named below).

``weights.hdf5`` datasets and where each goes (``model.py``'s tree; H = lstm.dim, P = projection_dim):

======================================================  ===================================================
hdf5 dataset                                            params
======================================================  ===================================================
``char_embed`` [261, E]                                 ``char_encoder/char_embed`` [262, E], row 0 = zeros
``CNN/W_cnn_i`` [1, w, E, n], ``CNN/b_cnn_i`` [n]       ``char_encoder/cnn_i_kernel`` [w, E, n], ``_bias``
``CNN_high_k/W_carry|b_carry|W_transform|b_transform``  ``char_encoder/highway_k/carry|transform``
``CNN_proj/W_proj`` [F, P], ``CNN_proj/b_proj`` [P]     ``char_encoder/projection``
``RNN_d/RNN/MultiRNNCell/Celll/LSTMCell/W_0``           ``bilm/{forward,backward}_l`` (d = 0 forward, 1
[in + P, 4H], ``B`` [4H], ``W_P_0`` [H, P]               backward): ``W_0`` rows [:in] -> ``kernel``, [in:] ->
                                                        ``recurrent_kernel``; ``B`` -> ``bias``; ``W_P_0`` ->
                                                        ``projection``
``softmax/W`` [V, P], ``softmax/b`` [V] (if present)    ``softmax/kernel``, ``softmax/bias``
======================================================  ===================================================

TensorFlow's LSTMCell orders the gate blocks (i, j, f, o) and adds ``forget_bias`` = 1.0 to f inside the
cell; ``models/lstm.py`` orders them (i, f, g, o) with the forget bias in ``bias``, so the columns are
reordered and 1.0 added to f (what AllenNLP's loader does). A missing dataset, a shape that disagrees with
``options.json``, or an options file without a field is a CheckpointError / ConfigError naming the file and
the dataset or field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.families.elmo.config import ElmoConfig

DIRECTIONS = ("forward", "backward")


def config_from_options(options_file, vocab_size: int = 4) -> ElmoConfig:
    """``options.json`` -> ElmoConfig (ConfigError naming the file and the missing or bad field)."""
    path = Path(options_file)
    try:
        opts = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such options file (bilm-tf's options.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not JSON ({e}); expected bilm-tf's options.json") from None

    def get(*keys, default=None, required=True):
        node = opts
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                if required:
                    raise ConfigError(f"{path}: missing field {'.'.join(keys)}; a bilm-tf options.json has "
                                      "char_cnn.{embedding.dim, filters, n_highway, n_characters, "
                                      "max_characters_per_token} and lstm.{dim, projection_dim, n_layers}")
                return default
            node = node[k]
        return node

    if get("bidirectional", default=True, required=False) is False:
        raise ConfigError(f"{path}: bidirectional=false; ELMo's import needs the biLM (both directions)")
    n_chars = int(get("char_cnn", "n_characters"))
    if n_chars not in (261, 262):
        raise ConfigError(f"{path}: char_cnn.n_characters={n_chars}; bilm-tf's character ids need 261 (training) "
                          "or 262 (inference, id 0 the mask)")
    cfg = ElmoConfig(
        vocab_size=int(get("n_tokens_vocab", default=vocab_size, required=False)),
        max_characters_per_token=int(get("char_cnn", "max_characters_per_token")), n_characters=262,
        char_embed_dim=int(get("char_cnn", "embedding", "dim")),
        filters=[[int(w), int(n)] for w, n in get("char_cnn", "filters")],
        n_highway=int(get("char_cnn", "n_highway")), activation=str(get("char_cnn", "activation", default="relu",
                                                                          required=False)),
        projection_dim=int(get("lstm", "projection_dim")), lstm_dim=int(get("lstm", "dim")),
        n_layers=int(get("lstm", "n_layers")),
        cell_clip=get("lstm", "cell_clip", required=False), proj_clip=get("lstm", "proj_clip", required=False),
        use_skip_connections=bool(get("lstm", "use_skip_connections", default=False, required=False)),
        dropout=float(get("dropout", default=0.1, required=False)), num_sampled=0)
    cfg.validate(where=f"{path}")
    return cfg


def _tf_gates_to_ours(x: np.ndarray, hidden: int) -> np.ndarray:
    """Last axis in TF's blocks (i, j, f, o) -> ours (i, f, g=j, o)."""
    i, j, f, o = (x[..., k * hidden:(k + 1) * hidden] for k in range(4))
    return np.concatenate([i, f, j, o], axis=-1)


def read_weights(weights_file, cfg: ElmoConfig) -> dict:
    """``weights.hdf5`` -> the params tree ({'elmo': ..., 'softmax': ...} when the file has the softmax)."""
    import h5py

    path = Path(weights_file)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weights file (bilm-tf's weights.hdf5)")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise CheckpointError(f"{path}: not an HDF5 file ({e}); expected bilm-tf's weights.hdf5") from None
    with f:
        def take(name: str, shape: tuple[int, ...]) -> np.ndarray:
            if name not in f:
                raise CheckpointError(f"{path}: missing dataset {name!r} (expected shape {list(shape)} from the "
                                      "options file); is this a bilm-tf weights.hdf5 of the same model?")
            arr = np.asarray(f[name][...], np.float32)
            if arr.shape != tuple(shape):
                raise CheckpointError(f"{path}: dataset {name!r} has shape {list(arr.shape)} where the options "
                                      f"file implies {list(shape)}; options.json and weights.hdf5 disagree")
            return arr

        E, F, P, H = cfg.char_embed_dim, cfg.n_filters, cfg.projection_dim, cfg.lstm_dim
        enc: dict[str, Any] = {"char_embed": np.concatenate(
            [np.zeros((1, E), np.float32), take("char_embed", (cfg.n_characters - 1, E))])}
        for i, (w, n) in enumerate(cfg.filters):
            enc[f"cnn_{i}_kernel"] = take(f"CNN/W_cnn_{i}", (1, w, E, n))[0]
            enc[f"cnn_{i}_bias"] = take(f"CNN/b_cnn_{i}", (n,))
        for k in range(cfg.n_highway):
            g = f"CNN_high_{k}"
            enc[f"highway_{k}"] = {
                "carry": {"kernel": take(f"{g}/W_carry", (F, F)), "bias": take(f"{g}/b_carry", (F,))},
                "transform": {"kernel": take(f"{g}/W_transform", (F, F)), "bias": take(f"{g}/b_transform", (F,))}}
        enc["projection"] = {"kernel": take("CNN_proj/W_proj", (F, P)), "bias": take("CNN_proj/b_proj", (P,))}
        bilm = {}
        for d, name in enumerate(DIRECTIONS):
            for layer in range(cfg.n_layers):
                cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
                w0 = take(f"{cell}/W_0", (P + P, 4 * H))          # input (P) then recurrent (P) rows
                bias = take(f"{cell}/B", (4 * H,)).copy()
                bias[2 * H:3 * H] += 1.0                           # TF LSTMCell's forget_bias
                bilm[f"{name}_{layer}"] = {"kernel": _tf_gates_to_ours(w0[:P], H),
                                           "recurrent_kernel": _tf_gates_to_ours(w0[P:], H),
                                           "bias": _tf_gates_to_ours(bias, H),
                                           "projection": take(f"{cell}/W_P_0", (H, P))}
        tree: dict[str, Any] = {"elmo": {"char_encoder": enc, "bilm": bilm}}
        if "softmax/W" in f:
            W = np.asarray(f["softmax/W"][...], np.float32)
            tree["softmax"] = {"kernel": take("softmax/W", (W.shape[0], P)), "bias": take("softmax/b", (W.shape[0],))}
        return tree


def load_bilm(options_file, weights_file) -> tuple[dict, ElmoConfig]:
    """(params tree, ElmoConfig) of a bilm-tf / AllenNLP model. Without a softmax in the file, ``vocab_size``
    is the options' ``n_tokens_vocab`` (or 4) and the tree has no ``softmax``: features only."""
    cfg = config_from_options(options_file)
    tree = read_weights(weights_file, cfg)
    if "softmax" in tree:
        cfg.vocab_size = int(tree["softmax"]["kernel"].shape[0])
    return tree, cfg


def import_bilm(options_file, weights_file, out, *, overwrite: bool = False) -> Path:
    """Writes a params directory (``export/params.py``) of the imported model, head 'language_model': the
    character encoder and the biLSTMs, with a word vocabulary of the specials and bilm-tf's ``<S>``/``</S>``
    only (ELMo's features read each word's characters, not a word id). bilm-tf's softmax, when the file has one,
    is left out: its classes are the lines of bilm-tf's vocabulary file, which this import does not read.
    ``ptm import bilm-tf options.json weights.hdf5 --out DIR``."""
    import dataclasses
    import tempfile

    from ptm_jax.data.word_vocab import SPECIALS, VOCAB_FILE, write_vocab
    from ptm_jax.export.params import save_params

    tree, cfg = load_bilm(options_file, weights_file)
    tree.pop("softmax", None)
    words = [*SPECIALS, "<S>", "</S>"]
    cfg = dataclasses.replace(cfg, vocab_size=len(words))
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / VOCAB_FILE
        write_vocab([(w, 0) for w in words], vocab)
        return save_params(out, tree, cfg, "language_model",
                           extra={"source": {"options": str(options_file), "weights": str(weights_file)},
                                  "tokenizer": {"kind": "word", "lower_case": False}},
                           tokenizer_files=[vocab], overwrite=overwrite)
