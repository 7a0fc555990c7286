"""The table and plot of a ``ptm compare`` run, in the seeds' terms: static vs contextual word representations,
unidirectional vs bidirectional context, used as frozen features vs finetuned (Peters et al. 2018 Sec. 1-2;
Devlin et al. 2019 Sec. 1-2 and Table 7; Radford et al. 2018 Sec. 2).

``rows`` holds one dict per entry with every figure (``compare.json``); ``seeds_columns`` gives the headline table
(``compare.md``): the budget each entry had and what it reached, the CoNLL-2003 probes, and each GLUE task
and CoNLL-2003 NER as feature extractor and finetuned, next to a row of what the majority class (or a constant,
or tagging every word O) scores on the same dev sets. Where a family cannot do a column (no classifier or tagger
to finetune), the cell says so.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from ptm_jax.evaluate.compare_stages import (
    CONLL_TASK,
    compare_tasks,
    entry_config,
    entry_dir,
    read_json,
    task_available,
    task_summary,
)

log = logging.getLogger(__name__)

TASK_NAMES = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE", "cola": "CoLA", "qnli": "QNLI",
              "qqp": "QQP", "mnli": "MNLI", "wnli": "WNLI", CONLL_TASK: "CoNLL-2003 NER"}
METRIC_NAMES = {"accuracy": "acc", "f1": "F1", "spearman": "Spearman", "mcc": "MCC", "pearson": "Pearson"}
DIRECTIONS = {"unidirectional": "unidirectional", "bidirectional": "bidirectional",
              "window": "window (no order)"}
"""The values of an entry's ``direction`` and how the table writes them."""


def _best(values: list[float]) -> tuple[float, int]:
    i = max(range(len(values)), key=values.__getitem__)
    return values[i], i


def _task_cell(cmp: dict, entry: dict, task: str, mode: str) -> float | str:
    why = task_available(cmp, entry, task, mode)
    if why:
        return f"n/a ({why})"
    s = task_summary(cmp, entry, task, mode)
    if s is None:
        return "not run"
    return float(s["final_eval"].get(s["primary_metric"], math.nan))


def row_of(cmp: dict, entry: dict) -> dict[str, Any]:
    from ptm_jax.evaluate.features import family_of

    cfg = entry_config(cmp, entry)
    d = entry_dir(cmp, entry)
    family = family_of(cfg.model)
    summary = read_json(d / "pretrain" / "summary.json") or {}
    budget = read_json(d / "budget.json") or {}
    probe_res = read_json(d / "probe.json") or {"tasks": {}}
    train = summary.get("train", {})
    steps = summary.get("step")
    flops = budget.get("flops_per_step")
    row: dict[str, Any] = {
        "entry": entry["name"], "family": family.name, "objective": cfg.objective,
        "representation": "contextual" if family.inspection.word_features is not None else "static",
        "direction": DIRECTIONS.get(entry.get("direction", ""), entry.get("direction", "?")),
        "note": entry.get("note", ""),
        "budget": (f"{budget['target_steps']} steps" if budget.get("target_steps") else
                   f"{budget['budget_s']:g} s" if budget.get("budget_s") else f"{cfg.train.steps} steps"),
        "steps": steps, "max_steps": cfg.train.steps, "train_s": round(budget.get("spent_s", 0.0), 1),
        "pretrain_s": round(budget.get("pretrain_s", 0.0), 1),
        "train_flops": f"{flops * steps:.3g}" if flops and steps else "",
        "flops_source": budget.get("flops_source", ""),
        "final_loss": next((train[k] for k in ("loss", "lm_loss", "mlm_loss") if k in train), None),
        "heldout_loss": next((v for k, v in (summary.get("eval") or {}).items() if k in ("lm_loss", "mlm_loss")),
                             None)}
    tasks = probe_res["tasks"]
    if "pos" in tasks:
        row["probe_pos_acc"], row["probe_pos_layer"] = _best(tasks["pos"]["accuracy"])
    if "ner" in tasks:
        row["probe_ner_f1"], row["probe_ner_layer"] = _best(tasks["ner"]["f1"])
    for mode in ("feature", "finetune"):
        for task in compare_tasks(cmp, mode):
            row[f"{mode}_{task}"] = _task_cell(cmp, entry, task, mode)
    return row


