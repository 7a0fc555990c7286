"""Stages of a run: corpus -> tokenizer -> cache -> pretrain -> (finetune -> evaluate).

``ptm run`` calls the stages in order in one process; ``ptm pretrain`` / ``ptm data`` call one each. Every
stage writes under ``output_dir`` and is resumable: the tokenizer and cache are reused, and the training
stages resume from their latest checkpoint. ``output_dir`` may be local or ``gs://``: every path goes through
ptm_jax/fs.py, and each JSON file is written whole (never half a file).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable, Sequence

import jax
import numpy as np

from ptm_jax import config_loading as config_lib
from ptm_jax import fs
from ptm_jax.config import RunConfig
from ptm_jax.data.cache import TokenCache, build_or_load_cache
from ptm_jax.data.chunks import ChunkLayout, sample_sentences
from ptm_jax.data.corpus import language_groups, prepare_tfds
from ptm_jax.data.pretraining.source import SpecialIds, SubsetSource
from ptm_jax.data.tokenizer_loading import load_tokenizer
from ptm_jax.data.tokenizers import Tokenizer
from ptm_jax.errors import ConfigError
from ptm_jax.parallel.batch_check import check_stage_batches
from ptm_jax.parallel.distributed import barrier
from ptm_jax.parallel.mesh import make_mesh

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Corpus:
    tokenizer: Tokenizer
    cache: TokenCache
    train: SubsetSource
    eval: SubsetSource | None
    special: SpecialIds
    """The special ids the family declares (``Pretraining.specials``); the others are None."""
    artifacts: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``Pretraining.artifacts`` name -> value, built once beside the token cache (``prepare_corpus``)."""
    languages: dict[str, dict] | None = None
    """A language-tagged corpus: per language, its corpus and sampled shares (``data/languages.py``)."""


def _sentences(cfg: RunConfig) -> Callable[[], Any]:
    """The tokenizer's training text: a bounded sample of the corpus, the same on every process."""
    return lambda: sample_sentences(cfg.data, cfg.tokenizer.train_sample_bytes)


def _check_tokenizer_kind(cfg: RunConfig, family: Any) -> None:
    from ptm_jax.families import registry

    kinds = registry.tokenizer_kinds(family)
    if cfg.tokenizer.kind not in kinds:
        raise ConfigError(f"tokenizer.kind={cfg.tokenizer.kind!r}: objective={cfg.objective!r} (family "
                          f"{family.name!r}) reads {', '.join(map(repr, kinds))}; set tokenizer.kind to one of them")


def special_ids(tok: Tokenizer, family: Any, objective: str) -> SpecialIds:
    """The specials ``family`` declares (``Pretraining.specials``), read from ``tok``; a ConfigError names a missing
    one. ``eos`` is the tokenizer's end-of-text id, else its [SEP] (WordPiece/SentencePiece end a document
    with it)."""
    ids: dict[str, int] = {}
    for name in family.pretraining.specials:
        v = getattr(tok, f"{name}_id", None)
        if name == "eos" and v is None:
            v = getattr(tok, "sep_id", None)
        if v is None or int(v) < 0:
            raise ConfigError(f"objective={objective!r} needs the special token {name!r}, which the "
                              f"tokenizer.kind={tok.kind!r} vocabulary does not have; set tokenizer.vocab_file "
                              "to a vocabulary with that token (or leave it empty to train one)")
        ids[name] = int(v)
    cont = tok.continuation_mask() if "mask" in family.pretraining.specials else None  # whole-word masking
    return SpecialIds(vocab_size=tok.vocab_size, continuation=cont, **ids)


def build_artifacts(cfg: RunConfig, corpus: Corpus, family: Any, cache_dir: Any) -> dict[str, Any]:
    """Calls each of ``family.pretraining.artifacts`` (name order) with ``<cache_dir>/artifacts/<name>``: every process
    calls every builder, which decides itself who computes and waits at ``barrier``."""
    return {name: build(cfg, corpus, cache_dir / "artifacts" / name)
            for name, build in sorted(family.pretraining.artifacts.items())}


