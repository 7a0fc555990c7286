"""The CVT job: CoNLL-2003 (``data/tasks/registry.py``), the unlabelled sentences (``data.py``), the word table of
``finetune.init`` (``objectives/feature_inputs.py``, as the features job builds it), the objective
(``objective.py``) and the one finetuning stage (``train/finetune.run_stage``: ``fit``, the best model by
eng.testa F1 kept in ``<output_dir>/finetune-cvt/best`` with ``cvt_model.json``, ``summary.json``).

``ptm finetune finetune.job=cvt finetune.task=conll2003 finetune.data_dir=CONLL finetune.init=random
cvt.unlabelled=TEXT output_dir=OUT``; ``ptm eval --model OUT/finetune-cvt/best --split test`` scores eng.testb.
``finetune.epochs`` counts epochs of the labelled sentences: with CVT a run takes twice as many steps (every
other one unlabelled), and ``finetune.eval_every`` (0: once per labelled epoch) counts those steps. A train record
holds its step's loss (``unlabelled`` 1: the CVT loss); with CVT an even ``train.log_every`` is taken one lower, so
that successive records alternate the two kinds.

The word table holds the labelled training words and, when ``cvt.unlabelled`` is set, the unlabelled sentences'
words, whether CVT is on or not, so the supervised baseline (``cvt.enabled=false``) is the identical network;
static vectors also give rows to the dev words they know. The kept model records the table's words, so ``ptm
eval`` rebuilds it without reading the unlabelled text.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.config import RunConfig
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.conll import label_list
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError
from ptm_jax.jobs.cvt.data import check_labelled, read_unlabelled
from ptm_jax.jobs.cvt.objective import CvtTaggingObjective
from ptm_jax.objectives.feature_inputs import Source, WordTable, resolve_source, word_table
from ptm_jax.objectives.feature_tasks import EMBEDDING_PATTERN, KeepBestFeatures, put_into_inputs
from ptm_jax.train.finetune import finetune_train_config, run_stage
from ptm_jax.train.param_groups import DEFAULT_RULES, Rule, rules_from_config

STAGE = "finetune-cvt"
MARKER = "cvt_model.json"
REFUSAL = "finetune.job=cvt reads random or static word vectors"
"""The start of the error line for a model without static word vectors (tests/job_conformance_checks.py)."""


def word_source(init: str) -> Source:
    """``finetune.init`` -> random or static vectors; a model whose family has no static word vectors is refused
    before it is read further."""
    if not init:
        raise ConfigError("finetune.job=cvt: finetune.init is empty: name the word vectors: 'random' (or "
                          "'random:DIM'), a word-vector file, or a model whose family gives static word vectors")
    path = Path(init)
    if not (init == "random" or init.startswith("random:") or path.exists()):
        raise ConfigError(f"finetune.init={init!r} does not exist; for finetune.job=cvt it is 'random', 'random:DIM', "
                          "a word-vector file or a model with static word vectors")
    if path.is_dir():
        from ptm_jax.export.params import load_params
        from ptm_jax.families import registry

        family = load_params(init)[1].family
        if "word_vectors" not in registry.get(family).capabilities:
            able = sorted(n for n, f in registry.families().items() if "word_vectors" in f.capabilities)
            raise ConfigError(f"{REFUSAL}; finetune.init={init!r} is a model of family {family!r}, which has "
                              f"none (families with static word vectors: {', '.join(able)}); or finetune.init="
                              "'random'")
    source = resolve_source(init)
    if source.kind not in ("random", "static"):
        raise ConfigError(f"{REFUSAL}; finetune.init={init!r} gives {source.description}")
    return source


def _scored(f, eval_split: str):
    if f.task.lower().replace("-", "") != "conll2003":
        raise ConfigError(f"finetune.job=cvt tags words: set finetune.task=conll2003, got {f.task!r}")
    if not f.data_dir:
        raise ConfigError("finetune.job=cvt: set finetune.data_dir to the CoNLL-2003 folder (eng.train, eng.testa, "
                          "eng.testb) or 'tfds'")
    if eval_split not in ("dev", "test"):
        raise ConfigError(f"CoNLL-2003 evaluation split must be 'dev' (eng.testa) or 'test' (eng.testb), got "
                          f"{eval_split!r}")
    return tasks.read("conll2003", f.data_dir, eval_split)[0]


def build_cvt(cfg: RunConfig, eval_split: str = "dev") -> tuple[CvtTaggingObjective, Source, str]:
    """(objective, word source, description) for training; ``eval_split`` the split each evaluation scores."""
    f = cfg.finetune
    c = config_lib.section(cfg, "cvt")
    if config_lib.section(cfg, "tagging").head != "softmax":
        raise ConfigError(f"tagging.head={config_lib.section(cfg, 'tagging').head!r}: finetune.job=cvt predicts each "
                          "word by its own softmax (every prediction module, Clark et al. 2018); set "
                          "tagging.head=softmax")
    source = word_source(f.init)
    scored = _scored(f, eval_split)
    train = tasks.read("conll2003", f.data_dir, "train")[0]
    check_labelled(train, f"finetune.data_dir={f.data_dir!r}")
    dev = scored if eval_split == "dev" else tasks.read("conll2003", f.data_dir, "dev")[0]
    labels, total = label_list(train), len(train)  # labels of the whole file: a subset keeps the same ids
    train = take_subset(train, f.train_subset, f.subset_seed)
    unlabelled = (read_unlabelled(c.unlabelled, c.unlabelled_sentences, f.subset_seed)
                  if c.active or c.unlabelled else [])
    table = word_table(source, [s.words for s in train] + unlabelled, [s.words for s in dev], seed=f.seed)
    objective = CvtTaggingObjective(f, c, table, source.dim, labels, train, scored, unlabelled)
    desc = (f"CoNLL-2003 NER: {len(train)} train (of {total}) / {len(scored)} {eval_split} sentences, "
            f"{len(labels)} labels; {len(unlabelled)} unlabelled sentences"
            + (f" from {c.unlabelled}" if c.unlabelled else "")
            + (f", CVT weight {c.aux_weight}" if c.active else ", supervised only (cvt.enabled=false or weight 0)")
            + f"; {source.description}; word table {len(table.words)} rows"
            + (f", {table.found} from the vectors" if table.matrix is not None else ""))
    return objective, source, desc


def finetune_cvt(cfg: RunConfig, *, stop_after: int | None = None) -> dict[str, Any]:
    """``Job.run``: the objective, then the one finetuning stage into ``<output_dir>/finetune-cvt``."""
    f = cfg.finetune
    c = config_lib.section(cfg, "cvt")
    objective, source, description = build_cvt(cfg)
    rules = [*DEFAULT_RULES]
    frozen = source.kind == "static" and c.freeze_embeddings
    if frozen:
        rules.append(Rule(EMBEDDING_PATTERN, frozen=True, where="cvt.freeze_embeddings"))
    rules += rules_from_config(f.param_groups, "finetune.param_groups")
    stage = fs.path(cfg.output_dir) / STAGE
    tcfg = finetune_train_config(cfg, objective.num_train * (2 if objective.active else 1))
    if objective.active and tcfg.log_every % 2 == 0:  # an odd interval: the train records alternate the two kinds
        tcfg = dataclasses.replace(tcfg, log_every=tcfg.log_every - 1)
    info = {"task": "conll2003", "init": f.init, "source": source.kind, "description": description,
            "max_seq_length": f.max_seq_length, "dim": source.dim, "dropout": f.classifier_dropout,
            "label_names": list(objective.spec.labels), "num_labels": objective.num_labels,
            "words": objective.table.words, "frozen_embeddings": frozen, "data_dir": f.data_dir,
            "train_subset": f.train_subset, "subset_seed": f.subset_seed, "cvt": dataclasses.asdict(c)}

    def extra(_):
        return {"cvt": {**dataclasses.asdict(c), "active": objective.active,
                        "unlabelled_sentences_read": objective.num_unlabelled}, "labelled_steps":
                (tcfg.steps + 1) // 2 if objective.active else tcfg.steps}

    table = objective.table
    rows = {} if table.matrix is None else {"embedding": ("word table", table.matrix)}  # static vectors
    done = run_stage(cfg, stage=stage, objective=objective, task="conll2003", description=description,
                     init=f.init, init_params=put_into_inputs(rows), param_groups=rules, tcfg=tcfg,
                     keepers=lambda obj: [KeepBestFeatures(stage, obj, info, marker=MARKER)],
                     stop_after=stop_after, summary_extra=extra)
    return done.summary


def load_cvt_model(cfg: RunConfig, model: str, split: str = "dev") -> tuple[RunConfig, Any, Any, str]:
    """``Job.load_model`` for ``ptm eval``: a kept CVT tagger (``<stage>/best``: ``params/`` and
    ``cvt_model.json``) restored and its objective rebuilt from its record (the word table's words, the labels,
    the sizes) to score ``split`` of ``finetune.data_dir`` (or the folder it was trained on)."""
    import orbax.checkpoint as ocp

    where = fs.path(model)
    meta = json.loads(fs.read_text(where / MARKER))
    f = dataclasses.replace(cfg.finetune, task="conll2003", job="cvt", init=meta["init"],
                            max_seq_length=meta["max_seq_length"], classifier_dropout=meta["dropout"],
                            data_dir=cfg.finetune.data_dir or meta.get("data_dir") or "")
    c = dataclasses.replace(config_lib.section(cfg, "cvt"), **{k: meta["cvt"][k] for k in
                                                                ("hidden_1", "hidden_2", "projection")},
                            enabled=False)
    run = dataclasses.replace(cfg, finetune=f, plugins={**cfg.plugins, "cvt": c})
    scored = _scored(f, split)
    table = WordTable(list(meta["words"]), None, 0)
    objective = CvtTaggingObjective(f, c, table, meta["dim"], meta["label_names"], None, scored)
    description = (f"CoNLL-2003 NER: {len(scored)} {split} sentences, {len(meta['label_names'])} labels; the CVT "
                   f"tagger of {where} ({meta['source']} word table of {len(table.words)} rows)")
    return run, objective, ocp.PyTreeCheckpointer().restore(fs.absolute(where / "params")), description
