"""Reading a :class:`~ptm_jax.config.RunConfig`: a TOML preset (``configs/``, ``extends = "..."``), then
``section.field=value`` overrides parsed as literals (``ast.literal_eval``, never ``eval``) and coerced to each field's
annotated type; a misspelt key names the closest valid keys. Then the cross-field checks (:func:`validate`) and the
plug-in sections (:func:`section`). The dataclasses themselves are in ``ptm_jax.config``.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import re
import types
import typing
from typing import Any, Literal

from ptm_jax.config import DataConfig, RunConfig, section_types
from ptm_jax.errors import ConfigError
from ptm_jax.presets import preset_path, read_toml


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Checks ``value`` against annotation ``tp``; ints are accepted for floats, nothing else is coerced."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in typing.get_args(tp)], n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"{where}: {value!r} is not allowed; expected {_type_name(tp)}.{hint}")
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true/false, got {value!r} ({type(value).__name__})")
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")
    return value


def _owners(section: str, key: str) -> list[str]:
    """Families whose ``[section]`` dataclass has a field ``key`` (for the unknown-key message), sorted by name: the
    registry's order is the order the families were imported in, which differs from process to process."""
    from ptm_jax.families import registry

    owners = []
    for fam in registry.families().values():
        cls = fam.model_config if section == "model" else fam.pretraining.data_config
        if cls is not None and key in {f.name for f in dataclasses.fields(cls)}:
            owners.append(fam.name)
    return sorted(owners)


def _unknown_key(key: str, valid: list[str], where: str, family: str | None = None) -> ConfigError:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    hint = (f" Did you mean: {', '.join(where + c for c in close)}?" if close
            else f" Valid keys under '{where or '(top level)'}': {', '.join(valid)}.")
    section = where.rstrip(".")
    if section not in ("", "finetune"):
        from ptm_jax.jobs import registry as jobs

        moved = jobs.moved_key(key, section)
        if moved:
            return ConfigError(f"unknown config key '{where}{key}': it moved to the finetuning job's own section, "
                               f"{moved}.")
    if section == "finetune":
        from ptm_jax.data.tasks import sections as task_sections
        from ptm_jax.jobs import registry as jobs

        moved = jobs.moved_key(key)
        if moved:
            return ConfigError(f"unknown config key 'finetune.{key}': it moved to the finetuning job's own section, "
                               f"{moved}.")
        moved = task_sections.moved_key(key)
        if moved:
            return ConfigError(f"unknown config key 'finetune.{key}': it moved to {moved}.")
    owners = _owners(section, key) if section in ("model", "data") else []
    if owners and family:
        hint = (f" It belongs to the [{section}] section of family {', '.join(map(repr, owners))}, not to that "
                f"of family {family!r}, which this run trains; drop the key or set the objective of that family.")
    return ConfigError(f"unknown config key '{where}{key}'.{hint}")


def _run_sections(data: dict[str, Any]) -> tuple[str, dict[str, type]]:
    """RunConfig's family and its polymorphic sections for ``data``: 'model' and 'data' (:func:`section_types`).
    A ``model.family`` that is not the objective's is refused here, before its sections are read."""
    from ptm_jax.families import registry

    model = data.get("model", {})
    family = model.get("family") if isinstance(model, dict) else None
    objective = data.get("objective", RunConfig.objective)
    if family is not None and not isinstance(family, str):
        raise ConfigError(f"model.family: expected str, got {family!r} ({type(family).__name__})")
    if not isinstance(objective, str):
        raise ConfigError(f"objective: expected str, got {objective!r} ({type(objective).__name__})")
    owner = registry.family_of_objective(objective).name
    if family is not None and family != owner:
        registry.get(family)  # an unknown family: the error lists the registered ones
        raise ConfigError(f"objective={objective!r} trains model.family={owner!r}, but model.family={family!r}; "
                          f"set model.family='{owner}' or pick the matching objective")
    model_cls, data_cls = section_types(owner, objective)
    return owner, {"model": model_cls, "data": data_cls}


LEGACY_MODEL_KEYS = frozenset({"type_vocab_size", "layer_norm_position", "mem_len", "clamp_len", "untie_r"})
"""Fields of the one flat ``[model]`` dataclass of earlier versions that only some families have; a saved
``ptm.json`` / ``config.json`` holds them for every family, so reading one back drops those the family lacks."""


def model_from_dict(data: dict[str, Any], where: str = "model") -> Any:
    """A saved ``[model]`` section (a params directory's ``ptm.json``, a run's ``config.json``) rebuilt with its
    family's dataclass (``Family.model_config``)."""
    from ptm_jax.families import registry

    family = data.get("family") if isinstance(data, dict) else None
    if not isinstance(family, str):
        raise ConfigError(f"{where}.family is missing or not a string ({data!r:.120}); the saved model section "
                          "must name its family")
    cls = registry.get(family).model_config
    names = {f.name for f in dataclasses.fields(cls)}
    return from_dict(cls, {k: v for k, v in data.items() if k in names or k not in LEGACY_MODEL_KEYS},
                     prefix=f"{where}.", family=family)


