"""The ptm_jax params directory: the one way later stages (finetune, eval, embed, predict) load weights.

A params directory holds ``params/`` (an orbax PyTree checkpoint of the plain parameter tree, numpy
leaves), ``ptm.json`` (model config, head, labels, tokenizer settings, source) and the tokenizer files
(``vocab.txt`` or ``spm.model``). It is written into a staging folder and renamed into place, so a crash
never leaves a half-written directory that loads.

``load_params`` also accepts a training run (its output dir, a stage dir or a ``checkpoints`` dir written
by ``ptm_jax.checkpoint.Checkpointer``: the latest step's ``state['params']`` is read alone, as numpy,
whatever mesh wrote it) and a Hugging Face folder (converted on the fly by the converter of the family that
claims its ``model_type``, ``Interop.hf``).

Tree convention: ``params[<trunk>]`` is always the family's trunk (``ParamLayout.trunk``), whatever the head;
heads sit beside it ('mlm', 'nsp', 'classifier', 'qa_outputs'). Apply a model with ``{'params': params}``.
"""
from __future__ import annotations

import io
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from ptm_jax import fs
from ptm_jax.config_loading import model_from_dict, to_dict
from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.export.staging import commit_dir, staging_dir

log = logging.getLogger(__name__)

FORMAT = "ptm_jax.params"
VERSION = 1


SPINE_HEADS = ("san_classification",)
"""Heads built on any family's encoder by the spine, not by a family: MT-DNN's SAN answer module
(``objectives/san_classification.py``). No Hugging Face architecture holds them."""


def heads() -> tuple[str, ...]:
    """Every head a params directory may name: the union of the registered families' ``ParamLayout.heads`` and
    ``SPINE_HEADS``."""
    from ptm_jax.families import registry

    return tuple(dict.fromkeys([*(h for fam in registry.families().values() for h in fam.layout.heads), *SPINE_HEADS]))


def trunks() -> dict[str, str]:
    """Trunk key -> the sub-tree holding its layer stack (layers_0..N-1, or layers/layer stacked), of every
    registered family (``ParamLayout.trunk``, ``ParamLayout.stack``)."""
    from ptm_jax.families import registry

    return {f.layout.trunk: f.layout.stack for f in registry.families().values() if f.layout.trunk}


# ----------------------------------------------------------------------------------------------------
# Tree helpers


def plain_tree(params: Any) -> dict:
    """Unboxed (no LogicallyPartitioned), without a top-level 'params' collection, numpy leaves on host."""
    import flax.linen as nn

    params = nn.meta.unbox(params)
    if isinstance(params, dict) and set(params) == {"params"}:
        params = params["params"]
    params = jax.tree.map(_on_host, params)
    if not isinstance(params, dict) or not any(t in params for t in trunks()):
        raise CheckpointError(f"a parameter tree must have its trunk under one of {', '.join(map(repr, trunks()))}"
                              " (a registered family's trunk key); got top-level keys "
                              f"{sorted(params) if isinstance(params, dict) else params}")
    return _to_dict(params)


