"""The heads-over-word-features job: the task read from ``data/tasks/registry.py`` (a GLUE task, the embedded
task, CoNLL-2003), its objective on word features (``objectives/feature_tasks.py``), and the one finetuning stage
(``train/finetune.run_stage``) with the feature model's own keep-best hook."""
from __future__ import annotations

import dataclasses
from typing import Any

from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.config import RunConfig
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.conll import label_list
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError
from ptm_jax.models.text_heads import HEADS, TAGGERS
from ptm_jax.objectives.feature_inputs import resolve_source, text_words
from ptm_jax.objectives.feature_tasks import (
    EMBEDDING_PATTERN,
    FEATURE_STATS_PATTERN,
    FeatureClassificationObjective,
    FeatureInputs,
    FeatureTaggingObjective,
    KeepBestFeatures,
    scalar_mix,
)
from ptm_jax.train.finetune import run_stage
from ptm_jax.train.param_groups import DEFAULT_RULES, Rule, rules_from_config


def _sentence_task(cfg: RunConfig):
    """(spec, train examples, dev examples, description) of a GLUE task or the embedded task."""
    f = cfg.finetune
    task = tasks.key(f.task)
    if task == "embedded":
        from ptm_jax.data.tasks.embedded_task import DESCRIPTION, embedded_task

        train, dev = tasks.read(task, f.data_dir, "train")[0], tasks.read(task, f.data_dir, "dev")[0]
        return embedded_task()[0], take_subset(train, f.train_subset, f.subset_seed), dev, DESCRIPTION
    decl = tasks.TASKS.get(task)
    if decl is None or not decl.glue or task == "ax":
        head = config_lib.section(cfg, "features").head
        raise ConfigError(f"features.head={head!r} classifies sentences or pairs: finetune.task must be a GLUE "
                          f"task ({', '.join(n for n in tasks.FINETUNE_TASKS if tasks.TASKS[n].glue)}) or "
                          f"'embedded', got {f.task!r}")
    from ptm_jax.data.tasks.glue import get_task

    train, dev = tasks.read(task, f.data_dir, "train")[0], tasks.read(task, f.data_dir, "dev")[0]
    kept = take_subset(train, f.train_subset, f.subset_seed)
    desc = (f"GLUE {task}: {len(kept)} train (of {len(train)}) / {len(dev)} dev examples from {f.data_dir}")
    return get_task(task), kept, dev, desc


def build_feature_task(cfg: RunConfig, eval_split: str = "dev", tagging: Any = None
                       ) -> tuple[Any, FeatureInputs, str]:
    """(objective, its inputs, description) for ``features.head`` on ``finetune.task``. ``eval_split``: the split
    the objective scores (CoNLL-2003: 'dev' = eng.testa or 'test' = eng.testb; sentence tasks: 'dev'). The word
    table is always built from the training and dev words, as in training, so a kept model's rows line up.
    ``tagging``: the tagger's output layer (a kept model's own; None: the run's ``[tagging]``)."""
    f = cfg.finetune
    h = config_lib.section(cfg, "features")
    if f.from_scratch:
        raise ConfigError("finetune.job=features trains a head over frozen pretrained features; "
                          "finetune.from_scratch=true would freeze random ones: set it false (or finetune.job=task)")
    source = resolve_source(f.init)
    cache = h.feature_cache or fs.to_str(fs.path(cfg.output_dir) / "feature_cache")
    if h.head in TAGGERS:
        if f.task.lower().replace("-", "") != "conll2003":
            raise ConfigError(f"features.head={h.head!r} tags words: set finetune.task=conll2003 (sentence heads: "
                              f"{', '.join(HEADS)})")
        if not f.data_dir:
            raise ConfigError("finetune.task=conll2003: set finetune.data_dir to the CoNLL-2003 folder or 'tfds'")
        if eval_split not in ("dev", "test"):
            raise ConfigError(f"CoNLL-2003 evaluation split must be 'dev' (eng.testa) or 'test' (eng.testb), got "
                              f"{eval_split!r}")
        train, dev = tasks.read("conll2003", f.data_dir, "train")[0], tasks.read("conll2003", f.data_dir, "dev")[0]
        scored = dev if eval_split == "dev" else tasks.read("conll2003", f.data_dir, "test")[0]
        tagging = tagging or config_lib.section(cfg, "tagging")
        labels, total = label_list(train), len(train)  # labels of the whole file: a subset keeps the same ids
        train = take_subset(train, f.train_subset, f.subset_seed)
        features = FeatureInputs(source, f, h, [s.words for s in train], [s.words for s in dev], cache)
        obj = FeatureTaggingObjective(f, h, train, scored, labels, features, tagging=tagging)
        return obj, features, (f"CoNLL-2003 NER: {len(train)} train (of {total}) / {len(scored)} {eval_split} "
                               f"sentences, {len(labels)} labels, {obj.dev_truncated_words} {eval_split} words past "
                               f"max_seq_length, {tagging.head} output"
                               + (f" ({tagging.crf_constraints} constraints)" if tagging.head == "crf" else ""))
    if eval_split != "dev":
        raise ConfigError(f"features.head={h.head!r} on {f.task!r}: only the dev split is scored (GLUE's test "
                          "labels are not public); use --split dev")
    spec, train, dev, desc = _sentence_task(cfg)

    def words(examples):
        return [text_words(t) for e in examples for t in (e.text_a, e.text_b) if t is not None]

    features = FeatureInputs(source, f, h, words(train), words(dev), cache)
    return FeatureClassificationObjective(spec, train, dev, f, h, features), features, desc


