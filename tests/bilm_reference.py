"""The reference side of ELMo's biLM trajectory parity: AllenNLP 2.10's ELMo modules trained as allenai/bilm-tf
trains its biLM, on ptm's batches.

AllenNLP's ``_ElmoCharacterEncoder`` (char CNN, highway, projection) and the ``LstmCellWithProjection`` cells of
its ``ElmoLstm`` (LSTMP with cell and projection clip), each loading the same ``options.json`` + ``weights.hdf5``
with AllenNLP's own loaders (``requires_grad=True``), wired as bilm-tf's training graph (``bilm/model.py``,
``bilm/training.py``), which AllenNLP (an inference and finetuning library) does not build:

- the backward LM reads the reversed text (bilm-tf's ``BidirectionalLMDataset``): ptm's ``bwd_ids`` lanes, run
  through AllenNLP's backward cells (``go_forward=False``: they read a window from its end, so each window is
  flipped in and out);
- every cell's final (h, c) is the next batch's initial state (bilm-tf feeds ``final_state`` back), detached;
- a residual connection around every layer but the first (``ResidualWrapper``), dropout on each layer's input
  (``DropoutWrapper(input_keep_prob)``, which wraps the residual cell: the residual adds the dropped input) and on
  the top output;
- one softmax [V, P] shared by both directions, loss 0.5 * (forward CE + backward CE), the full softmax here (the
  sampled one draws random classes); the gradients are those of ``loss * unroll_steps`` (``training.py``);
- ``torch.optim.Adagrad`` with bilm-tf's ``initial_accumulator_value``, ``clip_grad_norm_`` over every parameter
  (bilm-tf ``clip_by_global_norm``).

:func:`write_bilm_tf` writes a ptm ELMo params tree in bilm-tf's layout (the inverse of ptm's
``families/elmo/weights.py`` import: TF gate blocks (i, j, f, o), the forget bias 1.0 taken out of ``bias``, the
softmax as ``softmax/W`` and ``softmax/b``), so that both sides start from ptm's initial parameters: ptm reads the
file back with its import, AllenNLP with its loaders."""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import reference_libs


def load_allennlp_elmo():
    """(AllenNLP 2.10's ``allennlp/modules/elmo.py``, its ``ELMoCharacterMapper``), importing only what its ELMo
    modules need: the package's __init__ (spacy, transformers pins) is skipped and its unrelated framework imports
    are stubbed; None when allennlp is not installed (``reference_libs``)."""
    if "allennlp.modules.elmo" not in sys.modules:
        if not reference_libs.use("allennlp"):
            return None
        spec = importlib.util.find_spec("allennlp")
        if spec is None or spec.submodule_search_locations is None:
            return None
        _stub_framework(spec.submodule_search_locations[0])
    return (importlib.import_module("allennlp.modules.elmo"),
            importlib.import_module("allennlp.data.token_indexers.elmo_indexer").ELMoCharacterMapper)


def _stub_framework(root: str) -> None:
    """Stand-ins for the AllenNLP framework modules that its ELMo modules import but do not use here."""

    def pkg(name, path=None, **attrs):
        m = types.ModuleType(name)
        m.__path__ = [path] if path else []
        m.__dict__.update(attrs)
        sys.modules[name] = m

    class Registrable:
        @classmethod
        def register(cls, *a, **k):
            return lambda x: x

    pkg("allennlp", root)
    pkg("allennlp.common", FromParams=Registrable, Registrable=Registrable)
    pkg("allennlp.common.checks", ConfigurationError=ValueError)
    pkg("allennlp.common.file_utils", cached_path=lambda p, *a, **k: p)
    pkg("allennlp.common.util", lazy_groups_of=None, int_to_device=lambda d: d, is_distributed=lambda: False,
        is_global_primary=lambda: True, pad_sequence_to_length=None)
    pkg("allennlp.modules", root + "/modules")
    pkg("allennlp.nn", root + "/nn")
    pkg("allennlp.data")
    for name in ("instance", "vocabulary", "batch", "fields", "tokenizers", "tokenizers.token_class"):
        pkg(f"allennlp.data.{name}", Instance=None, Vocabulary=None, Batch=None, TextField=None, Token=None)
    pkg("allennlp.data.token_indexers", root + "/data/token_indexers")
    pkg("allennlp.data.token_indexers.token_indexer", TokenIndexer=Registrable, IndexedTokenList=dict)