def baseline_row(cmp: dict) -> dict[str, Any]:
    """What the majority class of the training subset (STS-B: a constant, no correlation) scores on each dev set,
    and the probes' majority tag, as one row of the table."""
    from ptm_jax.data.tasks.glue import read_glue
    from ptm_jax.evaluate.glue_metrics import task_metrics
    from ptm_jax.objectives.classification import PRIMARY
    from ptm_jax.objectives.finetune_registry import take_subset

    row: dict[str, Any] = {"entry": "majority class", "representation": "-", "direction": "-", "budget": "-"}
    probes = [read_json(entry_dir(cmp, e) / "probe.json") for e in cmp["entries"]]
    probe = next((p for p in probes if p), None)
    if probe and "pos" in probe["tasks"]:
        row["probe_pos_acc"] = probe["tasks"]["pos"]["majority_baseline"]
    if probe and "ner" in probe["tasks"]:
        row["probe_ner_f1"] = 0.0
    if cmp.get("conll"):  # tagging every word O finds no entity
        row[f"feature_{CONLL_TASK}"] = row[f"finetune_{CONLL_TASK}"] = 0.0
    g = cmp.get("glue")
    if not g:
        return row
    for task in dict.fromkeys([*g["tasks"], *g["finetune_tasks"]]):
        try:
            train = take_subset(read_glue(g["data_dir"], task, "train")[0], int(g.get("train_subset", 0)),
                                int(g.get("subset_seed", 0)))
            dev = read_glue(g["data_dir"], task, "dev")[0]
        except Exception as e:  # noqa: BLE001 - the row stays without it; the run's own figures are unaffected
            log.warning("compare: no majority baseline for %s (%s)", task, e)
            continue
        if task == "stsb":
            value = 0.0
        else:
            labels = [e.label for e in train]
            major = max(set(labels), key=labels.count)
            value = task_metrics(task, [major] * len(dev), [e.label for e in dev])[PRIMARY.get(task, "accuracy")]
        for mode in ("feature", "finetune"):
            row[f"{mode}_{task}"] = float(value)
    return row


def seeds_columns(cmp: dict) -> list[tuple[str, str]]:
    """(key, header) of the headline table."""
    from ptm_jax.objectives.classification import PRIMARY

    cols = [("entry", "entry"), ("representation", "static / contextual"), ("direction", "direction"),
            ("note", "objective"), ("budget", "budget"), ("steps", "steps reached"), ("train_s", "train s"),
            ("train_flops", "train FLOPs"), ("probe_pos_acc", "POS probe acc (feature)"),
            ("probe_ner_f1", "NER probe F1 (feature)")]
    for mode in ("feature", "finetune"):
        for t in compare_tasks(cmp, mode):
            metric = METRIC_NAMES.get("f1" if t == CONLL_TASK else PRIMARY.get(t, "accuracy"), "acc")
            cols.append((f"{mode}_{t}", f"{TASK_NAMES.get(t, t)} {metric} ({mode})"))
    return cols


SECONDS = ("train_s", "pretrain_s")


def markdown_table(columns: list[tuple[str, str]], rows: list[dict]) -> str:
    def cell(k: str, v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.1f}" if k in SECONDS else f"{v:.4f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(k, r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


COLORS = {("static", "window (no order)"): "tab:blue", ("static", "unidirectional"): "tab:cyan",
          ("contextual", "unidirectional"): "tab:orange", ("contextual", "bidirectional"): "tab:green"}


def plot(rows: list[dict], baseline: dict, columns: list[tuple[str, str]], path: Path, title: str) -> None:
    """One panel per task (probes, then each GLUE task): per entry a solid bar as feature extractor and a hatched
    bar finetuned, coloured by representation and direction; the dashed line is the majority-class row."""
    from matplotlib.patches import Patch

    from ptm_jax.evaluate.plots import pyplot

    plt = pyplot()
    panels: list[tuple[str, str | None, str | None]] = [("POS probe acc", "probe_pos_acc", None),
                                                        ("NER probe F1", "probe_ner_f1", None)]
    for key, header in columns:
        if key.startswith("feature_"):
            task = key[len("feature_"):]
            ft = f"finetune_{task}"
            panels.append((header.replace(" (feature)", ""), key, ft if any(k == ft for k, _ in columns) else None))
    n = len(panels)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False)
    names = [r["entry"] for r in rows]
    x = list(range(len(rows)))

    def num(v):
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    for ax, (label, fkey, tkey) in zip(axes.flat, panels):
        colors = [COLORS.get((r["representation"], r["direction"]), "tab:gray") for r in rows]
        width = 0.38 if tkey else 0.7
        ax.bar([i - (width / 2 if tkey else 0) for i in x], [num(r.get(fkey)) or 0.0 for r in rows], width,
               color=colors)
        if tkey:
            vals = [num(r.get(tkey)) for r in rows]
            ax.bar([i + width / 2 for i in x], [v or 0.0 for v in vals], width, color=colors, hatch="//",
                   edgecolor="black", linewidth=0.5)
            for i, v in enumerate(vals):
                if v is None:
                    ax.text(i + width / 2, 0.01, "n/a", ha="center", va="bottom", fontsize=6)
        base = num(baseline.get(fkey))
        if base is not None:
            ax.axhline(base, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(label, fontsize=9)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    legend = [Patch(color=c, label=f"{rep}, {d}") for (rep, d), c in COLORS.items()
              if any((r["representation"], r["direction"]) == (rep, d) for r in rows)]
    legend += [Patch(facecolor="white", edgecolor="black", label="solid: frozen features"),
               Patch(facecolor="white", edgecolor="black", hatch="//", label="hatched: finetuned")]
    fig.legend(handles=legend, loc="lower center", ncol=min(len(legend), 6), fontsize=7, frameon=False)
    fig.suptitle(title + "  (dashed: majority class)", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