def prepare_corpus(cfg: RunConfig) -> Corpus:
    """Tokenizer (loaded, or trained on the corpus once) and the tokenized cache, split by documents, with the
    special ids and derived artifacts the objective's family declares (``Pretraining.specials``, ``artifacts``)."""
    from ptm_jax.families import registry

    family = registry.family_of_objective(cfg.objective)
    _check_tokenizer_kind(cfg, family)
    if family.pretraining.corpus is not None:  # a graph or a hierarchy: the family reads its own input
        return family.pretraining.corpus(cfg)
    out = fs.makedirs(cfg.output_dir)
    prepare_tfds(cfg.data, jax.process_index(), barrier)
    corpus_key = cfg.data.corpus
    if language_groups(corpus_key)[0][0] is not None:  # the smoothing exponent shapes the tokenizer's sample
        corpus_key += f"|language_alpha={cfg.data.language_alpha}"
    tok = load_tokenizer(cfg.tokenizer, _sentences(cfg), out, corpus_key=corpus_key,
                         process_index=jax.process_index(), barrier=barrier)
    if tok.vocab_size > cfg.model.vocab_size:
        raise ConfigError(f"the tokenizer has {tok.vocab_size} ids but model.vocab_size={cfg.model.vocab_size}; "
                          f"set model.vocab_size={tok.vocab_size} (or larger)")
    cache_dir = fs.path(cfg.data.cache_dir) if cfg.data.cache_dir else out / "cache"
    cache = build_or_load_cache(cfg.data, tok, cache_dir, jax.process_index(), jax.process_count(), barrier)
    n_eval = min(cfg.data.eval_documents, cache.num_docs // 2)
    need = 2 if cfg.objective in ("mlm_nsp", "plm") else 1  # sentence pairs draw B from another document
    if cache.num_docs - n_eval < need:
        raise ConfigError(f"the corpus {cfg.data.corpus!r} has {cache.num_docs} documents after tokenization; "
                          f"{cfg.objective} needs at least {need} training documents: add text or lower "
                          "data.eval_documents")
    train_docs, languages = np.arange(cache.num_docs - n_eval), None
    held_docs = np.arange(cache.num_docs - n_eval, cache.num_docs)
    if language_groups(cfg.data.corpus)[0][0] is not None:  # mBERT's smoothed language shares
        layout = ChunkLayout(cfg.data)
        from ptm_jax.data.languages import smoothed_documents, split_by_language, vocab_sample_shares

        train_docs, held_docs = split_by_language(cache, layout, n_eval)
        train_docs, languages = smoothed_documents(cache, layout, train_docs, cfg.data.language_alpha,
                                                   cfg.data.seed)
        vocab = vocab_sample_shares(layout, cfg.data.language_alpha)
        for lang, row in languages.items():
            row["vocab_sample_share"] = vocab[lang]["target_share"]
    train = SubsetSource(cache, train_docs)
    held = SubsetSource(cache, held_docs) if len(held_docs) else None
    corpus = Corpus(tok, cache, train, held, special_ids(tok, family, cfg.objective), languages=languages)
    corpus.artifacts = build_artifacts(cfg, corpus, family, cache_dir)
    return corpus


def write_config(cfg: RunConfig) -> None:
    if jax.process_index() == 0:
        fs.write_text_atomic(fs.makedirs(cfg.output_dir) / "config.json",
                             json.dumps(config_lib.to_dict(cfg), indent=2))


def pretrain_param_groups(cfg: RunConfig) -> list | None:
    """The pretraining stage's parameter-group rules: the model family's own for ``stage='pretrain'`` (its
    weight-decay exclusions: NNLM's and ULMFiT's no decay on biases, XLNet's rule), else None: the spine's default
    (``train/param_groups.py`` ``DEFAULT_RULES``); ``train.param_groups`` follow either (``make_optimizer``)."""
    from ptm_jax.families import registry

    own = registry.family_of_objective(cfg.objective).layout.param_groups
    return own(cfg.model, "pretrain") if own else None


def pretrain(cfg: RunConfig, *, stop_after: int | None = None, corpus: Corpus | None = None,
             hooks: Sequence[Any] = ()) -> dict[str, Any]:
    """Pretrains cfg.model with cfg.objective; returns the final train/eval figures and the baseline. ``hooks``:
    more ``fit`` hooks (``ptm compare``'s wall-clock budget, ``evaluate/compare_stages.py``)."""
    from ptm_jax.objectives.base import ReportsBaseline
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.loop import fit

    check_stage_batches(cfg, ["pretrain"])
    write_config(cfg)
    corpus = corpus or prepare_corpus(cfg)
    objective = build_objective(cfg, corpus)
    mesh = make_mesh(cfg.mesh)
    result = fit(objective, cfg.train, mesh, fs.path(cfg.output_dir) / "pretrain", stop_after=stop_after,
                 param_groups=pretrain_param_groups(cfg), meta={"config": config_lib.to_dict(cfg)}, hooks=hooks)
    summary: dict[str, Any] = {"stage": "pretrain", "step": result.step, "preempted": result.preempted,
                               "train": result.train_metrics, "eval": objective.summarize(result.eval_metrics),
                               "corpus": {"documents": corpus.cache.num_docs, "tokens": corpus.cache.num_tokens,
                                          "vocab_size": corpus.tokenizer.vocab_size}}
    if isinstance(objective, ReportsBaseline) and not result.preempted:
        # over the held-out batches the evaluation read
        summary["baseline"] = objective.baseline(cfg.train.eval_rows())
    if jax.process_index() == 0:
        fs.write_text_atomic(fs.path(cfg.output_dir) / "pretrain" / "summary.json", json.dumps(summary, indent=2))
    return summary


def run(cfg: RunConfig) -> dict[str, Any]:
    """The main job: pretrain, then the finetuning job ``finetune.job`` (``ptm_jax/jobs``; ULMFiT's target-task LM
    and classifier: the 'ulmfit' job) when ``finetune.task`` is set, and with ``finetune.scratch_baseline`` the
    same job on the same network from a random initialisation (``finetune.from_scratch``; summary key
    ``from_scratch``): what pretraining added."""
    # every stage's batch, before any stage runs: a finetuning batch the mesh cannot divide must not wait for
    # the end of pretraining to fail
    check_stage_batches(cfg, ["pretrain", "finetune"] if cfg.finetune.task else ["pretrain"])
    if cfg.finetune.task:  # nor a job this family cannot run
        from ptm_jax.train.finetune import check_job_family, finetune

        check_job_family(cfg)
    summary = {"pretrain": pretrain(cfg)}
    if cfg.finetune.task and not summary["pretrain"]["preempted"]:
        summary["finetune"] = finetune(cfg)
        if cfg.finetune.scratch_baseline and not summary["finetune"].get("preempted"):
            summary["from_scratch"] = finetune(dataclasses.replace(
                cfg, finetune=dataclasses.replace(cfg.finetune, from_scratch=True)))
    if jax.process_index() == 0:
        fs.write_text_atomic(fs.path(cfg.output_dir) / "summary.json", json.dumps(summary, indent=2))
    return summary
