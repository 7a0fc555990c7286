"""The stages of one ``ptm compare`` entry, each cached under ``output_dir/<entry>`` and resumable.

1. **Pretraining** (:func:`pretrain_entry`) through ``ptm pretrain``'s stage (``train/stages.py``) under the
   entry's budget (:class:`Budget`): ``budget_s`` wall seconds of training steps, or a number of steps
   (``train.steps``, or the steps a recorded comparison reached: ``ptm compare --steps-from``). The wall clock
   starts after the first step of each call (that step holds the XLA compile) and adds up over calls in
   ``budget.json``, with the steps reached; the learning-rate schedule is laid over ``train.steps`` (an upper
   bound), so rerunning the same entry with ``--steps-from`` trains exactly the same steps on the same examples
   and reproduces the parameters. A stopped call (``--stop-after``, SIGTERM) resumes from its checkpoint with the
   budget left.
2. **Probes** (:func:`probe_entry`): linear probes per layer on CoNLL-2003 (``evaluate/probing.py``), frozen.
3. **Tasks on frozen features** (:func:`task_entry` with ``mode='feature'``): each ``[glue]`` task under a
   classic head over the entry's frozen word features (``objectives/feature_tasks.py``: static vectors through a
   frozen table, per-layer features through the scalar mix; pairs through the same head,
   ``[u; v; |u - v|; u * v]``), and CoNLL-2003 NER (``[conll]``) under a BiLSTM tagger over the same features.
4. **Tasks finetuned** (``mode='finetune'``): each ``[glue]`` task with the family's own classifier
   (``Finetuning.classifier``: BERT's pooled [CLS], GPT's input transformations, XLNet's <cls> summary), and
   CoNLL-2003 with the family's own tagger (``Finetuning.tasks['conll2003']``), trained end to end from the entry's
   pretraining through ``ptm finetune``'s stage; an entry whose family has none gets no finetuned cell.
5. **The same finetuning from scratch** (``mode='scratch'``, unless the config sets ``from_scratch = false``):
   every finetuned task again on the same network and tokenizer from a random initialisation
   (``finetune.from_scratch``), with the same settings and seeds: what pretraining added is the difference.

Stages 3-5 run ``fit`` in ``<entry>/<section>-<mode>[-seed<s>]/finetune-<task>[-from-scratch]`` (section ``glue``
or ``conll``; one run per finetuning seed of the section's ``seeds``, the folder without suffix for seed 0): a
finished one (``summary.json`` at its last step) is skipped, a stopped one resumes from its checkpoint. Each figure
is the dev metric after the last step (no selection on dev).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from ptm_jax.train.hooks import Hook, Run

log = logging.getLogger(__name__)

GLUE_TASKS = ("sst2", "mrpc", "stsb", "rte")
MODES = ("feature", "finetune", "scratch")
"""Task modes: frozen features, finetuned from the entry's pretraining, finetuned from random initialisation."""


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def entry_dir(cmp: dict, entry: dict) -> Path:
    return Path(cmp["output_dir"]) / entry["name"]


def entry_config(cmp: dict, entry: dict, overrides: list[str] = ()):
    from ptm_jax.config_loading import load_config

    out = entry_dir(cmp, entry)
    return load_config(entry["preset"], [f"data.corpus={cmp['corpus']!r}", f"output_dir={str(out)!r}",
                                         *entry.get("overrides", []), *overrides])


# ---------------------------------------------------------------------------------------------- pretraining

