"""The table and plot of a ``ptm compare`` run, in the seeds' terms: static vs contextual word representations,
unidirectional vs bidirectional context, used as frozen features vs finetuned (Peters et al. 2018 Sec. 1-2;
Devlin et al. 2019 Sec. 1-2 and Table 7; Radford et al. 2018 Sec. 2).

``rows`` holds one dict per entry with every figure (``compare.json``), each finetuned entry followed by its
from-scratch row (the same network and finetuning from a random initialisation: ``from_scratch_of`` names the
entry); ``seeds_columns`` gives the headline table (``compare.md``): the budget each entry had and what it reached,
the CoNLL-2003 probes, and each GLUE task and CoNLL-2003 NER as feature extractor and finetuned, next to a row of
what the majority class (or a constant, or tagging every word O) scores on the same dev sets. Where a family
cannot do a column (no classifier or tagger to finetune), the cell says so. With several finetuning seeds a cell
is their mean and ``<column>_seeds`` holds each; :func:`pretraining_added` is the finetuned figure minus the
from-scratch one, marked where it exceeds the larger seed range.
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
    task_seeds,
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


def _task_cell(cmp: dict, entry: dict, task: str, mode: str) -> tuple[float | str, list[float]]:
    """(the cell: the mean over the task's seeds, or why there is none; each seed's figure)."""
    why = task_available(cmp, entry, task, mode)
    if why:
        return f"n/a ({why})", []
    values = []
    for seed in task_seeds(cmp, task):
        s = task_summary(cmp, entry, task, mode, seed)
        if s is None:
            return "not run", []
        values.append(float(s["final_eval"].get(s["primary_metric"], math.nan)))
    return sum(values) / len(values), values


def _put_task_cells(row: dict, cmp: dict, entry: dict, modes: dict[str, str]) -> None:
    """row[f"{column}_{task}"] (and ``_seeds`` with several seeds) for each (mode -> column prefix)."""
    for mode, column in modes.items():
        for task in compare_tasks(cmp, mode):
            row[f"{column}_{task}"], values = _task_cell(cmp, entry, task, mode)
            if len(values) > 1:
                row[f"{column}_{task}_seeds"] = values


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
    _put_task_cells(row, cmp, entry, {"feature": "feature", "finetune": "finetune"})
    return row


def scratch_row_of(cmp: dict, entry: dict) -> dict[str, Any] | None:
    """The entry's network finetuned from a random initialisation, in the finetuned columns (the same finetuning and
    seeds); None when the comparison has no from-scratch runs or the family finetunes on none of its tasks."""
    tasks = [t for t in compare_tasks(cmp, "scratch") if not task_available(cmp, entry, t, "scratch")]
    if not tasks:
        return None
    from ptm_jax.evaluate.features import family_of

    cfg = entry_config(cmp, entry)
    row: dict[str, Any] = {
        "entry": f"{entry['name']}, from scratch", "from_scratch_of": entry["name"],
        "family": family_of(cfg.model).name, "representation": "-",
        "direction": DIRECTIONS.get(entry.get("direction", ""), entry.get("direction", "?")),
        "note": "no pretraining: the same network and finetuning, random initialisation", "budget": "none",
        "steps": 0}
    _put_task_cells(row, cmp, entry, {"scratch": "finetune"})
    return row


def _range(row: dict, key: str) -> float:
    values = row.get(f"{key}_seeds") or []
    return max(values) - min(values) if values else 0.0


def added_columns(cmp: dict) -> list[tuple[str, str]]:
    """(key, header) of the table of what pretraining added: one column per finetuned task."""
    return [("entry", "entry")] + [(k, h.replace(" (finetune)", " added")) for k, h in seeds_columns(cmp)
                                   if k.startswith("finetune_")]


def pretraining_added(cmp: dict, rows: list[dict]) -> list[dict[str, Any]]:
    """Per finetuned entry with a from-scratch row: each finetuned figure minus the from-scratch one (``<column>``:
    the signed text, ``*`` where the gain exceeds the larger of the two seed ranges; ``<column>_value`` and
    ``<column>_spread`` the numbers)."""
    by_name = {r["entry"]: r for r in rows if not r.get("from_scratch_of")}
    out = []
    for scratch in (r for r in rows if r.get("from_scratch_of")):
        tuned = by_name[scratch["from_scratch_of"]]
        row: dict[str, Any] = {"entry": tuned["entry"]}
        for key, _ in added_columns(cmp)[1:]:
            a, b = tuned.get(key), scratch.get(key)
            if not (isinstance(a, float) and isinstance(b, float)):
                row[key] = a if isinstance(a, str) else (b if isinstance(b, str) else "")
                continue
            gain, spread = a - b, max(_range(tuned, key), _range(scratch, key))
            row[f"{key}_value"], row[f"{key}_spread"] = gain, spread
            row[key] = f"{gain:+.4f}" + ("*" if spread > 0 and gain > spread else "")
        out.append(row)
    return out


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

    probes = cmp.get("probe", {}).get("tasks", ["pos", "ner"])
    cols = [("entry", "entry"), ("representation", "static / contextual"), ("direction", "direction"),
            ("note", "objective"), ("budget", "budget"), ("steps", "steps reached"), ("train_s", "train s"),
            ("train_flops", "train FLOPs")]
    cols += [c for task, c in (("pos", ("probe_pos_acc", "POS probe acc (feature)")),
                               ("ner", ("probe_ner_f1", "NER probe F1 (feature)"))) if task in probes]
    for mode in ("feature", "finetune"):
        for t in compare_tasks(cmp, mode):
            metric = METRIC_NAMES.get("f1" if t == CONLL_TASK else PRIMARY.get(t, "accuracy"), "acc")
            cols.append((f"{mode}_{t}", f"{TASK_NAMES.get(t, t)} {metric} ({mode})"))
    return cols


SECONDS = ("train_s", "pretrain_s")


def cell_text(row: dict, key: str, digits: int = 4) -> str:
    """A table cell: seconds to 0.1, other figures to ``digits`` places; a mean over several seeds with their
    range, ``0.8123 [0.8080, 0.8165]``."""
    v = row.get(key)
    if isinstance(v, float):
        if key in SECONDS:
            return f"{v:.1f}"
        seeds = row.get(f"{key}_seeds")
        text = f"{v:.{digits}f}"
        return text + (f" [{min(seeds):.{digits}f}, {max(seeds):.{digits}f}]" if seeds else "")
    return "" if v is None else str(v)


def markdown_table(columns: list[tuple[str, str]], rows: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell_text(r, k) for k, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


COLORS = {("static", "window (no order)"): "tab:blue", ("static", "unidirectional"): "tab:cyan",
          ("contextual", "unidirectional"): "tab:orange", ("contextual", "bidirectional"): "tab:green"}


def plot(rows: list[dict], baseline: dict, columns: list[tuple[str, str]], path: Path, title: str) -> None:
    """One panel per task (probes, then each GLUE task): per entry a solid bar as feature extractor, a hatched bar
    finetuned and, where the entry has a from-scratch row, a pale bar for the same network finetuned from random
    initialisation (what pretraining added is the gap between the last two), coloured by representation and
    direction; a seed range is an error bar; the dashed line is the majority-class row."""
    from matplotlib.patches import Patch

    from ptm_jax.evaluate.plots import pyplot

    plt = pyplot()
    scratch = {r["from_scratch_of"]: r for r in rows if r.get("from_scratch_of")}
    rows = [r for r in rows if not r.get("from_scratch_of")]
    panels: list[tuple[str, str | None, str | None]] = [
        (label, key, None) for label, key in (("POS probe acc", "probe_pos_acc"), ("NER probe F1", "probe_ner_f1"))
        if any(key in r for r in rows)]
    for key, header in columns:
        if key.startswith("feature_"):
            task = key[len("feature_"):]
            ft = f"finetune_{task}"
            panels.append((header.replace(" (feature)", ""), key, ft if any(k == ft for k, _ in columns) else None))
    for key, header in columns:  # a task finetuned only (no feature column): its own panel
        if key.startswith("finetune_") and not any(k == "feature_" + key[len("finetune_"):] for k, _ in columns):
            panels.append((header.replace(" (finetune)", ""), None, key))
    n = len(panels)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    # at least two panels wide, so that the title and the legend fit above and below a single panel
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * max(ncols, 2), 3.3 * nrows), squeeze=False)
    names = [r["entry"] for r in rows]
    x = list(range(len(rows)))

    def num(v):
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    def bars(ax, offsets, source, key, colors, width, **style):
        vals = [num(r.get(key)) if r is not None else None for r in source]
        ax.bar(offsets, [v or 0.0 for v in vals], width, color=colors, **style)
        for o, r, v in zip(offsets, source, vals):
            seeds = (r or {}).get(f"{key}_seeds")
            if v is not None and seeds:
                ax.errorbar(o, v, yerr=[[v - min(seeds)], [max(seeds) - v]], color="black", linewidth=0.7,
                            capsize=2)
        return vals

    for ax, (label, fkey, tkey) in zip(axes.flat, panels):
        colors = [COLORS.get((r["representation"], r["direction"]), "tab:gray") for r in rows]
        kinds = [k for k in (fkey, tkey, tkey and scratch and "scratch") if k]
        width = 0.8 / len(kinds)
        offsets = {k: [i + (j - (len(kinds) - 1) / 2) * width for i in x] for j, k in enumerate(kinds)}
        if fkey:
            bars(ax, offsets[fkey], rows, fkey, colors, width)
        if tkey:
            vals = bars(ax, offsets[tkey], rows, tkey, colors, width, hatch="//", edgecolor="black", linewidth=0.5)
            for o, v in zip(offsets[tkey], vals):
                if v is None:
                    ax.text(o, 0.01, "n/a", ha="center", va="bottom", fontsize=6)
        if "scratch" in kinds:
            bars(ax, offsets["scratch"], [scratch.get(r["entry"]) for r in rows], tkey, colors, width, alpha=0.35,
                 edgecolor="black", linewidth=0.5)
        base = num(baseline.get(fkey or tkey))
        if base is not None:
            ax.axhline(base, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(label, fontsize=9)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    legend = [Patch(color=c, label=f"{rep}, {d}") for (rep, d), c in COLORS.items()
              if any((r["representation"], r["direction"]) == (rep, d) for r in rows)]
    if any(f for _, f, _ in panels if f and f.startswith("feature_")):
        legend.append(Patch(facecolor="white", edgecolor="black", label="solid: frozen features"))
    legend.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="hatched: finetuned"))
    if scratch:
        legend.append(Patch(facecolor="tab:gray", alpha=0.35, edgecolor="black",
                            label="pale: finetuned from scratch (no pretraining)"))
    fig.legend(handles=legend, loc="lower center", ncol=min(len(legend), 4), fontsize=7, frameon=False)
    fig.suptitle(title + "  (dashed: majority class" + ("; bars: seed range)" if any(
        k.endswith("_seeds") for r in rows for k in r) else ")"), fontsize=9)
    fig.tight_layout(rect=(0, 0.09 if scratch else 0.06, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
