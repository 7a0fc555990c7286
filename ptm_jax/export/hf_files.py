"""Reading and writing Hugging Face model folders, and the tensor-rename rules the converters share.

Used by every family's converter (``families/*/hf.py``): config.json and other JSON files (every failure a
``CheckpointError`` naming the file and line), weights from ``model.safetensors`` (also sharded, with its
index) or ``pytorch_model.bin`` read with ``torch.load(weights_only=True)``, the sentence-transformers layout
(modules.json), ``id2label``, and ``Rule``: one tensor's name on each side and the reshape between them
(``apply_rules`` one way, ``rules_to_hf`` the other). ``write_hf_dir`` writes a folder whole or not at all.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import CheckpointError
from ptm_jax.export.staging import commit_dir, staging_dir

ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


@dataclass(frozen=True)
class HfExport:
    """What every family's Hugging Face exporter returns (``HfConverter.export_dir``), one shape for all: the
    folder, our head, the transformers class, the number of tensors written, the tokenizer files copied (none:
    weights only), the parameter paths the class has no place for, and a note for the user (or '')."""

    out: str
    head: str
    architecture: str
    tensors: int
    tokenizer: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    note: str = ""

    def summary(self, src: str) -> str:
        """The line(s) ``ptm export --format hf`` prints."""
        parts = [self.architecture, f"{self.tensors} tensors",
                 f"tokenizer {', '.join(self.tokenizer)}" if self.tokenizer else "no tokenizer (ids only)"]
        if self.left_out:
            parts.append(f"left out {', '.join(self.left_out)}")
        return f"exported {src} -> {self.out} ({'; '.join(parts)})" + (f"\n{self.note}" if self.note else "")

@dataclass(frozen=True)
class Rule:
    """One tensor: its HF name and shape, its path and shape in our tree. ``in_axes`` = k means our leading
    k axes are torch's input axis, i.e. HF [out, in] = ours.reshape(prod(shape[:k]), -1).T; None: a reshape."""

    hf: str
    path: tuple[str, ...]
    shape: tuple[int, ...]
    hf_shape: tuple[int, ...]
    in_axes: int | None = None

    def to_ours(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.T if self.in_axes else x).reshape(self.shape)

    def to_hf(self, x: np.ndarray) -> np.ndarray:
        if self.in_axes:
            x = x.reshape(int(np.prod(self.shape[: self.in_axes])), -1).T
        return np.ascontiguousarray(x).reshape(self.hf_shape)


def linear_rule(hf: str, path: tuple[str, ...], shape: tuple[int, ...], in_axes: int) -> Rule:
    n_in = int(np.prod(shape[:in_axes]))
    return Rule(hf, path, shape, (int(np.prod(shape)) // n_in, n_in), in_axes)


def dense_rules(hf: str, path: tuple[str, ...], n_in: int, n_out: int) -> list[Rule]:
    return [linear_rule(f"{hf}.weight", path + ("dense", "kernel"), (n_in, n_out), 1),
            Rule(f"{hf}.bias", path + ("dense", "bias"), (n_out,), (n_out,))]


def norm_rules(hf: str, path: tuple[str, ...], h: int) -> list[Rule]:
    return [Rule(f"{hf}.weight", path + ("norm", "scale"), (h,), (h,)),
            Rule(f"{hf}.bias", path + ("norm", "bias"), (h,), (h,))]


def fmt_names(names, limit: int = 12) -> str:
    names = sorted(names)
    more = f" ... and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def get_path(tree: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree



def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e}); re-download or re-export the "
                              "model folder") from None
    except (TypeError, AttributeError):  # bfloat16 / float8 have no numpy dtype: read through JAX, widen to float32
        from safetensors.flax import load_file

        try:
            tensors = load_file(str(path))
        except Exception as e:  # noqa: BLE001 - any failure here is an unusable file
            raise CheckpointError(f"{path}: holds tensors of a dtype this reader cannot convert ({type(e).__name__}: "
                                  f"{str(e)[:80]}); save the checkpoint in float32, float16 or bfloat16") from None
        return {k: np.asarray(v.astype("float32") if v.dtype.name == "bfloat16" or v.dtype.name.startswith("float8")
                              else v) for k, v in tensors.items()}