def from_dict(cls: type, data: dict[str, Any], prefix: str = "", family: str | None = None) -> Any:
    """Builds dataclass ``cls`` from a nested dict, checking every key and type. For a RunConfig the
    ``[model]`` and ``[data]`` dataclasses are the family's (:func:`section_types`); ``family`` names it in the
    messages of those sections."""
    hints = typing.get_type_hints(cls)
    sections: dict[str, type] = {}
    if cls is RunConfig:
        family, sections = _run_sections(data)
        hints = {**hints, **sections}
    fields = {f.name: f for f in dataclasses.fields(cls) if not (cls is RunConfig and f.name == "plugins")}
    plugins = _plugin_sections() if cls is RunConfig else {}
    kwargs: dict[str, Any] = {"plugins": {}} if cls is RunConfig else {}
    for key, value in data.items():
        if key in plugins:
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{key}: expected a table of {plugins[key].__name__} fields, got {value!r}")
            kwargs["plugins"][key] = from_dict(plugins[key], value, prefix=f"{prefix}{key}.")
            continue
        if key not in fields:
            raise _unknown_key(key, list(fields) + sorted(plugins), prefix, family)
        tp = hints[key]
        where = f"{prefix}{key}"
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table of {tp.__name__} fields, got {value!r}")
            kwargs[key] = from_dict(tp, value, prefix=f"{where}.", family=family if key in sections else None)
        elif typing.get_origin(tp) is list and dataclasses.is_dataclass(item := typing.get_args(tp)[0]):
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(f"{where}: expected a list of tables of {item.__name__} fields ([[{where}]] in "
                                  f"TOML), got {value!r:.120}")
            kwargs[key] = [from_dict(item, v, prefix=f"{where}[{i}].") for i, v in enumerate(value)]
        else:
            kwargs[key] = _coerce(value, tp, where)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    out = dataclasses.asdict(cfg)
    if isinstance(cfg, RunConfig):
        out.update(out.pop("plugins"))  # a plug-in's section is a top-level section, as in the TOML
    return out


def _plugin_sections() -> dict[str, type]:
    """Top-level sections owned by plug-ins (adapters, finetuning jobs) and by tasks or a family's finetuning
    (``data/tasks/sections.py``) -> their dataclasses."""
    from ptm_jax.adapters import registry as adapters
    from ptm_jax.data.tasks import sections as task_sections
    from ptm_jax.jobs import registry as jobs

    return {**adapters.sections(), **jobs.sections(), **task_sections.sections()}


def section(cfg: RunConfig, name: str) -> Any:
    """A plug-in's section of ``cfg`` (``RunConfig.plugins``), or its dataclass's defaults when the run sets none."""
    if name in cfg.plugins:
        return cfg.plugins[name]
    table = _plugin_sections()
    if name not in table:
        raise ConfigError(f"[{name}] is not a registered plug-in section (registered: {', '.join(sorted(table))})")
    return table[name]()


def bind_sections(cls: Any, cfg: RunConfig) -> Any:
    """``cls`` with the sections it reads bound from ``cfg``: an objective class names them in its
    ``config_sections`` (each the keyword argument of its constructor that takes that section), so the spine can
    build a family's objective (``Finetuning.classifier``, ``Finetuning.task_objectives``) without knowing them."""
    names = getattr(cls, "config_sections", ())
    return functools.partial(cls, **{n: section(cfg, n) for n in names}) if names else cls