def _on_host(x: Any) -> np.ndarray:
    """The whole value of a leaf as numpy. An array spread over several processes is gathered (a collective:
    every process must call this for it); a replicated one is read from this process's copy."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))




def _to_dict(tree: Any) -> Any:
    if isinstance(tree, dict) or hasattr(tree, "items"):
        return {str(k): _to_dict(v) for k, v in tree.items()}
    return tree


def _stack_of(params: dict) -> tuple[str, str]:
    table = trunks()
    trunk = next(t for t in table if t in params)
    if table[trunk] is None:
        raise CheckpointError(f"params[{trunk!r}] has no layer stack to convert between loop and scan layouts")
    return trunk, table[trunk]


def stack_layers(params: dict) -> dict:
    """Loop layout (<stack>/layers_0..N-1) -> scan layout (<stack>/layers/layer, leading layer axis)."""
    trunk, key = _stack_of(params)
    enc = params[trunk][key]
    if "layers" in enc:
        return params
    n = len([k for k in enc if k.startswith("layers_")])
    layers = [enc[f"layers_{i}"] for i in range(n)]
    stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *layers)
    rest = {k: v for k, v in enc.items() if not k.startswith("layers_")}
    return {**params, trunk: {**params[trunk], key: {**rest, "layers": {"layer": stacked}}}}


def unstack_layers(params: dict) -> dict:
    """Scan layout -> loop layout (views into the stacked arrays)."""
    trunk, key = _stack_of(params)
    enc = params[trunk][key]
    if "layers" not in enc:
        return params
    stacked = enc["layers"]["layer"]
    n = int(np.shape(jax.tree.leaves(stacked)[0])[0])
    layers = {f"layers_{i}": jax.tree.map(lambda x, i=i: np.asarray(x)[i], stacked) for i in range(n)}
    rest = {k: v for k, v in enc.items() if k != "layers"}
    return {**params, trunk: {**params[trunk], key: {**rest, **layers}}}


def to_layout(params: dict, scan: bool) -> dict:
    table = trunks()
    trunk = next((t for t in table if t in params), None)
    if trunk is not None and table[trunk] is None:  # a family without a layer stack (ParamLayout.stack None)
        return params
    return stack_layers(params) if scan else unstack_layers(params)


def flatten(params: dict) -> dict[str, np.ndarray]:
    """{'trunk': {'pooler': {'dense': {'kernel': x}}}} -> {'trunk/pooler/dense/kernel': x}."""
    out: dict[str, np.ndarray] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}/{k}" if prefix else k)
        else:
            out[prefix] = np.asarray(node)

    walk(params, "")
    return out


def unflatten(flat: dict[str, np.ndarray]) -> dict:
    out: dict = {}
    for name, x in flat.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = x
    return out


def infer_head(params: dict, hint: str | None = None) -> str:
    """Head of a parameter tree; ``hint`` (a checkpoint's meta['head']) wins when given. Otherwise the family
    whose trunk the tree holds says (``ParamLayout.infer_head``)."""
    from ptm_jax.families import registry

    if hint:
        if hint not in heads():
            raise CheckpointError(f"unknown head {hint!r}; expected one of {', '.join(heads())}")
        return hint
    fam = registry.family_of_params(params)
    if fam is None or fam.layout.infer_head is None:
        return "encoder"
    return fam.layout.infer_head(params)


# ----------------------------------------------------------------------------------------------------
# Atomic directory writes
#
# Multi-process runs: a folder that orbax writes (save_params) is staged and committed by every process
# (``shared=True``, in the same order on all; orbax's save synchronises them and only process 0 writes numpy
# leaves). The staging folder's name is the same on every process; process 0 alone creates, renames and
# removes folders, and a barrier (ptm_jax.parallel.distributed) after each step keeps the others from going
# on before it is done. Folders of plain files (Hugging Face exports) are written by one process alone.


# ----------------------------------------------------------------------------------------------------
# Save / load


def save_params(directory: str | Path, params: Any, model_cfg: Any, head: str,
                extra: dict[str, Any] | None = None, tokenizer_files: Sequence[str | Path] = (), *,
                overwrite: bool = False) -> Path:
    """Writes a params directory; the tree is stored in the layout ``model_cfg.scan_layers`` names.
    In a multi-process run every process calls it with the same arguments (see "Atomic directory writes")."""
    import orbax.checkpoint as ocp

    if head not in heads():
        raise ConfigError(f"head={head!r} is not one of {', '.join(heads())}")
    out = fs.path(directory)
    tree = to_layout(plain_tree(params), getattr(model_cfg, "scan_layers", False))
    extra = dict(extra or {})
    files = [fs.path(f) for f in tokenizer_files]
    for f in files:
        if not f.is_file():
            raise ConfigError(f"tokenizer file {f} does not exist")
    if files and "tokenizer" not in extra:
        kind = {".txt": "wordpiece", ".json": "byte_bpe"}.get(files[0].suffix, "sentencepiece")
        extra["tokenizer"] = {"kind": kind, "lower_case": True, "files": [f.name for f in files]}
    elif files:
        extra["tokenizer"] = {**extra["tokenizer"], "files": [f.name for f in files]}
    stage = staging_dir(out, overwrite, shared=True)
    try:
        ckptr = ocp.PyTreeCheckpointer()
        ckptr.save(fs.absolute(stage / "params"), tree)  # every process: orbax synchronises them
        if jax.process_index() == 0:  # files that one process writes
            for f in files:
                fs.write_bytes_atomic(stage / f.name, fs.read_bytes(f))
            meta = {"format": FORMAT, "version": VERSION, "head": head, "model": to_dict(model_cfg), **extra}
            (stage / "ptm.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
        commit_dir(stage, out, shared=True)
    except BaseException:
        if jax.process_index() == 0 and not fs.is_remote(stage):
            shutil.rmtree(stage, ignore_errors=True)
        raise
    return out


def _no_step_metadata_warning(record: logging.LogRecord) -> bool:
    """A CheckpointManager item has no per-item _CHECKPOINT_METADATA; orbax warns about it on every read."""
    return not str(record.msg).startswith("Metadata file does not exist")


def _restore_numpy(path: Path, subtree: str | None = None) -> Any:
    """Reads an orbax PyTree checkpoint (or one top-level entry of it) into numpy arrays on this host."""
    import orbax.checkpoint as ocp

    absl_log = logging.getLogger("absl")
    absl_log.addFilter(_no_step_metadata_warning)
    try:
        return _restore(ocp, path, subtree)
    finally:
        absl_log.removeFilter(_no_step_metadata_warning)


def _restore(ocp: Any, path: Path, subtree: str | None) -> Any:
    # numpy leaves are read by each process on its own: no barrier with the others, so a load works on any
    # subset of processes (``ptm export --format hf`` on process 0 of a multi-process run)
    me = jax.process_index()
    local = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
    ckptr = ocp.Checkpointer(ocp.PyTreeCheckpointHandler(multiprocessing_options=local),
                             multiprocessing_options=local)
    try:
        tree = ckptr.metadata(fs.absolute(path)).item_metadata
    except (FileNotFoundError, ValueError, OSError) as e:
        raise CheckpointError(f"{path}: not a readable orbax checkpoint ({e})") from None
    if subtree is not None:
        if subtree not in tree:
            raise CheckpointError(f"{path}: has no '{subtree}' entry (entries: {', '.join(map(str, tree))})")
        tree = {subtree: tree[subtree]}
    restore_args = jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray), _to_dict(tree))
    item = jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), _to_dict(tree))
    out = ckptr.restore(fs.absolute(path), args=ocp.args.PyTreeRestore(
        item=item, restore_args=restore_args, partial_restore=subtree is not None))
    out = _to_dict(out)
    return out[subtree] if subtree is not None else out


def _is_checkpoints_dir(p: Path) -> bool:
    return p.is_dir() and any(c.name.isdigit() and (c / "state").is_dir() for c in p.iterdir())


def find_checkpoints(path: Path) -> Path | None:
    """A ``checkpoints`` folder at ``path``, under it, or under exactly one stage folder of a run."""
    if _is_checkpoints_dir(path):
        return path
    if _is_checkpoints_dir(path / "checkpoints"):
        return path / "checkpoints"
    found = [c for c in sorted(path.glob("*/checkpoints")) if _is_checkpoints_dir(c)]
    if len(found) > 1:
        raise CheckpointError(f"{path}: holds several training stages ({', '.join(str(c.parent) for c in found)}); "
                              "pass the stage folder you want")
    return found[0] if found else None


def _run_tokenizer(out_dir: Path, run_cfg: dict[str, Any]) -> tuple[dict[str, Any], Path | None]:
    tc = run_cfg.get("tokenizer", {})
    kind = tc.get("kind", "wordpiece")
    family = kind if kind in ("wordpiece", "byte_bpe", "word", "char") else "sentencepiece"
    info = {"kind": family, "lower_case": tc.get("lower_case", True)}
    if tc.get("vocab_file"):
        f = fs.path(tc["vocab_file"]) if fs.is_remote(tc["vocab_file"]) else Path(tc["vocab_file"])
        f = f / "vocab.json" if kind == "byte_bpe" and f.is_dir() else f
        if f.is_file():
            files = [f.name] + (["merges.txt"] if kind == "byte_bpe" else [])
            return {**info, "files": files}, (fs.local_copy(f.parent, marker=None, only=files)
                                              if fs.is_remote(f) else f.parent)
    names = {"wordpiece": ["vocab.txt"], "byte_bpe": ["vocab.json", "merges.txt"],
             "word": ["vocab.tsv"], "char": ["chars.json"]}.get(kind, ["spm.model"])
    if (out_dir / "tokenizer" / names[0]).is_file():
        tok_dir = out_dir / "tokenizer"
        return {**info, "files": names}, fs.local_copy(tok_dir) if fs.is_remote(tok_dir) else tok_dir
    log.warning("%s: the run's tokenizer (%s) was not found", out_dir, tc.get("vocab_file") or out_dir / "tokenizer")
    return info, None


def _load_run(ckpt_dir: Path) -> tuple[dict, Any, dict[str, Any], Path | None]:
    from ptm_jax.checkpoint import Checkpointer

    mngr = Checkpointer(ckpt_dir, async_save=False, local=True)  # reads on this process alone
    try:
        step = mngr.latest_step()
        if step is None:
            raise CheckpointError(f"{ckpt_dir}: no complete checkpoint")
        meta = mngr.restore_meta(step)
    finally:
        mngr.close()
    out_dir = ckpt_dir.parent.parent
    run_cfg = meta.get("config")
    if run_cfg is None and (out_dir / "config.json").is_file():
        run_cfg = json.loads((out_dir / "config.json").read_text())
    if not run_cfg or "model" not in run_cfg:
        raise CheckpointError(f"{ckpt_dir}/{step}: the checkpoint's meta has no 'config' and there is no "
                              f"{out_dir / 'config.json'}; cannot tell the model's shape")
    try:
        cfg = model_from_dict(run_cfg["model"])
    except ConfigError as e:
        raise CheckpointError(f"{ckpt_dir}/{step}: its model config does not load: {e}") from None
    params = plain_tree(_restore_numpy(ckpt_dir / str(step) / "state", "params"))
    head = infer_head(params, meta.get("head"))
    tok_info, tok_dir = _run_tokenizer(out_dir, run_cfg)
    info: dict[str, Any] = {"head": head, "source": str(ckpt_dir / str(step)), "step": int(step),
                            "tokenizer": tok_info, "objective": run_cfg.get("objective")}
    for key in ("num_labels", "label_names", "task"):
        if key in meta:
            info[key] = meta[key]
    if "classifier" in params and "num_labels" not in info:
        info["num_labels"] = int(np.shape(params["classifier"]["dense"]["kernel"])[-1])
    return to_layout(params, getattr(cfg, "scan_layers", False)), cfg, info, tok_dir


def load_params(path: str | Path) -> tuple[dict, Any, dict[str, Any], Path | None]:
    """(params with numpy leaves, model config, info, tokenizer folder) from a params directory, a training
    run (output dir, stage dir or checkpoints dir), a Hugging Face BERT folder or a params .npz (no tokenizer). ``info`` has at least
    'head' and 'tokenizer' ({'kind', 'lower_case', 'files'}); classifiers add 'num_labels' (and
    'label_names' when known). The tree's layout matches ``model_cfg.scan_layers``."""
    p = fs.path(path) if fs.is_remote(path) else Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: does not exist; pass a params directory, a run directory or a Hugging "
                              "Face model folder")
    if (p / "ptm.json").is_file():
        if fs.is_remote(p) and not fs.is_complete(p):
            raise CheckpointError(f"{p}: has no {fs.MARKER} marker: it was not completely written (the writer "
                                  "stopped mid-way); write it again")
        try:
            meta = json.loads((p / "ptm.json").read_text())
        except ValueError as e:
            raise CheckpointError(f"{p / 'ptm.json'}: not valid JSON ({e})") from None
        if meta.get("format") != FORMAT or int(meta.get("version", 0)) > VERSION:
            raise CheckpointError(f"{p / 'ptm.json'}: not a {FORMAT} v{VERSION} params directory")
        try:
            cfg = model_from_dict(meta.pop("model"))
        except ConfigError as e:
            raise CheckpointError(f"{p / 'ptm.json'}: {e}") from None
        params = to_layout(plain_tree(_restore_numpy(p / "params")), getattr(cfg, "scan_layers", False))
        files = list((meta.get("tokenizer") or {}).get("files") or [])
        if fs.is_remote(p):  # tokenizers read local files: a local copy of those files alone (no weights)
            return params, cfg, meta, fs.local_copy(p, only=files) if files else None
        return params, cfg, meta, p
    if p.is_file() and p.suffix == ".npz":
        params, cfg, meta = load_npz(p)
        return to_layout(params, getattr(cfg, "scan_layers", False)), cfg, meta, None
    ckpt = find_checkpoints(p)
    if ckpt is not None:
        return _load_run(ckpt)
    if (p / "config.json").is_file() or (p / "modules.json").is_file():
        if fs.is_remote(p):  # the HF readers (safetensors, tokenizers) read local files
            p = fs.local_copy(p)
        from ptm_jax.families import registry

        return registry.hf_family(hf_model_type(p)).interop.hf.load(p)
    raise CheckpointError(f"{p}: is neither a params directory (ptm.json), a training run (checkpoints/) nor a "
                          "Hugging Face model folder (config.json)")