class Budget(Hook):
    """Stops pretraining when the budget is spent: ``seconds`` of wall clock over all calls (``spent`` before
    this one; the clock starts after this call's first step, which compiles), or at step ``steps``. The step it
    stops at gets a held-out evaluation and a checkpoint, so the stage ends as a finished one would."""

    def __init__(self, seconds: float = 0.0, steps: int = 0, spent: float = 0.0):
        self.seconds, self.steps, self.spent = float(seconds), int(steps), float(spent)
        self.t0: float | None = None
        self.reached = False
        self.final: float | None = None
        self.last: float | None = None
        """The seconds spent when this call's last step ended (before the stop's evaluation and checkpoint)."""

    def elapsed(self) -> float:
        if self.final is not None:
            return self.final
        return self.spent + (time.perf_counter() - self.t0 if self.t0 is not None else 0.0)

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()
        self.last = self.elapsed()  # before this step's checkpoint (a later hook) is written
        if (self.seconds > 0 and self.elapsed() >= self.seconds) or (self.steps > 0 and run.step >= self.steps):
            self.reached, self.final = True, self.elapsed()
            run.stop = "budget"
            run.writer.log(f"budget reached at step {run.step} ({self.elapsed():.1f} s of training)")
            from ptm_jax.train.hooks import Evaluation

            ev = next((h for h in run.hooks if isinstance(h, Evaluation)), None)
            if ev is not None and (ev.every <= 0 or run.step % ev.every):  # the held-out figures at this step
                run.last_eval = ev.evaluate(run.state.params)
                run.writer.write(run.step, "eval", run.last_eval)

    def on_stop(self, run: Run) -> None:
        if self.final is None:
            self.final = self.last if self.last is not None else self.spent
        if self.reached and run.ckpt.latest_step() != run.step:
            run.save()


def pretrain_done(cmp: dict, entry: dict) -> bool:
    cfg = entry_config(cmp, entry)
    d = Path(cfg.output_dir)
    summary, budget = read_json(d / "pretrain" / "summary.json"), read_json(d / "budget.json")
    return bool(summary) and not summary.get("preempted") and (
        summary["step"] >= cfg.train.steps or bool(budget and budget.get("done")))


def pretrain_entry(cmp: dict, entry: dict, stop_after: int | None = None, target_steps: int = 0) -> dict:
    """Pretraining of one entry under its budget (module doc): skipped when done, resumed when stopped.
    ``target_steps`` > 0 replaces the wall budget by that step (``--steps-from``). Returns the stage summary
    with 'stopped' (this call ended before the budget: resume by calling again) or 'skipped'."""
    from ptm_jax.train.stages import pretrain

    cfg = entry_config(cmp, entry)
    d = Path(cfg.output_dir)
    if pretrain_done(cmp, entry):
        log.info("compare %s: pretraining finished before, skipped", entry["name"])
        return {"skipped": True, **read_json(d / "pretrain" / "summary.json")}
    seconds = 0.0 if target_steps else float(entry.get("budget_s", cmp.get("budget_s", 0)) or 0)
    state = read_json(d / "budget.json") or {"spent_s": 0.0, "calls": 0, "pretrain_s": 0.0}
    hook = Budget(seconds, target_steps, state["spent_s"])
    t0 = time.perf_counter()
    summary = pretrain(cfg, stop_after=stop_after, hooks=[hook])
    done = hook.reached or (summary["step"] >= cfg.train.steps and not summary["preempted"])
    state = {"budget_s": seconds, "target_steps": target_steps, "max_steps": cfg.train.steps,
             "spent_s": round(hook.elapsed(), 3), "steps": summary["step"], "done": done,
             "calls": state["calls"] + 1, "pretrain_s": round(state["pretrain_s"] + time.perf_counter() - t0, 3),
             **{k: state[k] for k in ("flops_per_step", "flops_source") if k in state}}
    (d / "budget.json").write_text(json.dumps(state, indent=2))
    return {"skipped": False, "stopped": not done, **summary}


