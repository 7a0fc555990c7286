"""The ConSERT job's objective (``Job.build``: training and ``ptm eval``) and run (one finetuning stage)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ptm_jax import config_loading as config_lib
from ptm_jax.data.tasks.glue import read_glue
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.jobs.consert.data import glue_task_of, labelled_pairs, positive_pairs, read_sentences, supervision
from ptm_jax.objectives.base import check_grad_accum
from ptm_jax.objectives.consert_nli import JointObjective, NliObjective
from ptm_jax.objectives.contrastive import ContrastiveObjective


def build_consert(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
                  model_info: dict | None = None) -> tuple[Any, str]:
    """``finetune.data_dir``: a text file (one sentence per line), a GLUE TSV (its sentence columns, labels
    unused; with ``consert.supervised='positive_pairs'`` its positive pairs, with 'nli' or 'joint' its
    labelled pairs) or a GLUE folder (STS-B/train.tsv).
    Evaluation reads STS-B/dev.tsv of ``consert.eval_data_dir``, else of the GLUE folder that holds the
    training data."""

    f = cfg.finetune
    c = config_lib.section(cfg, "consert")
    mode = supervision(c)
    if eval_split != "dev":
        raise ConfigError(f"finetune.job=consert: the STS-B {eval_split} split has no public scores; evaluate "
                          "--split dev")
    if not f.data_dir and not (c.eval_data_dir and not train):
        raise ConfigError("finetune.job=consert: set finetune.data_dir (--data-dir) to a sentences file (one per "
                          "line), a GLUE TSV or a GLUE folder holding STS-B/")
    source = Path(f.data_dir) if f.data_dir else None
    glue_dir = Path(c.eval_data_dir) if c.eval_data_dir else None
    if glue_dir is None and source is not None:
        if source.is_dir():
            glue_dir = source
        elif source.suffix == ".tsv" and (source.parent.parent / "STS-B").is_dir():
            glue_dir = source.parent.parent
    if glue_dir is None:
        raise ConfigError(f"finetune.job=consert: set consert.eval_data_dir to the GLUE folder holding "
                          f"STS-B/dev.tsv (the evaluation pairs); {f.data_dir!r} is not inside one")
    dev_rows, _ = read_glue(glue_dir, "stsb", "dev")
    dev = [(e.text_a, e.text_b, float(e.label)) for e in dev_rows]
    pairs = None
    what = ""
    obj = None
    if train and mode in ("nli", "joint"):
        obj, what = build_nli(mode, f, c, model_cfg, source, dev, tokenizer)
    elif train:
        if mode == "positive_pairs":
            path = source / "STS-B" / "train.tsv" if source.is_dir() else source
            pairs, what = positive_pairs(path)
            pairs = take_subset(pairs, f.train_subset, f.subset_seed)
        else:
            if source.is_dir():
                source = source / "STS-B" / "train.tsv"
            if source.suffix == ".tsv":
                task, split = glue_task_of(source)
                rows, _ = read_glue(source.parent.parent, task, split)
                sentences = [t for e in rows for t in (e.text_a, e.text_b) if t]
            else:
                sentences = read_sentences(source)
            unique = list(dict.fromkeys(s.strip() for s in sentences if s.strip()))
            if not unique:
                raise DataError(f"{source}: no sentences")
            unique = take_subset(unique, f.train_subset, f.subset_seed)
            pairs = [(s, s) for s in unique]
            what = (f"{len(pairs)} distinct unlabelled sentences of {len(sentences)} from {source}")
    if obj is None:
        obj = ContrastiveObjective(model_cfg, f, c, pairs, dev, tokenizer)
    check_grad_accum(obj, cfg.train.grad_accum_steps)
    views = ", ".join(map(str, obj.views))
    head = f"{what}; views {views}, temperature {obj.temperature:g}; " if train else ""
    if mode == "nli" and train:
        head = f"{what}; "
    desc = f"ConSERT: {head}STS-B dev ({len(dev)} pairs) from {glue_dir}"
    return obj, desc


def build_nli(mode: str, fcfg, ccfg, model_cfg, source: Path, dev, tokenizer) -> tuple[NliObjective, str]:
    """The ``nli`` or ``joint`` objective over the labelled pairs of ``source`` (train_subset applied)."""
    pairs, labels, spec, what = labelled_pairs(source, mode)
    rows = take_subset(list(zip(pairs, labels)), fcfg.train_subset, fcfg.subset_seed)
    if len(rows) < len(pairs):
        what += f", {len(rows)} kept (train_subset)"
    cls = JointObjective if mode == "joint" else NliObjective
    obj = cls(model_cfg, fcfg, ccfg, [p for p, _ in rows], [y for _, y in rows], spec.num_labels, dev, tokenizer)
    extra = f"; joint: L_ce + {obj.alpha:g} * L_con" if mode == "joint" else "; loss: softmax CE over (u, v, |u-v|)"
    return obj, what + extra


def run(cfg, *, stop_after: int | None = None) -> dict[str, Any]:
    """``Job.run``: the objective on the pretrained encoder through the one stage, into ``finetune-consert``."""
    from ptm_jax.train.finetune import single_task

    return single_task(cfg, build_consert, task="consert", stop_after=stop_after)