def finetune_features(cfg: RunConfig, *, stop_after: int | None = None) -> dict[str, Any]:
    """``Job.run``: build the task on word features, then the one finetuning stage (``fit``, the best model kept
    by :class:`~ptm_jax.objectives.feature_tasks.KeepBestFeatures`)."""
    f = cfg.finetune
    h = config_lib.section(cfg, "features")
    objective, features, description = build_feature_task(cfg)
    source = features.source
    table, words = features.table, features.word_source
    if features.encoder is not None:
        description += f"; {source.description}, finetuned end to end, mixed by a learned scalar mix"
    elif features.store is not None:
        description += f"; {source.description}, mixed by a learned scalar mix"
    if table is not None:
        description += (f"{'; ' if features.store is None else ', concatenated with '}{words.description}; word "
                        f"table {len(table.words)} rows"
                        + (f", {table.found} from the vectors" if table.matrix is not None else ""))
    rules = [*DEFAULT_RULES]
    frozen = words is not None and words.kind == "static" and h.freeze_embeddings
    if frozen:
        rules.append(Rule(EMBEDDING_PATTERN, frozen=True, where="features.freeze_embeddings"))
    if features.norm == "dimension":
        features.standardize(objective.train)
        rules.append(Rule(FEATURE_STATS_PATTERN, frozen=True, where="features.feature_norm"))
        description += ", each dimension standardised by the training words' statistics"
    elif features.norm == "layer":
        description += ", each layer normalised before the mix"
    rules += rules_from_config(f.param_groups, "finetune.param_groups")
    stage = fs.path(cfg.output_dir) / f"finetune-{f.task.lower()}"
    info = {"task": f.task, "head": h.head, "init": f.init, "source": source.kind, "description": description,
            "max_seq_length": f.max_seq_length, "head_hidden": h.head_hidden, "head_pool": h.head_pool,
            "label_names": list(getattr(objective.spec, "labels", None) or []) or None,
            "num_labels": objective.num_labels, "frozen_embeddings": frozen,
            "pair": objective.pair, "end_to_end": features.encoder is not None,
            "words": table.words if table is not None else None, "word_init": h.word_init,
            "feature_norm": h.feature_norm, "data_dir": f.data_dir, "train_subset": f.train_subset,
            "subset_seed": f.subset_seed, "freeze_features": h.freeze_features,
            **getattr(objective, "extra_info", {})}
    if features.stats is not None:
        info["feature_stats"] = {"mean": features.stats[0].tolist(), "scale": features.stats[1].tolist()}
    done = run_stage(cfg, stage=stage, objective=objective, task=f.task, description=description, init=f.init,
                     init_params=features.initial_params(), param_groups=rules,
                     keepers=lambda obj: [KeepBestFeatures(stage, obj, info)], stop_after=stop_after,
                     summary_extra=lambda result: {"head": h.head, "scalar_mix": scalar_mix(result.state.params)})
    return done.summary


def with_head(cfg: RunConfig, **features: Any) -> RunConfig:
    """``cfg`` with ``[features]`` fields replaced (benchmarks and tests)."""
    h = dataclasses.replace(config_lib.section(cfg, "features"), **features)
    return dataclasses.replace(cfg, plugins={**cfg.plugins, "features": h})



def load_feature_model(cfg: RunConfig, model: str, split: str = "dev") -> tuple[RunConfig, Any, Any, str]:
    """``Job.load_model`` for ``ptm eval``: a kept feature-head model (``<stage>/best``: ``params/`` and
    ``feature_model.json``) restored, and its objective rebuilt as in training to score ``split``. The task, head,
    feature source and word settings come from the model's own record (``finetune.data_dir`` and the cache may be
    given by ``cfg``); the word table is rebuilt from the training and dev words and must equal the model's."""
    import json

    import orbax.checkpoint as ocp

    where = fs.path(model)
    meta = json.loads(fs.read_text(where / "feature_model.json"))
    f = dataclasses.replace(cfg.finetune, task=meta["task"], init=meta["init"], job="features",
                            max_seq_length=meta["max_seq_length"],
                            data_dir=cfg.finetune.data_dir or meta.get("data_dir") or "",
                            train_subset=meta.get("train_subset", cfg.finetune.train_subset),
                            subset_seed=meta.get("subset_seed", cfg.finetune.subset_seed))
    h = dataclasses.replace(config_lib.section(cfg, "features"), head=meta["head"], head_hidden=meta["head_hidden"],
                            head_pool=meta["head_pool"], word_init=meta.get("word_init") or "",
                            feature_norm=meta.get("feature_norm") or "none",
                            freeze_features=meta.get("freeze_features", not meta.get("end_to_end", False)))
    run = dataclasses.replace(cfg, finetune=f, plugins={**cfg.plugins, "features": h})
    from ptm_jax.data.tasks.sections import TaggingConfig

    saved = meta.get("tagging")
    objective, features, description = build_feature_task(run, eval_split=split,
                                                          tagging=TaggingConfig(**saved) if saved else None)
    if features.table is not None and meta.get("words") is not None and features.table.words != meta["words"]:
        raise ConfigError(f"{where}: the word table rebuilt from {f.task}'s training words ({len(features.table.words)}"
                          f" words) differs from the model's ({len(meta['words'])}); evaluate with the data and "
                          "finetune.train_subset / subset_seed the model was trained with")
    return run, objective, ocp.PyTreeCheckpointer().restore(fs.absolute(where / "params")), description
