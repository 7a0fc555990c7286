"""Hugging Face interop of ERNIE 1.0 and ERNIE 2.0 through transformers' ``model_type = "ernie"`` (``ErnieModel``,
``ErnieForMaskedLM``, ``ErnieForPreTraining``, ``ErnieFor*Classification``: transformers models/ernie/
modeling_ernie.py).

transformers' ERNIE is BERT with optional task-type embeddings (``use_task_id``, ``task_type_vocab_size``): a
table ``embeddings.task_type_embeddings`` whose row of each token's ``task_type_ids`` (zeros when none are given)
is added to word + position + token-type before the embedding LayerNorm. Every other tensor is BERT's under the
prefix ``ernie.`` instead of ``bert.``. So the conversion is BERT's (``families/bert/hf.py``) with the names
mapped (our trunk <-> BERT's ``bert``, HF ``ernie.`` <-> ``bert.``, ``Ernie*`` <-> ``Bert*`` architectures),
plus, with ``use_task_id``, one more encoder rule: the task table <-> our ``embeddings/task_embeddings``.

* ``use_task_id = false`` <-> the ``ernie`` family (ERNIE 1.0, trunk ``ernie``).
* ``use_task_id = true`` <-> the ``ernie2`` family (ERNIE 2.0, ``continual_model.py``, trunk ``ernie2``;
  ``task_vocab_size`` = ``task_type_vocab_size``). The ``ernie`` family's converter, which claims
  ``model_type = "ernie"``, routes these folders here, so ``ptm import-hf`` and every command that reads a
  Hugging Face folder get an ``ernie2`` model. Its ``pretraining`` head exports as ``ErnieForMaskedLM``: the
  masked LM is BERT's tied head; the four other task heads (capitalisation, token-document relation, sentence
  reordering, sentence distance) have no place in a transformers class and are reported as left out. The task
  id of rows without one (``model.task_id``, used in finetuning) goes to config.json as ``ptm_task_id``; a
  transformers user passes it as ``task_type_ids`` (transformers' own default is 0). An ``ErnieForPreTraining``
  with task embeddings (BERT's next-sentence head) imports with ``--head masked_lm`` or ``--head encoder``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ptm_jax.errors import CheckpointError, ConfigError
from ptm_jax.export import params as params_lib
from ptm_jax.export.hf_files import HfExport, Rule, read_hf_dir, write_hf_dir
from ptm_jax.families.bert import hf as bert_hf
from ptm_jax.families.ernie.config import ErnieConfig
from ptm_jax.families.ernie.continual import Ernie2Config, check_task_id
from ptm_jax.families.ernie.continual_model import TASK_HEADS
from ptm_jax.families.ernie.continual_model import TRUNK as TRUNK_2
from ptm_jax.families.ernie.model import TRUNK

BERT_TRUNK = "bert"
TASK_TABLE = "embeddings.task_type_embeddings.weight"
MAX_TASK_TYPES = 4096


def _swap(tree: dict, old: str, new: str) -> dict:
    return {(new if k == old else k): v for k, v in tree.items()}


def _names(tensors: dict, old: str, new: str) -> dict:
    return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in tensors.items()}


def _task_rules(cfg: Ernie2Config):
    """``bert_hf.ExtraRules`` of the task table, on the BERT-named tree (trunk ``bert``)."""
    shape = (cfg.task_vocab_size, cfg.hidden_size)
    return lambda prefix: [Rule(prefix + TASK_TABLE, (BERT_TRUNK, "embeddings", "task_embeddings", "embedding"),
                                shape, shape)]


def _hf_int(hf: dict, key: str, default: int, low: int, high: int, where: Path) -> int:
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CheckpointError(f"{where}: {key}={value!r:.80} is not an integer in [{low}, {high}]; fix that key of "
                              "config.json or re-export the model folder")
    return value


def _ernie2_config(hf: dict, bert_cfg: Any, tensors: dict, where: Path) -> Ernie2Config:
    """The ``ernie2`` model section of a ``use_task_id`` folder; its task table must have
    ``task_type_vocab_size`` rows (transformers' default 3)."""
    rows = _hf_int(hf, "task_type_vocab_size", 3, 1, MAX_TASK_TYPES, where)
    for name in ("ernie." + TASK_TABLE, TASK_TABLE):
        shape = getattr(tensors.get(name), "shape", None)
        if shape is not None and (len(shape) != 2 or shape[0] != rows):
            raise CheckpointError(f"{where}: task_type_vocab_size={rows} disagrees with the weights: {name} has shape "
                                  f"{tuple(shape)} ({shape[0] if shape else 0} task rows); set task_type_vocab_size "
                                  "to the table's rows or re-export the model folder")
    task_id = _hf_int(hf, "ptm_task_id", 0, 0, rows - 1, where)
    return Ernie2Config(**{f.name: getattr(bert_cfg, f.name) for f in dataclasses.fields(ErnieConfig)
                           if f.name != "family"}, task_vocab_size=rows, task_id=task_id)


def load(path: str | Path, head: str | None = None) -> tuple[dict, Any, dict[str, Any], Path]:
    """A local HF ERNIE folder -> (params, model config, info, tokenizer folder): an ``ernie`` model (trunk
    "ernie", ErnieConfig), or with ``use_task_id`` an ``ernie2`` one (trunk "ernie2", Ernie2Config)."""
    root = Path(path)
    hf, tensors, d = read_hf_dir(root)
    where = d / "config.json"
    if isinstance(hf, dict) and hf.get("model_type") != "ernie":
        raise CheckpointError(f"{where}: model_type={hf.get('model_type')!r:.80}; the ERNIE importer reads "
                              "model_type 'ernie'")
    if isinstance(hf, dict) and not isinstance(hf.get("use_task_id", False), bool):
        raise CheckpointError(f"{where}: use_task_id={hf['use_task_id']!r:.80} is not true or false; fix config.json")
    continual = isinstance(hf, dict) and hf.get("use_task_id", False)
    as_bert = {**hf, "model_type": "bert",
               "architectures": [a.replace("Ernie", "Bert", 1) for a in hf.get("architectures") or []]}
    for key in ("use_task_id", "task_type_vocab_size", "ptm_task_id"):
        as_bert.pop(key, None)
    bert_cfg = bert_hf.model_config_from_hf(as_bert, where)
    as_bert_tensors = _names(tensors, "ernie.", "bert.")
    if continual:
        cfg, trunk = _ernie2_config(hf, bert_cfg, tensors, where), TRUNK_2
        if (head or bert_hf.detect_head(set(as_bert_tensors), as_bert)) == "pretraining":
            raise CheckpointError(f"{where}: an ErnieForPreTraining with use_task_id=true: its next-sentence head "
                                  "has no place in the ernie2 family (whose pretraining heads are ERNIE 2.0's "
                                  "tasks); import it with --head masked_lm or --head encoder")
        extra = _task_rules(cfg)
    else:
        cfg, trunk, extra = ErnieConfig(**{f.name: getattr(bert_cfg, f.name) for f in dataclasses.fields(ErnieConfig)
                                           if f.name != "family"}), TRUNK, None
    params, info = bert_hf.hf_to_params(as_bert_tensors, cfg, as_bert, d, head, extra)
    tok, tok_dir = bert_hf.tokenizer_source(d)
    info.update(source=str(root.resolve()), pad_token_id=int(hf.get("pad_token_id") or 0), tokenizer=tok)
    return _swap(params, BERT_TRUNK, trunk), cfg, info, tok_dir


def import_dir(path: str | Path, out: str | Path, head: str | None = None, overwrite: bool = False) -> Path:
    params, cfg, info, tok_dir = load(path, head)
    head = info.pop("head")
    return params_lib.save_params(out, params, cfg, head, info, [tok_dir / f for f in info["tokenizer"]["files"]],
                                  overwrite=overwrite)


def export_dir(src: str | Path, out_dir: str | Path, overwrite: bool = False) -> HfExport:
    """A params directory or training run of the ``ernie`` or ``ernie2`` family -> an HF ERNIE folder."""
    params, cfg, info, tok_dir = params_lib.load_params(src)
    head, tok = info["head"], info.get("tokenizer") or {}
    vocab = tok_dir / tok["files"][0] if tok_dir is not None and tok.get("files") else None
    if tok.get("kind", "wordpiece") != "wordpiece" or vocab is None or not vocab.is_file():
        raise CheckpointError(f"{src}: export to Hugging Face ERNIE needs a WordPiece vocab.txt; found "
                              f"tokenizer {tok or 'none'} in {tok_dir}")
    continual = isinstance(cfg, Ernie2Config)
    trunk, hf_head, extra, note = TRUNK, head, None, ""
    if continual:
        try:
            check_task_id(cfg)
        except ConfigError as e:
            raise CheckpointError(f"{src}: {e} (the exported config.json's ptm_task_id)") from None
        trunk, extra = TRUNK_2, _task_rules(cfg)
        hf_head = "masked_lm" if head == "pretraining" else head
        note = (f"task embeddings: use_task_id=true, task_type_vocab_size={cfg.task_vocab_size}; task id "
                f"{cfg.task_id} (model.task_id) for rows without one: pass task_type_ids={cfg.task_id} to transformers")
    tensors, left_out = bert_hf.params_to_hf(_swap(params, trunk, BERT_TRUNK), cfg, hf_head, extra)
    left_out = [p.replace(BERT_TRUNK + "/", trunk + "/", 1) for p in left_out]
    if continual and head == "pretraining":
        left_out += [k for k in TASK_HEADS if k in params]
    config = bert_hf.hf_config(cfg, hf_head, info)
    arch = bert_hf.ARCHITECTURES[hf_head].replace("Bert", "Ernie", 1)
    config.update(model_type="ernie", architectures=[arch], use_task_id=continual,
                  task_type_vocab_size=cfg.task_vocab_size if continual else 3)
    if continual:
        config["ptm_task_id"] = cfg.task_id
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(tok.get("lower_case", True)),
                        "strip_accents": None, "tokenize_chinese_chars": True,
                        "model_max_length": cfg.max_position_embeddings, **bert_hf.SPECIAL_TOKENS}
    out = write_hf_dir(out_dir, _names(tensors, "bert.", "ernie."), config, files={"vocab.txt": vocab},
                       json_files={"tokenizer_config.json": tokenizer_config,
                                   "special_tokens_map.json": bert_hf.SPECIAL_TOKENS}, overwrite=overwrite)
    return HfExport(out=str(out), head=head, architecture=arch, tensors=len(tensors), tokenizer=("vocab.txt",),
                    left_out=tuple(left_out), note=note)