def read_torch_bin(path: Path) -> dict[str, np.ndarray]:
    """``torch.load(weights_only=True)``: tensors and plain containers only, never arbitrary objects."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path}: reading pytorch_model.bin needs torch; install it or convert the "
                              "checkpoint to model.safetensors") from None
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError, EOFError ...
        raise CheckpointError(f"{path}: refused: not a weights-only PyTorch checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}). Only tensors are loaded from .bin "
                              "files; convert it to safetensors") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not a name -> tensor mapping")
    out = {}
    for k, v in state.items():
        if not isinstance(v, torch.Tensor):
            raise CheckpointError(f"{path}: entry {k!r} is a {type(v).__name__}, not a tensor")
        try:
            out[k] = v.detach().float().numpy() if v.is_floating_point() else v.numpy()
        except (RuntimeError, TypeError) as e:  # sparse, quantized or meta tensors have no plain numpy form
            raise CheckpointError(f"{path}: tensor {k!r} cannot be read as an array ({str(e)[:80]}); save the "
                                  "checkpoint with dense float tensors (or as safetensors)") from None
    return out


def read_json(path: Path, kind: type = dict) -> Any:
    """A JSON file of a model folder, which must hold a ``kind``; any failure is a CheckpointError naming the
    file (and the 1-based line where there is one)."""
    fix = "fix the file or re-download the model folder"
    try:
        data = path.read_bytes()
        value = json.loads(data.decode("utf-8").removeprefix("\ufeff"))
    except OSError as e:
        raise CheckpointError(f"{path}: unreadable ({e.strerror or e}); {fix}") from None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise CheckpointError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); JSON "
                              f"files are UTF-8: {fix}") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); {fix}") from None
    except (ValueError, RecursionError) as e:  # a >4300-digit integer, nesting deeper than the stack
        raise CheckpointError(f"{path}: not usable JSON ({type(e).__name__}: {str(e)[:80]}); {fix}") from None
    if not isinstance(value, kind):
        raise CheckpointError(f"{path}: holds a JSON {type(value).__name__}, expected "
                              f"{'an object' if kind is dict else 'a list'}; {fix}")
    return value


def weight_files(d: Path) -> list[Path]:
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (d / single).is_file():
            return [d / single]
        if (d / index).is_file():
            shards = read_json(d / index).get("weight_map")
            if not isinstance(shards, dict) or not all(isinstance(x, str) and x not in ("", ".", "..")
                                                       and Path(x).name == x for x in shards.values()):
                raise CheckpointError(f"{d / index}: not a valid shard index: 'weight_map' must map tensor names "
                                      "to file names in this folder; fix the file or re-download the model")
            return [d / x for x in sorted(set(shards.values()))]
    raise CheckpointError(f"{d}: no model.safetensors or pytorch_model.bin (nor a sharded index); "
                          "is this a Hugging Face model directory?")


def st_modules(path: Path) -> list[tuple[str, str]] | None:
    """(type, sub-folder) of each module a sentence-transformers modules.json lists; None without one."""
    f = path / "modules.json"
    if not f.is_file():
        return None
    out = []
    for i, m in enumerate(read_json(f, list)):
        kind, sub = (m.get("type", ""), m.get("path", "")) if isinstance(m, dict) else (None, None)
        if not isinstance(kind, str) or not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
            raise CheckpointError(f"{f}: module {i} is not an object whose 'type' is a string and 'path' a "
                                  f"sub-folder of {path}; fix or delete modules.json")
        out.append((kind, sub))
    return out


def model_directory(path: Path) -> Path:
    """The folder holding config.json: ``path`` itself, or the Transformer module of a sentence-transformers
    layout (modules.json naming a sub-folder)."""
    if (path / "config.json").is_file():
        return path
    for kind, sub in st_modules(path) or []:
        if kind.endswith("Transformer") and (path / sub / "config.json").is_file():
            return path / sub
    raise CheckpointError(f"{path}: no config.json (nor a sentence-transformers modules.json pointing to one)")


def read_hf_dir(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray], Path]:
    """(config.json dict, name -> numpy tensor, the folder they came from)."""
    d = model_directory(Path(path))
    hf = read_json(d / "config.json")
    tensors: dict[str, np.ndarray] = {}
    for f in weight_files(d):
        tensors.update(read_safetensors(f) if f.suffix == ".safetensors" else read_torch_bin(f))
    return hf, tensors, d


def rule_problems(rules: list[Rule], tensors: dict[str, np.ndarray], expected: set[str], unexpected: set[str]
                  ) -> list[str]:
    """What keeps a checkpoint from matching ``rules``: missing and unexpected tensors, shape mismatches."""
    names = set(tensors)
    bad = [f"{r.hf} (checkpoint {tuple(tensors[r.hf].shape)}, expected {r.hf_shape})"
           for r in rules if r.hf in names and tuple(tensors[r.hf].shape) != r.hf_shape]
    return [f"{what}: {fmt_names(items)}" for what, items in (("missing tensors", expected - names),
            ("unexpected tensors", unexpected), ("shape mismatches", bad)) if items]


def apply_rules(rules: list[Rule], tensors: dict[str, np.ndarray]) -> dict:
    """Our nested parameter tree from the checkpoint's tensors, one rule per tensor (float32)."""
    params: dict = {}
    for r in rules:
        node = params
        for key in r.path[:-1]:
            node = node.setdefault(key, {})
        node[r.path[-1]] = r.to_ours(np.asarray(tensors[r.hf], dtype=np.float32))
    return params


