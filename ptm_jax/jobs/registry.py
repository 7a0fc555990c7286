"""The job registry: what ``ptm finetune`` (and ``ptm run``'s finetuning stage) can run.

A job is one package under ``ptm_jax/jobs/`` whose ``__init__`` builds a :class:`Job` and calls :func:`register`
(or a family's own chain of stages, registered by its family package: ULMFiT's); jobs are found by importing
every package there and every family package (:func:`load_all`), as families and adapters are. ONE field
picks the job of a run, ``finetune.job``; the job owns the top-level config section of its own name (``[mtdnn]``,
``[consert]``, ``[features]``), read into its ``config`` dataclass the way a family owns ``[model]``
(``config.py``: ``RunConfig.plugins``, :func:`sections`). ``[finetune]`` keeps what every job shares.

Every job runs its training through the one finetuning stage, ``train/finetune.run_stage`` (the pretrained
weights loaded, the objective built, ``fit`` with the best model kept by the task metric, ``summary.json``),
where an adapter (``ptm_jax/adapters``) wraps the objective when the job allows it (``Job.adapters``).

This module sits at the bottom of the import graph: it imports nothing of the spine but its error type; a job's
``__init__`` names its code as 'module:function' (``plugins.lazy``), imported when called, so ``config.py`` can read
the jobs' sections without loading JAX or the finetuning code.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ptm_jax.plugins import PluginTable


@dataclasses.dataclass(frozen=True)
class Job:
    """One finetuning job. ``name`` is the value of ``finetune.job`` and the name of its config section."""

    name: str
    run: Callable[..., dict]
    """(cfg: RunConfig, *, stop_after: int | None) -> summary dict (also written as the job's summary.json)."""
    config: type | None = None
    """Dataclass of the ``[name]`` section (with an optional ``validate(where)``); None: the job has none."""
    build: Callable[..., tuple[Any, str]] | None = None
    """(cfg, model_cfg, tokenizer, eval_split, *, train, model_info) -> (objective, description): the objective
    that ``ptm eval`` scores a kept model of the job with; None: ``ptm eval`` does not read its models."""
    load_model: Callable[..., tuple[Any, Any, Any, str]] | None = None
    """(cfg, model, eval_split) -> (cfg, objective, params tree, description): for a job whose kept models are not
    params directories (``build`` reads those): ``ptm eval`` restores the model and rebuilds its objective."""
    model_marker: str = ""
    """A file that this job's kept models hold (``feature_model.json``): ``ptm eval`` hands such a model to this job
    whatever ``finetune.job`` says."""
    needs: tuple[str, ...] = ()
    """Capabilities (``families/registry.CAPABILITIES``) that the family of the model the job trains must have
    (``("embed",)``: a bare encoder); :func:`check_family` refuses the others before any work: from the config
    for this run's own model (``train/finetune.check_job_family``, before ``ptm run`` pretrains), and where a model
    is loaded for a job (``train/pretrained.load_pretrained``, ``ptm eval``)."""
    family: str = ""
    """A family's own job (ULMFiT's 'ulmfit'): only a model of that family runs it."""
    adapters: bool = False
    """Whether ``finetune.adapter`` may wrap the job's objective in the finetuning stage."""
    moved: dict[str, str] = dataclasses.field(default_factory=dict)
    """Former ``finetune.<field>`` (a former key of another section in full: 'data.target_lm_steps') -> its field in
    the job's section (``mtdnn.tasks``): the unknown-key error of an old config names the new place."""
    task_values: tuple[str, ...] = ()
    """Former ``finetune.task`` values that picked this job (``finetune.task=mtdnn``): refused with a message
    naming ``finetune.job``."""
    description: str = ""


_TABLE: PluginTable[Job] = PluginTable("ptm_jax.jobs", "finetuning job", "finetune.job", also=("ptm_jax.families",))
"""A family package may register a job of its own chain of stages (``families/ulmfit``: 'ulmfit')."""
register = _TABLE.register
load_all = _TABLE.load_all
jobs = _TABLE.all
get = _TABLE.get
sections = _TABLE.sections
"""``sections()``: config section name -> dataclass, for every registered job that has one."""


CAPABILITY_WORDS = {"embed": "a bare encoder, Finetuning.task_heads['encoder']",
                    "classify": "a sequence classification head"}
"""What a capability in ``Job.needs`` means, for the refusal message."""


def refusal(job: Job, family: str) -> str | None:
    """Why ``job`` cannot train a model of ``family`` (its own family, its ``needs``), or None."""
    from ptm_jax.families import registry as families

    if job.family and family != job.family:
        return (f"finetune.job={job.name} is the {job.family} family's own job; model.family={family!r} is not "
                f"{job.family} (for a classifier of this family: finetune.job=task)")
    missing = [n for n in job.needs if n not in families.get(family).capabilities]
    if missing:
        able = sorted(n for n, f in families.families().items() if set(job.needs) <= f.capabilities)
        return (f"finetune.job={job.name} needs a family with {', '.join(repr(m) for m in missing)} "
                f"({'; '.join(CAPABILITY_WORDS.get(m, m) for m in missing)}), which model.family={family!r} "
                f"does not have; families with it: {', '.join(able) or 'none'}")
    return None


def check_family(job: Job, family: str) -> None:
    """A ConfigError when ``job`` cannot train a model of ``family`` (:func:`refusal`)."""
    from ptm_jax.errors import ConfigError

    reason = refusal(job, family)
    if reason:
        raise ConfigError(reason)


def moved_key(field: str, section: str = "finetune") -> str | None:
    """Where a former ``<section>.<field>`` lives now ('mtdnn.tasks (with finetune.job='mtdnn')'), or None."""
    key = field if section == "finetune" else f"{section}.{field}"
    for j in jobs().values():
        if key in j.moved:
            return f"{j.name}.{j.moved[key]} (with finetune.job={j.name!r})"
    return None


def job_of_task_value(task: str) -> Job | None:
    """The job a former ``finetune.task`` value picked (``mtdnn``, ``consert``), or None."""
    for j in jobs().values():
        if task in j.task_values:
            return j
    return None
