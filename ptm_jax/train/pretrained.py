"""What a finetuning stage starts from: the pretrained weights, their model config and tokenizer
(:func:`load_pretrained`), and the merge of a fresh task model with them (:func:`merge_encoder`).

One loader for a run, a params directory or a Hugging Face folder (``export/params.load_params``); the
architecture comes from the checkpoint, the compute settings (dtype, attention, remat and a family's
``run_settings``) from this run's config, and the family's ``prepare_finetune`` (e.g. GPT's vocabulary grown by
the task tokens) is applied here, so every job sees the same model config.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import load_params, load_tokenizer
from ptm_jax.jobs import registry as job_registry


@dataclasses.dataclass
class Pretrained:
    """The pretrained side of a finetuning stage."""

    params: dict | None
    """The pretrained weights; None with ``finetune.from_scratch`` (the network alone, randomly initialised)."""
    model_cfg: Any
    info: dict
    """The checkpoint's ptm.json."""
    tok_dir: Path | None
    tokenizer: Any
    init: str
    """Where the weights came from (``finetune.init``, or this run's ``pretrain``); with ``finetune.from_scratch``
    where the network (architecture and tokenizer) came from."""

    @property
    def tok_info(self) -> dict:
        return dict(self.info.get("tokenizer") or {})

    @property
    def tok_files(self) -> list[Path]:
        return [self.tok_dir / name for name in self.tok_info.get("files", [])] if self.tok_dir else []


def load_pretrained(cfg: Any) -> Pretrained:
    """``finetune.init`` (empty: ``<output_dir>/pretrain``) loaded with this run's compute settings, checked
    against ``finetune.job`` (a job its family cannot run) and ``finetune.max_seq_length``, and prepared by the
    family for finetuning. ``finetune.from_scratch``: the weights are dropped (``params`` None), so the stage
    trains the same network and tokenizer from its random initialisation."""
    from ptm_jax.families import registry

    f = cfg.finetune
    init = f.init or fs.to_str(fs.path(cfg.output_dir) / "pretrain")
    params, model_cfg, info, tok_dir = load_params(init)
    job_registry.check_family(job_registry.get(f.job), model_cfg.family)  # the model's own family decides
    # architecture from the checkpoint; compute settings (dtype, attention, remat, and the fields a family's config
    # class lists in ``run_settings``: ULMFiT's classifier-stage switches) from this run's config
    keep = ("dtype", "attention_impl", "remat", *getattr(type(model_cfg), "run_settings", ()))
    model_cfg = dataclasses.replace(model_cfg, **{k: getattr(cfg.model, k) for k in keep
                                                  if hasattr(model_cfg, k) and hasattr(cfg.model, k)})
    if f.max_seq_length > getattr(model_cfg, "max_position_embeddings", f.max_seq_length):
        raise ConfigError(f"finetune.max_seq_length={f.max_seq_length} exceeds the pretrained model's "
                          f"max_position_embeddings={model_cfg.max_position_embeddings} ({init}); lower it")
    tokenizer = load_tokenizer(info, tok_dir)
    prepare = registry.get(model_cfg.family).finetuning.prepare_finetune
    if prepare is not None:  # e.g. a vocabulary grown by the task's special tokens
        model_cfg = prepare(model_cfg, tokenizer)
    if f.from_scratch:
        if f.keep_head:
            raise ConfigError("finetune.from_scratch=true trains from a random initialisation; finetune.keep_head="
                              "true keeps a pretrained head: set one of them false")
        params = None
    return Pretrained(params, model_cfg, info, tok_dir, tokenizer, str(init))


def fit_tensor(fresh: Any, value: Any, where: str, strict: bool = False) -> Any:
    """``value`` (pretrained) placed into ``fresh``'s structure. An embedding table with fewer rows than the
    finetuning vocabulary (tokens the task adds, such as GPT's start/delimiter/extract) keeps its pretrained
    rows; the new rows keep their fresh initialisation. Any other shape difference is an error; so is, when
    ``strict``, a tensor the checkpoint lacks (a kept task head must be whole)."""
    if isinstance(fresh, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"pretrained parameter '{where}' is a tensor where the finetuning model has a table")
        missing = [k for k in fresh if k not in value]
        if strict and missing:
            raise ConfigError(f"the checkpoint's '{where}' lacks {', '.join(missing)} (it holds "
                              f"{', '.join(value)}); set finetune.keep_head=false for a fresh head")
        return {k: (fit_tensor(f, value[k], f"{where}/{k}", strict) if k in value else f) for k, f in fresh.items()}
    ref, got = np.shape(fresh), np.shape(value)
    if ref == got:
        return value
    if len(got) == len(ref) == 2 and got[1] == ref[1] and got[0] < ref[0]:
        return np.concatenate([np.asarray(value), np.asarray(fresh)[got[0]:]], axis=0)
    raise ConfigError(f"pretrained parameter '{where}' does not fit the finetuning model: {got} vs {ref}")


def merge_encoder(pretrained: dict | None, trunk: str, keep_head: bool = False, where: str = "finetune.init"):
    """init_params for ``fit``: a fresh head + the pretrained trunk (a pooler missing from the checkpoint stays
    freshly initialised). ``keep_head``: the checkpoint's task head too (finetune.keep_head); it must exist
    and fit. ``pretrained`` None (``finetune.from_scratch``): None, so ``fit`` keeps its fresh initialisation."""
    if pretrained is None:
        return None

    def merge(fresh):
        fresh = jax.tree.map(lambda x: x, fresh)
        if trunk not in pretrained:
            raise ConfigError(f"the pretrained checkpoint has no '{trunk}' parameters (it holds "
                              f"{', '.join(pretrained)}); pick a {trunk} checkpoint for finetune.init")
        enc = fresh["params"][trunk]
        for key, value in pretrained[trunk].items():
            if key in enc:
                enc[key] = fit_tensor(enc[key], value, key)
        if keep_head:
            head = [k for k in fresh["params"] if k != trunk]
            missing = [k for k in head if k not in pretrained]
            if missing:
                raise ConfigError(f"finetune.keep_head=true but {where} has no '{', '.join(missing)}' head "
                                  f"parameters (it holds {', '.join(pretrained)}); set finetune.keep_head=false "
                                  f"for a fresh head")
            for k in head:
                fresh["params"][k] = fit_tensor(fresh["params"][k], pretrained[k], k, strict=True)
        return fresh

    return merge