def hf_model_type(path: str | Path) -> str:
    """``model_type`` of a Hugging Face folder's config.json ('' when it names none: the sentence-transformers
    layout and older configs); ``registry.hf_family`` picks the family that imports it."""
    from ptm_jax.export.hf_files import model_directory

    cfg_file = model_directory(Path(path)) / "config.json"
    try:
        model_type = json.loads(cfg_file.read_text(encoding="utf-8")).get("model_type", "")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{cfg_file}: cannot read the model type ({e}); expected a Hugging Face "
                              "config.json object") from None
    return str(model_type)


def load_tokenizer(info: dict[str, Any], tokenizer_dir: Path | None):
    """The tokenizer named by ``info['tokenizer']`` from ``tokenizer_dir``."""
    from ptm_jax.data.tokenizers import SentencePieceTokenizer, WordPieceTokenizer

    tok = info.get("tokenizer") or {}
    if tokenizer_dir is None or not tok.get("files"):
        raise CheckpointError(f"{info.get('source', 'this model')}: has no tokenizer files; it cannot encode text")
    f = tokenizer_dir / tok["files"][0]
    if tok.get("kind") == "byte_bpe":
        from ptm_jax.data.byte_bpe import ByteBPETokenizer

        names = list(tok["files"])  # vocab.json and merges.txt, in either order
        vocab = next((n for n in names if n.endswith(".json")), names[0])
        merges = next((n for n in names if n != vocab), "merges.txt")
        return ByteBPETokenizer(tokenizer_dir / vocab, tokenizer_dir / merges)
    if tok.get("kind") == "word":  # a word vocabulary with counts (data/word_vocab.py)
        from ptm_jax.data.word_vocab import WordVocab

        return WordVocab(f, lower_case=bool(tok.get("lower_case", False)))
    if tok.get("kind") == "char":  # a character vocabulary (data/char_vocab.py)
        from ptm_jax.data.char_vocab import CharVocab

        return CharVocab(f, lower_case=bool(tok.get("lower_case", False)))
    if tok.get("kind", "wordpiece") == "wordpiece":
        return WordPieceTokenizer(f, lower_case=bool(tok.get("lower_case", True)))
    return SentencePieceTokenizer(f)


def save_npz(path: str | Path, params: Any, model_cfg: Any, head: str,
             extra: dict[str, Any] | None = None) -> Path:
    """Params only, as one .npz of flat 'a/b/c' -> array, plus the ptm.json text under the key 'ptm.json'."""
    out = fs.path(path)
    flat = flatten(to_layout(plain_tree(params), getattr(model_cfg, "scan_layers", False)))
    meta = {"format": FORMAT, "version": VERSION, "head": head, "model": to_dict(model_cfg), **(extra or {})}
    buf = io.BytesIO()
    np.savez(buf, **flat, **{"ptm.json": np.array(json.dumps(meta, default=str))})
    fs.write_bytes_atomic(out, buf.getvalue())
    return out


def load_npz(path: str | Path) -> tuple[dict, Any, dict[str, Any]]:
    with np.load(io.BytesIO(fs.read_bytes(path)), allow_pickle=False) as z:
        meta = json.loads(str(z["ptm.json"]))
        flat = {k: z[k] for k in z.files if k != "ptm.json"}
    cfg = model_from_dict(meta.pop("model"))
    return unflatten(flat), cfg, meta