def _ours_to_tf_gates(x: np.ndarray, hidden: int) -> np.ndarray:
    i, f, g, o = (x[..., k * hidden:(k + 1) * hidden] for k in range(4))
    return np.concatenate([i, g, f, o], axis=-1)


def write_bilm_tf(params: dict, cfg: Any, directory: Path) -> tuple[Path, Path]:
    """ptm's ELMo params ``{'elmo': ..., 'softmax': ...}`` -> ``options.json`` + ``weights.hdf5`` in bilm-tf's
    layout (module doc)."""
    import h5py

    directory.mkdir(parents=True, exist_ok=True)
    enc, bilm, H = params["elmo"]["char_encoder"], params["elmo"]["bilm"], cfg.lstm_dim
    data = {"char_embed": enc["char_embed"][1:]}
    for i, _ in enumerate(cfg.filters):
        data[f"CNN/W_cnn_{i}"], data[f"CNN/b_cnn_{i}"] = enc[f"cnn_{i}_kernel"][None], enc[f"cnn_{i}_bias"]
    for k in range(cfg.n_highway):
        h = enc[f"highway_{k}"]
        data.update({f"CNN_high_{k}/W_carry": h["carry"]["kernel"], f"CNN_high_{k}/b_carry": h["carry"]["bias"],
                     f"CNN_high_{k}/W_transform": h["transform"]["kernel"],
                     f"CNN_high_{k}/b_transform": h["transform"]["bias"]})
    data["CNN_proj/W_proj"], data["CNN_proj/b_proj"] = enc["projection"]["kernel"], enc["projection"]["bias"]
    for d, name in enumerate(("forward", "backward")):
        for layer in range(cfg.n_layers):
            w = bilm[f"{name}_{layer}"]
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            bias = np.array(w["bias"], np.float32)
            bias[H:2 * H] -= 1.0                                    # TF's LSTMCell adds forget_bias 1.0 itself
            data[f"{cell}/W_0"] = np.concatenate([_ours_to_tf_gates(w["kernel"], H),
                                                  _ours_to_tf_gates(w["recurrent_kernel"], H)])
            data[f"{cell}/B"], data[f"{cell}/W_P_0"] = _ours_to_tf_gates(bias, H), w["projection"]
    data["softmax/W"], data["softmax/b"] = params["softmax"]["kernel"], params["softmax"]["bias"]
    weights = directory / "weights.hdf5"
    with h5py.File(weights, "w") as f:
        for name, value in data.items():
            f.create_dataset(name, data=np.asarray(value, np.float32))
    options = {"char_cnn": {"activation": cfg.activation, "embedding": {"dim": cfg.char_embed_dim},
                            "filters": [list(map(int, x)) for x in cfg.filters], "n_highway": cfg.n_highway,
                            "n_characters": 262, "max_characters_per_token": cfg.max_characters_per_token},
               "lstm": {"dim": cfg.lstm_dim, "projection_dim": cfg.projection_dim, "n_layers": cfg.n_layers,
                        "cell_clip": cfg.cell_clip, "proj_clip": cfg.proj_clip,
                        "use_skip_connections": cfg.use_skip_connections},
               "dropout": cfg.dropout, "n_tokens_vocab": cfg.vocab_size}
    path = directory / "options.json"
    path.write_text(json.dumps(options))
    return path, weights