def xla_step_flops(cfg) -> float:
    """XLA's matmul FLOPs (``bench/flops.hlo_matmul_flops``, scanned loops counted in full) of the train step the
    entry ran, compiled once more over its own corpus (tokenizer and token cache reused), summed over devices."""
    from ptm_jax.bench.flops import hlo_matmul_flops
    from ptm_jax.bench.harness import batch_specs, rng_spec
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.loop import compile_objective
    from ptm_jax.train.stages import prepare_corpus

    objective = build_objective(cfg, prepare_corpus(cfg))
    mesh = make_mesh(cfg.mesh)
    compiled = compile_objective(objective, cfg.train, mesh)
    example = objective.example_batch(cfg.train.batch_size)
    lowered = compiled.train_step.lower(compiled.abstract_state, batch_specs(example, mesh), rng_spec(mesh))
    return hlo_matmul_flops(lowered.compile().as_text()) * mesh.devices.size


def step_flops(cmp: dict, entry: dict) -> tuple[float | None, str]:
    """FLOPs of one train step: the family's formula (``Bench.flops``), else XLA's matmul count of the compiled
    step (:func:`xla_step_flops`, one extra compile); cached in budget.json."""
    from ptm_jax.families import registry

    cfg = entry_config(cmp, entry)
    path = Path(cfg.output_dir) / "budget.json"
    state = read_json(path) or {}
    if "flops_per_step" in state:
        return state["flops_per_step"], state["flops_source"]
    fam = registry.get(cfg.model.family)
    value, source = None, "none"
    try:
        if fam.bench.flops is not None:
            value, source = float(fam.bench.flops(cfg).train), "formula"
        else:
            value, source = xla_step_flops(cfg), "xla_matmul"
    except Exception as e:  # a family whose step the bench cannot build: the table says so
        log.warning("compare %s: no FLOPs per step (%s: %s)", entry["name"], type(e).__name__, e)
    if state:
        path.write_text(json.dumps({**state, "flops_per_step": value, "flops_source": source}, indent=2))
    return value, source


# ---------------------------------------------------------------------------------------------- probes

def probe_entry(cmp: dict, entry: dict) -> dict:
    """Frozen-feature probes of one entry (cached in ``probe.json``)."""
    from ptm_jax.evaluate.features import load_model
    from ptm_jax.evaluate.probing import ProbeSettings, probe

    d = entry_dir(cmp, entry)
    cached = read_json(d / "probe.json")
    if cached:
        return cached
    pc = cmp["probe"]
    if not pc.get("tasks", ["pos", "ner"]):  # [probe] tasks = []: no probes
        return {"tasks": {}}
    params, model_cfg, tok = load_model(str(d / "pretrain"))
    settings = ProbeSettings(steps=pc.get("steps", 300), batch_size=pc.get("batch_size", 512),
                             learning_rate=pc.get("learning_rate", 1e-2), seed=pc.get("seed", 0))
    result = probe(params, model_cfg, tok, pc.get("data_dir", "../shared/data/conll2003"),
                   pc.get("tasks", ["pos", "ner"]), train_sentences=pc.get("train_sentences", 500),
                   dev_sentences=pc.get("dev_sentences", 300), settings=settings)
    (d / "probe.json").write_text(json.dumps(result, indent=2))
    return result


# ---------------------------------------------------------------------------------------------- tasks

CONLL_TASK = "conll2003"


def task_section(task: str) -> str:
    """The compare config section that holds a task's data and overrides: ``conll`` for CoNLL-2003, else ``glue``."""
    return "conll" if task == CONLL_TASK else "glue"


def compare_tasks(cmp: dict, mode: str) -> list[str]:
    """The tasks of ``mode`` ('feature', 'finetune', 'scratch'): the ``[glue]`` ones, then CoNLL-2003 when
    ``[conll]`` is set; none from scratch when the config sets ``from_scratch = false``."""
    if mode == "scratch" and not cmp.get("from_scratch", True):
        return []
    g = cmp.get("glue")
    tasks = list(g["tasks"] if mode == "feature" else g["finetune_tasks"]) if g else []
    return tasks + ([CONLL_TASK] if cmp.get("conll") else [])


def task_seeds(cmp: dict, task: str) -> list[int]:
    """The finetuning seeds (``finetune.seed``) of a task's section (``seeds``, default [0])."""
    return [int(s) for s in cmp[task_section(task)].get("seeds", [0])]