def rules_to_hf(params: dict, rules: list[Rule], head: str) -> dict[str, np.ndarray]:
    """Our parameter tree (loop layout) -> HF name -> contiguous float32 array, one rule per tensor; a missing
    or mis-shaped parameter is a CheckpointError naming its path (the inverse of ``apply_rules``)."""
    out = {}
    for r in rules:
        try:
            x = get_path(params, r.path)
        except KeyError:
            raise CheckpointError(f"the {head} parameters lack {'/'.join(r.path)} (needed for {r.hf})") from None
        if tuple(np.shape(x)) != r.shape:
            raise CheckpointError(f"{'/'.join(r.path)} has shape {tuple(np.shape(x))}; the model config implies "
                                  f"{r.shape}")
        out[r.hf] = r.to_hf(np.asarray(x, dtype=np.float32))
    return out


def label_names(hf: dict[str, Any], num_labels: int) -> list[str] | None:
    """The class names of config.json's ``id2label``; None when they are transformers' defaults (LABEL_i)."""
    raw = hf.get("id2label")
    id2label = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    labels = [id2label.get(str(i), f"LABEL_{i}") for i in range(num_labels)]
    return None if labels == [f"LABEL_{i}" for i in range(num_labels)] else labels


def write_hf_dir(out: str | Path, tensors: dict[str, np.ndarray], config: dict[str, Any], *,
                 files: dict[str, Path] | None = None, json_files: dict[str, Any] | None = None,
                 overwrite: bool = False) -> Path:
    """An HF model folder: ``model.safetensors``, ``config.json``, ``files`` (name in the folder -> file to
    copy: the tokenizer's) and ``json_files`` (name -> JSON value: tokenizer settings). Written into a staging
    folder and renamed into place (``export/staging.py``), so ``out`` is whole or absent."""
    from safetensors.numpy import save_file

    out = Path(out)
    stage = staging_dir(out, overwrite)
    try:
        save_file(tensors, str(stage / "model.safetensors"), metadata={"format": "pt"})
        (stage / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, src in (files or {}).items():
            shutil.copyfile(src, stage / name)
        for name, value in (json_files or {}).items():
            (stage / name).write_text(json.dumps(value, indent=2) + "\n")
        commit_dir(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return out
