"""Hugging Face interop of ERNIE 1.0 through transformers' ``model_type = "ernie"`` (``ErnieModel``,
``ErnieForMaskedLM``, ``ErnieForPreTraining``: transformers models/ernie/modeling_ernie.py).

transformers' ERNIE is BERT with optional task-type embeddings (``use_task_id``, an ERNIE 2.0/3.0 addition);
with them off, every tensor is BERT's under the prefix ``ernie.`` instead of ``bert.``. So the conversion is
BERT's (``families/bert/hf.py``) with the names mapped: our trunk ``ernie`` <-> BERT's ``bert``, HF ``ernie.``
<-> ``bert.``, ``Ernie*`` <-> ``Bert*`` architectures. A folder with ``use_task_id = true`` is refused.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ptm_jax.errors import CheckpointError
from ptm_jax.export import params as params_lib
from ptm_jax.export.hf_files import read_hf_dir, write_hf_dir
from ptm_jax.families.bert import hf as bert_hf
from ptm_jax.families.ernie.config import ErnieConfig
from ptm_jax.families.ernie.model import TRUNK

BERT_TRUNK = "bert"


def _swap(tree: dict, old: str, new: str) -> dict:
    return {(new if k == old else k): v for k, v in tree.items()}


def _names(tensors: dict, old: str, new: str) -> dict:
    return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in tensors.items()}


def load(path: str | Path, head: str | None = None) -> tuple[dict, ErnieConfig, dict[str, Any], Path]:
    """A local HF ERNIE folder -> (params with trunk "ernie", ErnieConfig, info, tokenizer folder)."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    where = d / "config.json"
    if isinstance(hf, dict) and hf.get("model_type") != "ernie":
        raise CheckpointError(f"{where}: model_type={hf.get('model_type')!r:.80}; the ERNIE importer reads "
                              "model_type 'ernie'")
    if isinstance(hf, dict) and hf.get("use_task_id"):
        raise CheckpointError(f"{where}: use_task_id=true (task-type embeddings, ERNIE 2.0/3.0) is not supported "
                              "by this ERNIE 1.0 family; pick a checkpoint without them")
    as_bert = {**hf, "model_type": "bert",
               "architectures": [a.replace("Ernie", "Bert", 1) for a in hf.get("architectures") or []]}
    for key in ("use_task_id", "task_type_vocab_size"):
        as_bert.pop(key, None)
    cfg = ErnieConfig(**{f.name: getattr(bert_hf.model_config_from_hf(as_bert, where), f.name)
                         for f in dataclasses.fields(ErnieConfig) if f.name != "family"})
    params, info = bert_hf.hf_to_params(_names(tensors, "ernie.", "bert."), cfg, as_bert, d, head)
    info.update(source=str(root.resolve()), pad_token_id=int(hf.get("pad_token_id") or 0),
                tokenizer=bert_hf.tokenizer_settings(d))
    return _swap(params, BERT_TRUNK, TRUNK), cfg, info, d


def import_dir(path: str | Path, out: str | Path, head: str | None = None, overwrite: bool = False) -> Path:
    params, cfg, info, tok_dir = load(path, head)
    head = info.pop("head")
    return params_lib.save_params(out, params, cfg, head, info, [tok_dir / f for f in info["tokenizer"]["files"]],
                                  overwrite=overwrite)


def export_dir(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """A params directory or training run of the ERNIE family -> an HF ERNIE folder."""
    params, cfg, info, tok_dir = params_lib.load_params(src)
    head, tok = info["head"], info.get("tokenizer") or {}
    vocab = tok_dir / tok["files"][0] if tok_dir is not None and tok.get("files") else None
    if tok.get("kind", "wordpiece") != "wordpiece" or vocab is None or not vocab.is_file():
        raise CheckpointError(f"{src}: export to Hugging Face ERNIE needs a WordPiece vocab.txt; found "
                              f"tokenizer {tok or 'none'} in {tok_dir}")
    tensors, left_out = bert_hf.params_to_hf(_swap(params, TRUNK, BERT_TRUNK), cfg, head)
    config = bert_hf.hf_config(cfg, head, info)
    arch = bert_hf.ARCHITECTURES[head].replace("Bert", "Ernie", 1)
    config.update(model_type="ernie", architectures=[arch], use_task_id=False, task_type_vocab_size=3)
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(tok.get("lower_case", True)),
                        "strip_accents": None, "tokenize_chinese_chars": True,
                        "model_max_length": cfg.max_position_embeddings, **bert_hf.SPECIAL_TOKENS}
    out = write_hf_dir(out_dir, _names(tensors, "bert.", "ernie."), config, files={"vocab.txt": vocab},
                       json_files={"tokenizer_config.json": tokenizer_config,
                                   "special_tokens_map.json": bert_hf.SPECIAL_TOKENS}, overwrite=overwrite)
    return {"out": str(out), "head": head, "architecture": arch, "tensors": len(tensors),
            "left_out": [p.replace(BERT_TRUNK + "/", TRUNK + "/", 1) for p in left_out]}
