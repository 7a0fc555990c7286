"""`ptm compare -c configs/compare/compare_*.toml`: several pretraining objectives, one corpus, one budget, one
table.

Each entry of the config names a preset (and overrides); every entry pretrains on the config's ``corpus``
through the one pretraining stage (``train/stages.py`` pretrain -> ``train/loop.py`` fit) for its
``train.steps``, then is read as a frozen feature extractor (``evaluate/features.py`` through
``Family.word_features`` / static ``word_vectors`` as one layer) by the linear probes of ``evaluate/probing.py``
on CoNLL-2003 (POS accuracy and NER entity F1, best layer; Tenney et al. 2019 / Liu et al. 2019's protocol).

The budget is the same number of train steps per entry, and the table states what that cost: the wall seconds
the pretraining took here (summed over resumed calls) and, where the family has a ``flops`` hook
(``bench/flops.py``), the analytic train FLOPs. Wall time is measured on whatever machine runs it (a shared one
is noisy); the config's ``budget`` line says which budget was meant.

Every stage is cached under ``output_dir/<entry>``: a finished pretraining (``pretrain/summary.json`` not
preempted) is skipped, a stopped one resumes from its orbax checkpoint (``fit`` does it), and a finished probe
(``probe.json``) is skipped, so rerunning a stopped comparison continues where it stopped. ``--stop-after N``
stops the first unfinished pretraining after N steps (with a checkpoint) and ends the command: the real stop
that tests use. Output: ``compare.json`` (rows, columns, config), ``compare.md`` (the table) and ``compare.png``.
Finetuning columns are not computed yet (the table says so).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import tomllib

from ptm_jax.errors import ConfigError

log = logging.getLogger(__name__)

COLUMNS = ["entry", "family", "objective", "representation", "direction", "steps", "pretrain_s", "train_flops",
           "final_loss", "feature_pos_acc", "feature_pos_layer", "feature_ner_f1", "feature_ner_layer", "finetune"]


def load_compare_config(path: str | Path) -> dict[str, Any]:
    """The [compare] TOML: output_dir, corpus, budget, [probe] settings and [[entries]] (name, preset,
    direction, overrides). A missing file or field is a ConfigError naming it."""
    from ptm_jax.presets import configs_dir

    p = Path(path)
    if not p.is_file() and (configs_dir() / "compare" / f"{path}.toml").is_file():
        p = configs_dir() / "compare" / f"{path}.toml"
    if not p.is_file():
        raise ConfigError(f"ptm compare -c {path}: no such file (and no configs/compare/{path}.toml)")
    try:
        cfg = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    for key in ("output_dir", "corpus", "entries"):
        if key not in cfg:
            raise ConfigError(f"{p}: missing top-level field {key!r} (see configs/compare/compare_tiny.toml)")
    names = [e.get("name") for e in cfg["entries"]]
    for i, e in enumerate(cfg["entries"]):
        if not e.get("name") or not e.get("preset"):
            raise ConfigError(f"{p}: entries[{i}] needs a name and a preset")
    if len(set(names)) != len(names):
        raise ConfigError(f"{p}: entry names must be unique, got {names}")
    cfg.setdefault("probe", {})
    cfg["source"] = str(p)
    return cfg


def entry_config(cmp: dict, entry: dict, overrides: list[str] = ()):
    from ptm_jax.config import load_config

    out = Path(cmp["output_dir"]) / entry["name"]
    return load_config(entry["preset"], [f"data.corpus={cmp['corpus']!r}", f"output_dir={str(out)!r}",
                                         *entry.get("overrides", []), *overrides])


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def pretrain_entry(cmp: dict, entry: dict, stop_after: int | None) -> dict:
    """Pretraining of one entry: skipped when finished (its summary is at train.steps), resumed from its
    checkpoint when stopped (``stop_after`` or SIGTERM). The wall seconds of every call add up in ``wall.json``."""
    from ptm_jax.train.stages import pretrain

    cfg = entry_config(cmp, entry)
    d = Path(cfg.output_dir)
    summary = _read(d / "pretrain" / "summary.json")
    if summary and summary["step"] >= cfg.train.steps:
        log.info("compare %s: pretraining finished before, skipped", entry["name"])
        return {"skipped": True, **summary}
    wall = _read(d / "wall.json") or {"pretrain_s": 0.0, "calls": 0}
    t0 = time.perf_counter()
    summary = pretrain(cfg, stop_after=stop_after)
    wall = {"pretrain_s": wall["pretrain_s"] + time.perf_counter() - t0, "calls": wall["calls"] + 1}
    (d / "wall.json").write_text(json.dumps(wall))
    return {"skipped": False, "stopped": summary["step"] < cfg.train.steps, **summary}


def probe_entry(cmp: dict, entry: dict) -> dict:
    """Frozen-feature probes of one entry (cached in ``probe.json``)."""
    from ptm_jax.evaluate.features import load_model
    from ptm_jax.evaluate.probing import ProbeSettings, probe

    d = Path(cmp["output_dir"]) / entry["name"]
    cached = _read(d / "probe.json")
    if cached:
        return cached
    pc = cmp["probe"]
    params, model_cfg, tok = load_model(str(d))
    settings = ProbeSettings(steps=pc.get("steps", 300), batch_size=pc.get("batch_size", 512),
                             learning_rate=pc.get("learning_rate", 1e-2), seed=pc.get("seed", 0))
    result = probe(params, model_cfg, tok, pc.get("data_dir", "../shared/data/conll2003"),
                   pc.get("tasks", ["pos", "ner"]), train_sentences=pc.get("train_sentences", 500),
                   dev_sentences=pc.get("dev_sentences", 300), settings=settings)
    (d / "probe.json").write_text(json.dumps(result, indent=2))
    return result


def _best(values: list[float]) -> tuple[float, int]:
    i = max(range(len(values)), key=values.__getitem__)
    return values[i], i


def row_of(cmp: dict, entry: dict) -> dict:
    from ptm_jax.evaluate.features import family_of

    cfg = entry_config(cmp, entry)
    d = Path(cfg.output_dir)
    family = family_of(cfg.model)
    summary = _read(d / "pretrain" / "summary.json") or {}
    probe_res = _read(d / "probe.json") or {"tasks": {}}
    row: dict[str, Any] = {
        "entry": entry["name"], "family": family.name, "objective": cfg.objective,
        "representation": "contextual" if family.word_features is not None else "static",
        "direction": entry.get("direction", "?"), "steps": summary.get("step"),
        "pretrain_s": round((_read(d / "wall.json") or {}).get("pretrain_s", 0.0), 1),
        "train_flops": "", "final_loss": next((summary.get("train", {})[k] for k in ("loss", "lm_loss", "mlm_loss")
                                          if k in summary.get("train", {})), None), "finetune": "not run"}
    if family.flops is not None:
        try:
            row["train_flops"] = f"{family.flops(cfg).train * cfg.train.steps:.3g}"  # bench/flops.py StepFlops
        except (AttributeError, TypeError, ValueError) as e:
            log.warning("compare %s: no train FLOPs (%s)", entry["name"], e)
    tasks = probe_res["tasks"]
    if "pos" in tasks:
        row["feature_pos_acc"], row["feature_pos_layer"] = _best(tasks["pos"]["accuracy"])
    if "ner" in tasks:
        row["feature_ner_f1"], row["feature_ner_layer"] = _best(tasks["ner"]["f1"])
    return row


def markdown_table(columns: list[str], rows: list[dict]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path, title: str) -> None:
    from ptm_jax.evaluate.plots import _save, pyplot

    plt = pyplot()
    names = [r["entry"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, label in ((axes[0], "feature_pos_acc", "POS probe accuracy (best layer)"),
                           (axes[1], "feature_ner_f1", "NER probe entity F1 (best layer)"),
                           (axes[2], "pretrain_s", "pretraining wall seconds")):
        ax.bar(names, [r.get(key) or 0.0 for r in rows],
               color=["tab:blue" if r["representation"] == "static" else "tab:orange" for r in rows])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.suptitle(title + "  (blue: static vectors, orange: contextual)", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def compare(path: str | Path, *, stop_after: int | None = None) -> dict:
    """Runs (or continues) the comparison of ``path``; returns compare.json's content, or {'stopped': entry}
    when ``stop_after`` stopped a pretraining."""
    cmp = load_compare_config(path)
    out = Path(cmp["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    for entry in cmp["entries"]:
        summary = pretrain_entry(cmp, entry, stop_after)
        if summary.get("stopped"):
            print(f"compare: {entry['name']} stopped at step {summary['step']} (checkpoint saved); run the same "
                  "command to continue")
            return {"stopped": entry["name"], "step": summary["step"]}
        probe_entry(cmp, entry)
    rows = [row_of(cmp, e) for e in cmp["entries"]]
    result = {"columns": COLUMNS, "rows": rows, "budget": cmp.get("budget", ""),
              "config": {k: v for k, v in cmp.items() if k != "source"}, "source": cmp["source"]}
    (out / "compare.json").write_text(json.dumps(result, indent=2))
    table = markdown_table(COLUMNS, rows)
    (out / "compare.md").write_text(table)
    plot(rows, out / "compare.png", cmp.get("name", out.name))
    print(table)
    return result


def cmd_compare(args: argparse.Namespace) -> int:
    compare(args.config, stop_after=args.stop_after)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="pretrain several objectives on one corpus and budget, probe each, one table",
        description="Pretrains each [[entries]] preset of the compare config on its corpus for the same number "
        "of steps (wall seconds and FLOPs reported), probes each as a frozen feature extractor on CoNLL-2003 "
        "(POS, NER), and writes OUTPUT_DIR/compare.json, compare.md and compare.png. Finished stages are "
        "skipped and stopped pretraining resumes, so rerunning continues a stopped comparison.")
    p.add_argument("-c", "--config", required=True, help="compare TOML (path, or a name in configs/compare/)")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop the first unfinished pretraining after N steps (checkpoint saved) and exit")
    p.set_defaults(handler=cmd_compare)
