"""`ptm compare -c configs/compare/compare_*.toml`: several pretraining objectives, one corpus, one budget, one
set of tasks, one table.

Each ``[[entries]]`` item names a preset (and overrides); every entry is pretrained on the config's ``corpus``
under the same budget, then evaluated on the same tasks as a frozen feature extractor and, where its family has
a classifier, finetuned (``evaluate/compare_stages.py``):

* pretraining: ``budget_s`` wall seconds of training steps per entry (an entry may set its own), or
  ``train.steps`` when ``budget_s`` is 0; the steps reached are recorded, and ``--steps-from OLD/compare.json``
  retrains every entry to exactly those steps (the same examples and schedule: the comparison reproduced
  without depending on the machine's speed). FLOPs per step come from the family's formula or XLA's count.
* probes: linear probes per layer on CoNLL-2003 POS and NER (frozen features, best layer);
* ``[glue]``: each of ``tasks`` (SST-2, MRPC, STS-B, RTE ...) on frozen features under a classic head
  (``feature`` overrides, e.g. ``features.head=textcnn``), and each of ``finetune_tasks`` finetuned with the
  family's own classifier (``finetune`` overrides), on ``train_subset`` training examples and the full dev set.
* ``[conll]``: CoNLL-2003 NER (``data_dir`` with eng.train and eng.testa) on frozen features under a BiLSTM
  tagger (``feature`` overrides) and, where the family has a tagger, finetuned (``finetune`` overrides), on
  ``train_subset`` training sentences; entity F1 on the dev set (eng.testa).
* from scratch (``from_scratch = true``, the default): every finetuned task of every entry again with the same
  network, tokenizer, settings and seeds from a random initialisation (``finetune.from_scratch``): one more row
  per finetuned entry, and a table of what pretraining added (finetuned minus from scratch).
* ``seeds`` in ``[glue]`` or ``[conll]`` (default [0]): each task run once per finetuning seed
  (``finetune.seed``); a cell is the mean over the seeds, with their range. ``scratch`` there: overrides for the
  from-scratch runs alone, after ``finetune`` (settings chosen for them; default none, the same finetuning).
* ``[probe] tasks = []``: no probes.

Everything the comparison needs of a family comes from the registry (word features or vectors, the classifier,
FLOPs); no family is named here. Every stage is cached under ``output_dir/<entry>``: a finished stage is
skipped, a stopped one resumes from its checkpoint with the budget it has left, so rerunning a stopped
comparison continues where it stopped. ``--stop-after N`` stops the first unfinished pretraining after N steps
(with a checkpoint) and ends the command: the real stop that tests use; SIGTERM stops any training stage the
same way. Output: ``compare.json`` (every figure, config), ``compare.md`` (the table in the seeds' terms: static
vs contextual, unidirectional vs bidirectional, feature vs finetune, with a from-scratch row per finetuned entry
and a majority-class row, then what pretraining added) and ``compare.png``.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import tomllib

from ptm_jax.errors import ConfigError
from ptm_jax.evaluate.compare_stages import (
    MODES,
    compare_tasks,
    pretrain_entry,
    probe_entry,
    step_flops,
    task_available,
    task_entry,
    task_seeds,
)
from ptm_jax.evaluate.compare_table import (
    DIRECTIONS,
    added_columns,
    baseline_row,
    markdown_table,
    plot,
    pretraining_added,
    row_of,
    scratch_row_of,
    seeds_columns,
)

log = logging.getLogger(__name__)

ENTRY_KEYS = {"name", "preset", "direction", "note", "overrides", "budget_s", "glue_feature", "glue_finetune",
              "conll_feature", "conll_finetune"}
GLUE_KEYS = {"data_dir", "tasks", "finetune_tasks", "train_subset", "subset_seed", "feature", "finetune", "seeds",
             "scratch"}
CONLL_KEYS = {"data_dir", "train_subset", "subset_seed", "feature", "finetune", "seeds", "scratch"}


def load_compare_config(path: str | Path) -> dict[str, Any]:
    """The compare TOML: output_dir, corpus, budget (a sentence), budget_s, [probe], [glue] and [[entries]]
    (name, preset, direction, note, overrides, budget_s). A missing file or a wrong field is a ConfigError
    naming it."""
    from ptm_jax.presets import configs_dir
    from ptm_jax.train.finetune import GLUE_DIRS

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
        unknown = sorted(set(e) - ENTRY_KEYS)
        if unknown:
            raise ConfigError(f"{p}: entries[{i}] ({e['name']}) has unknown field(s) {unknown}; known: "
                              f"{', '.join(sorted(ENTRY_KEYS))}")
        if e.get("direction", "") not in DIRECTIONS:
            raise ConfigError(f"{p}: entries[{i}] ({e['name']}) direction={e.get('direction')!r}: write one of "
                              f"{', '.join(DIRECTIONS)} (what context a word's representation sees)")
    if len(set(names)) != len(names):
        raise ConfigError(f"{p}: entry names must be unique, got {names}")
    if float(cfg.get("budget_s", 0) or 0) < 0:
        raise ConfigError(f"{p}: budget_s={cfg['budget_s']} must be >= 0 (0: each entry's train.steps)")
    if not isinstance(cfg.setdefault("from_scratch", True), bool):
        raise ConfigError(f"{p}: from_scratch={cfg['from_scratch']!r} must be true (a from-scratch row per finetuned "
                          "entry) or false")
    cfg.setdefault("probe", {})
    g = cfg.get("glue")
    if g is not None:
        unknown = sorted(set(g) - GLUE_KEYS)
        if unknown or "data_dir" not in g:
            raise ConfigError(f"{p}: [glue] needs data_dir and takes only {', '.join(sorted(GLUE_KEYS))}"
                              + (f"; unknown: {unknown}" if unknown else ""))
        g.setdefault("tasks", ["sst2", "mrpc", "stsb", "rte"])
        g.setdefault("finetune_tasks", list(g["tasks"]))
        for t in [*g["tasks"], *g["finetune_tasks"]]:
            if t not in GLUE_DIRS:
                raise ConfigError(f"{p}: [glue] task {t!r} is not a GLUE task ({', '.join(GLUE_DIRS)})")
    c = cfg.get("conll")
    if c is not None:
        unknown = sorted(set(c) - CONLL_KEYS)
        if unknown or "data_dir" not in c:
            raise ConfigError(f"{p}: [conll] needs data_dir (the CoNLL-2003 folder with eng.train and eng.testa) "
                              f"and takes only {', '.join(sorted(CONLL_KEYS))}"
                              + (f"; unknown: {unknown}" if unknown else ""))
    for name in ("glue", "conll"):
        seeds = (cfg.get(name) or {}).get("seeds", [0])
        if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) and s >= 0 for s in seeds)
                and len(set(seeds)) == len(seeds)):
            raise ConfigError(f"{p}: [{name}] seeds={seeds!r}: write a list of distinct finetuning seeds >= 0, "
                              "e.g. [0, 1, 2]")
    cfg["source"] = str(p)
    return cfg


def _steps_from(path: str | Path) -> dict[str, int]:
    p = Path(path)
    if p.is_dir():
        p = p / "compare.json"
    try:
        rows = json.loads(p.read_text())["rows"]
        return {r["entry"]: int(r["steps"]) for r in rows if r.get("steps") and not r.get("from_scratch_of")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--steps-from {path}: not a ptm compare result with the steps of each entry ({e})") from e


def compare(path: str | Path | dict, *, stop_after: int | None = None, steps_from: str | Path | None = None,
            output_dir: str | Path | None = None) -> dict:
    """Runs (or continues) the comparison of ``path`` (or of a config :func:`load_compare_config` returned);
    returns compare.json's content, or {'stopped': entry, ...} when a stage stopped before its end (``stop_after``
    or SIGTERM)."""
    cmp = dict(path) if isinstance(path, dict) else load_compare_config(path)
    if output_dir is not None:
        cmp["output_dir"] = str(output_dir)
    targets = _steps_from(steps_from) if steps_from else {}
    if targets:
        missing = [e["name"] for e in cmp["entries"] if e["name"] not in targets]
        if missing:
            raise ConfigError(f"--steps-from {steps_from}: has no steps for entries {missing}")
    out = Path(cmp["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    for entry in cmp["entries"]:
        summary = pretrain_entry(cmp, entry, stop_after, targets.get(entry["name"], 0))
        if summary.get("stopped"):
            print(f"compare: {entry['name']} stopped at step {summary['step']} (checkpoint saved); run the same "
                  "command to continue")
            return {"stopped": entry["name"], "step": summary["step"]}
        step_flops(cmp, entry)
        probe_entry(cmp, entry)
        for mode in MODES:
            for task in compare_tasks(cmp, mode):
                if task_available(cmp, entry, task, mode):
                    continue
                for seed in task_seeds(cmp, task):
                    s = task_entry(cmp, entry, task, mode, seed)
                    if s.get("preempted"):
                        print(f"compare: {entry['name']} {task} ({mode}, seed {seed}) stopped at step {s['step']}; "
                              "run the same command to continue")
                        return {"stopped": entry["name"], "stage": f"{mode}-{task}", "seed": seed, "step": s["step"]}
    rows = []
    for e in cmp["entries"]:
        rows.append(row_of(cmp, e))
        scratch = scratch_row_of(cmp, e)
        rows += [scratch] if scratch else []
    baseline = baseline_row(cmp)
    columns = seeds_columns(cmp)
    added = pretraining_added(cmp, rows)
    result = {"columns": [k for k, _ in columns], "headers": [h for _, h in columns], "rows": rows,
              "baseline": baseline, "added": added, "added_headers": [h for _, h in added_columns(cmp)],
              "budget": cmp.get("budget", ""), "config": {k: v for k, v in cmp.items() if k != "source"},
              "source": cmp["source"]}
    (out / "compare.json").write_text(json.dumps(result, indent=2))
    table = markdown_table(columns, [*rows, baseline])
    if added:
        table += ("\nWhat pretraining added: the finetuned figure minus the same network's from scratch (same "
                  "finetuning and seeds); * where it exceeds the larger of the two seed ranges.\n\n"
                  + markdown_table(added_columns(cmp), added))
    (out / "compare.md").write_text(table)
    plot(rows, baseline, columns, out / "compare.png", cmp.get("name", out.name))
    print(table)
    return result