def build(options: Path, weights: Path):
    """AllenNLP's ELMo modules on the files, trainable, and the shared softmax read from the same file."""
    import h5py
    import torch

    elmo = load_allennlp_elmo()[0]
    elmo_lstm = importlib.import_module("allennlp.modules.elmo_lstm")
    opts = json.loads(Path(options).read_text())["lstm"]
    model = torch.nn.Module()
    model.chars = elmo._ElmoCharacterEncoder(str(options), str(weights), requires_grad=True)
    model.lstm = elmo_lstm.ElmoLstm(input_size=opts["projection_dim"], hidden_size=opts["projection_dim"],
                                    cell_size=opts["dim"], num_layers=opts["n_layers"], requires_grad=True,
                                    memory_cell_clip_value=opts["cell_clip"],
                                    state_projection_clip_value=opts["proj_clip"])
    model.lstm.load_weights(str(weights))
    with h5py.File(weights, "r") as f:
        model.softmax_w = torch.nn.Parameter(torch.from_numpy(f["softmax/W"][...]))
        model.softmax_b = torch.nn.Parameter(torch.from_numpy(f["softmax/b"][...]))
    return model


def _run_direction(cells, x, state, dropout: float, training: bool, flip: bool):
    """One direction's layers over x [B, T, P] from ``state`` (a (h, c) per layer, or None) -> (top output,
    final states)."""
    import torch
    import torch.nn.functional as F

    lengths = [x.shape[1]] * x.shape[0]
    finals = []
    for i, cell in enumerate(cells):
        inp = F.dropout(x, dropout, training)
        init = None if state is None else (state[i][0][None], state[i][1][None])
        y, (h, c) = cell(inp.flip(1) if flip else inp, lengths, init)
        y = y.flip(1) if flip else y
        if i > 0:
            y = y + inp        # the cell inside DropoutWrapper is a ResidualWrapper: it adds what it was given
        finals.append((h[0].detach(), c[0].detach()))
        x = y
    return torch.nn.functional.dropout(x, dropout, training), finals


def train(model, batches: Sequence[dict[str, np.ndarray]], char_table: np.ndarray, tcfg: Any, model_cfg: Any
          ) -> np.ndarray:
    """Trains ``model`` on ptm's host batches (module doc); returns the per-position loss of each step."""
    import torch
    import torch.nn.functional as F

    assert tcfg.optimizer == "adagrad" and tcfg.lr_decay == "constant" and tcfg.warmup_steps == 0
    assert tcfg.weight_decay == 0
    # TensorFlow's ApplyAdagrad (bilm-tf): var -= lr * g / sqrt(accum), no epsilon
    opt = torch.optim.Adagrad(model.parameters(), lr=tcfg.learning_rate,
                              initial_accumulator_value=tcfg.adagrad_initial_accumulator, eps=0.0)
    table = torch.from_numpy(np.asarray(char_table, np.int64))
    cells = {"fwd": model.lstm.forward_layers, "bwd": model.lstm.backward_layers}
    state: dict[str, Any] = {"fwd": None, "bwd": None}
    model.train()
    losses = []
    for b in batches:
        loss = 0.0
        for d, ids, weights in (("fwd", b["fwd_ids"], b["target_weights"]), ("bwd", b["bwd_ids"], b["bwd_weights"])):
            ids = torch.from_numpy(ids.astype(np.int64))
            tokens = model.chars(table[ids[:, :-1]])["token_embedding"][:, 1:-1]    # AllenNLP adds <S>, </S>
            top, state[d] = _run_direction(cells[d], tokens, state[d], model_cfg.dropout, True, d == "bwd")
            logits = top @ model.softmax_w.T + model.softmax_b
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
            w = torch.from_numpy(weights.reshape(-1))
            loss = loss + 0.5 * (ce * w).sum() / w.sum().clamp(min=1.0)
        (loss * b["target_weights"].shape[1]).backward()
        if tcfg.clip_norm > 0:  # tf.clip_by_global_norm: g * clip / max(norm, clip) (torch's adds 1e-6 to norm)
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads)
            for g in grads:
                g.mul_(tcfg.clip_norm / torch.clamp(norm, min=tcfg.clip_norm))
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return np.array(losses)


def state_arrays(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