def task_available(cmp: dict, entry: dict, task: str, mode: str) -> str:
    """'' when ``task`` in ``mode`` applies to the entry's family, else why not (the registry's hooks: word
    features or vectors for 'feature'; ``Finetuning.classifier`` for a finetuned GLUE task, ``Finetuning.tasks`` for
    finetuned CoNLL-2003)."""
    from ptm_jax.evaluate.features import supports_features
    from ptm_jax.families import registry

    cfg = entry_config(cmp, entry)
    if mode == "feature":
        return "" if supports_features(cfg.model) else "no word features"
    family = registry.get(cfg.model.family)  # 'finetune' and 'scratch': the same classifier or tagger
    if task == CONLL_TASK:
        return "" if CONLL_TASK in family.finetuning.tasks else "no tagger"
    return "" if family.finetuning.classifier is not None else "no classifier"


def task_dir(cmp: dict, entry: dict, task: str, mode: str, seed: int = 0) -> Path:
    """The stage folder of one task run (module doc)."""
    runs = f"{task_section(task)}-{mode}" + (f"-seed{seed}" if seed else "")
    return entry_dir(cmp, entry) / runs / (f"finetune-{task}" + ("-from-scratch" if mode == "scratch" else ""))


def task_config(cmp: dict, entry: dict, task: str, mode: str, seed: int = 0):
    """The run config of one task run: the section's data and overrides, then the entry's, then the seed; the
    from-scratch run takes the finetuned run's overrides (the same finetuning) with ``finetune.from_scratch``, and
    the section's ``scratch`` overrides last (settings chosen for the from-scratch runs themselves; default none)."""
    section = task_section(task)
    g = cmp[section]
    d = entry_dir(cmp, entry)
    common = [f"finetune.task={task}", f"finetune.data_dir={g['data_dir']!r}",
              f"finetune.init={str(d / 'pretrain')!r}", f"finetune.train_subset={int(g.get('train_subset', 0))}",
              f"finetune.subset_seed={int(g.get('subset_seed', 0))}",
              f"output_dir={str(task_dir(cmp, entry, task, mode, seed).parent)!r}"]
    if mode == "feature":
        common += ["finetune.job=features", f"features.feature_cache={str(d / 'feature_cache')!r}"]
        if section == "conll":
            common.append("features.head=bilstm")  # the word tagger over frozen features (config may override)
    kind = "feature" if mode == "feature" else "finetune"
    last = [f"finetune.seed={seed}"] + (["finetune.from_scratch=true", *g.get("scratch", [])] if mode == "scratch"
                                        else [])
    return entry_config(cmp, entry, [*common, *g.get(kind, []), *entry.get(f"{section}_{kind}", []), *last])


def task_summary(cmp: dict, entry: dict, task: str, mode: str, seed: int = 0) -> dict | None:
    s = read_json(task_dir(cmp, entry, task, mode, seed) / "summary.json")
    return s if s and not s.get("preempted") and s["step"] >= s["steps"] else None


def task_entry(cmp: dict, entry: dict, task: str, mode: str, seed: int = 0) -> dict:
    """One task run of one entry: on frozen features, finetuned, or finetuned from scratch, with one finetuning
    seed (module doc); cached and resumable."""
    done = task_summary(cmp, entry, task, mode, seed)
    if done:
        return done
    cfg = task_config(cmp, entry, task, mode, seed)
    t0 = time.perf_counter()
    from ptm_jax.train.finetune import finetune

    summary = finetune(cfg)  # feature mode: finetune.job=features
    stage = task_dir(cmp, entry, task, mode, seed)
    wall = read_json(stage / "wall.json") or {"wall_s": 0.0, "calls": 0}
    (stage / "wall.json").write_text(json.dumps({"wall_s": round(wall["wall_s"] + time.perf_counter() - t0, 3),
                                                 "calls": wall["calls"] + 1}))
    return summary