def _parse_literal(text: str) -> Any:
    """Parses an override value as a Python/TOML literal; bare words are strings. Never evaluates code."""
    lowered = text.strip()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return ast.literal_eval(lowered)
    except (ValueError, SyntaxError):
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``a.b=value`` strings to a nested dict (keys are validated later by ``from_dict``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not of the form section.key=value (e.g. train.steps=100)")
        key, _, raw = item.partition("=")
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{p}' is a value, not a section")
        node[parts[-1]] = _parse_literal(raw)
    return data


def load_config(preset: str | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Preset (name in configs/ or path to a .toml) + overrides -> validated RunConfig."""
    data: dict[str, Any] = read_toml(preset_path(preset)) if preset else {}
    apply_overrides(data, list(overrides or []))
    cfg = from_dict(RunConfig, data)
    validate(cfg)
    return cfg


def validate(cfg: RunConfig) -> None:
    """Cross-field checks that types alone cannot express."""
    m, d, t = cfg.model, cfg.data, cfg.train
    from ptm_jax.families import registry

    fam = registry.get(m.family)  # a registered family, or a ConfigError listing them
    data_cls = fam.pretraining.data_config or DataConfig
    for section, value, want in (("model", m, fam.model_config), ("data", d, data_cls)):
        if not isinstance(value, want):
            raise ConfigError(f"{section}: a {type(value).__name__}, but model.family={m.family!r} reads its "
                              f"[{section}] section as {want.__name__}; build the section with that dataclass")
        if hasattr(value, "validate"):
            value.validate(section)
    positions = getattr(m, "max_position_embeddings", None)
    checks = [
        (positions is None or d.max_seq_length <= positions, f"data.max_seq_length={d.max_seq_length} exceeds "
         f"model.max_position_embeddings={positions}"),
        (t.batch_size > 0, f"train.batch_size must be positive, got {t.batch_size}"),
        (t.eval_batch_size >= 0, f"train.eval_batch_size must be >= 0 (0: train.batch_size), got "
         f"{t.eval_batch_size}"),
        (cfg.finetune.eval_batch_size >= 0, f"finetune.eval_batch_size must be >= 0 (0: finetune.batch_size), got "
         f"{cfg.finetune.eval_batch_size}"),
        (t.steps >= 0, f"train.steps must be >= 0, got {t.steps}"),
        (t.grad_accum_steps >= 1 and t.batch_size % t.grad_accum_steps == 0,
         f"train.batch_size={t.batch_size} must be a multiple of train.grad_accum_steps={t.grad_accum_steps}"),
        (t.learning_rate > 0, f"train.learning_rate must be positive, got {t.learning_rate}"),
        (cfg.tokenizer.min_count >= 1, f"tokenizer.min_count must be >= 1, got {cfg.tokenizer.min_count}"),
        (0 <= t.warmup_steps, f"train.warmup_steps must be >= 0, got {t.warmup_steps}"),
        (t.spike_factor == 0.0 or t.spike_factor > 1.0, f"train.spike_factor must be 0 (off) or > 1, got "
         f"{t.spike_factor}"),
        (t.spike_window >= 2, f"train.spike_window must be >= 2, got {t.spike_window}"),
        (t.prefetch_batches >= 0, f"train.prefetch_batches must be >= 0, got {t.prefetch_batches}"),
        (t.steps_per_call >= 1, f"train.steps_per_call must be >= 1, got {t.steps_per_call}"),
    ]
    for section, groups in (("train", t.param_groups), ("finetune", cfg.finetune.param_groups)):
        for i, g in enumerate(groups):
            where = f"{section}.param_groups[{i}]"
            checks += [(bool(g.pattern), f"{where}.pattern is empty; give a regular expression over parameter "
                        "paths such as 'encoder/layers_0/' or 'embeddings'"),
                       (g.lr >= 0 and g.weight_decay >= 0 and g.start_step >= 0, f"{where}: lr, weight_decay and "
                        f"start_step must be >= 0, got {g.lr}, {g.weight_decay}, {g.start_step}")]
            try:
                re.compile(g.pattern)
            except re.error as e:
                checks.append((False, f"{where}.pattern={g.pattern!r} is not a regular expression ({e})"))
    checks.append((0.0 <= t.min_lr_ratio <= 1.0, f"train.min_lr_ratio must be in [0, 1], got {t.min_lr_ratio}"))
    checks.append((t.adagrad_initial_accumulator >= 0, "train.adagrad_initial_accumulator must be >= 0, got "
                   f"{t.adagrad_initial_accumulator}"))
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    from ptm_jax.jobs import registry as jobs

    job = jobs.get(cfg.finetune.job)  # a registered job, or a ConfigError listing them
    was = jobs.job_of_task_value(cfg.finetune.task.lower())
    if was is not None:
        raise ConfigError(f"finetune.task={cfg.finetune.task!r} is not a task: {was.name} is a finetuning job; set "
                          f"finetune.job={was.name} (its settings in [{was.name}])")
    if cfg.finetune.adapter:
        from ptm_jax.adapters import registry as adapters

        adapters.get(cfg.finetune.adapter)  # a registered adapter, or a ConfigError listing them
        if not job.adapters:
            raise ConfigError(f"finetune.adapter={cfg.finetune.adapter!r} is not implemented for finetune.job="
                              f"{job.name!r} (jobs an adapter wraps: "
                              f"{', '.join(n for n, j in jobs.jobs().items() if j.adapters)}): set finetune.adapter=''")
    for name, value in cfg.plugins.items():
        if hasattr(value, "validate"):
            value.validate(name)
    family = registry.family_of_objective(cfg.objective).name
    if m.family != family:
        raise ConfigError(f"objective={cfg.objective!r} trains model.family={family!r}, but model.family="
                          f"{m.family!r}; set model.family='{family}' or pick the matching objective")
    for name in ("data", "fsdp", "tensor"):
        v = getattr(cfg.mesh, name)
        if v == 0 or v < -1:
            raise ConfigError(f"mesh.{name}={v}: use a positive size, or -1 for 'the remaining devices'")
