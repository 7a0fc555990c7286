"""Fault injection: SIGKILL a pretraining run and a finetuning run at random moments, restart each time with
the same command, and check that the end result equals an uninterrupted run.

Each trial starts ``python -m ptm_jax.cli pretrain`` (or ``finetune``) and kills it (SIGKILL: no handler runs) at a moment drawn
from a seeded generator, in one of four modes:

  time      after a random 0.5-25 s: during start-up, compilation, restore or training
  step      when the run has logged a random 1-8 steps past the checkpoint it restored
  save      while an asynchronous save is in progress (an orbax ``N.orbax-checkpoint-tmp`` directory exists),
            once at least one save of this trial has completed (so the run keeps progressing)
  boundary  right after a checkpoint directory appears (orbax may still be finalising or pruning old steps)

After every kill the next trial must restore the latest complete checkpoint: its first logged step is that
checkpoint's step + 1 and the checkpoint's data cursor is step * global_batch (so no example is skipped or
replayed). A final trial runs to the end; its parameters are compared with an uninterrupted run's
(``ptm_jax.export.params.load_params``), and for finetuning also the best-model record (``best.json``).
Finetuning (``ptm finetune --task embedded``, an evaluation and a checkpoint every 5 steps) starts from the
uninterrupted pretraining run. Run from the repository root (takes ~15-30 min on 2 cores):

    python benchmarks/fault_injection.py --kills 20 --finetune-kills 10 --seed 0
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
CORPUS = REPO.parent / "shared" / "data" / "corpus" / "tinyshakespeare" / "input.txt"
MODES = ("time", "step", "save", "boundary")


def base_env(jax_cache: Path) -> dict[str, str]:
    return {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
            "USE_TF": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
            "JAX_COMPILATION_CACHE_DIR": str(jax_cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def complete_steps(ckpt: Path) -> list[int]:
    return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) if ckpt.is_dir() else []


def tmp_dirs(ckpt: Path, newer_than: float = 0.0) -> list[str]:
    if not ckpt.is_dir():
        return []
    out = []
    for p in ckpt.iterdir():
        try:
            if "tmp" in p.name and p.stat().st_mtime >= newer_than:
                out.append(p.name)
        except FileNotFoundError:  # renamed or removed while listing
            pass
    return out


def train_steps(stage: Path) -> list[int]:
    path = stage / "metrics.jsonl"
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # the line being written (or one cut by a kill)
            continue
        if rec.get("split") == "train":
            steps.append(int(rec["step"]))
    return steps


def cursor_of(ckpt: Path, step: int) -> int:
    meta = json.loads((ckpt / str(step) / "meta" / "metadata").read_text()) \
        if (ckpt / str(step) / "meta" / "metadata").is_file() else None
    if meta is None:  # the orbax JsonSave layout may differ between versions: ask orbax
        from ptm_jax.checkpoint import Checkpointer

        c = Checkpointer(ckpt, async_save=False)
        try:
            meta = c.restore_meta(step)
        finally:
            c.close()
    return int(meta["cursor"])


def trial(cmd: list[str], env: dict, stage: Path, log: Path, mode: str | None, arg: float,
          limit_s: float = 600.0) -> dict:
    """One life of the run; kills it per ``mode`` (None: let it finish)."""
    ckpt = stage / "checkpoints"
    restored = max(complete_steps(ckpt), default=0)
    restored_cursor = cursor_of(ckpt, restored) if restored else 0
    logged_before = len(train_steps(stage))
    start_steps = set(complete_steps(ckpt))
    t0 = time.time()
    with open(log, "ab") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=stage.parent)
        killed, during_save = False, False
        try:
            while proc.poll() is None:
                if time.time() - t0 > limit_s:
                    raise RuntimeError(f"trial exceeded {limit_s} s; see {log}")
                mine = train_steps(stage)[logged_before:]
                new = set(complete_steps(ckpt)) - start_steps
                fire = {"time": lambda: time.time() - t0 >= arg,
                        "step": lambda: bool(mine) and mine[-1] >= restored + arg,
                        "save": lambda: bool(new) and bool(tmp_dirs(ckpt, t0)),
                        "boundary": lambda: bool(new),
                        None: lambda: False}[mode]()
                if fire:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    killed = True
                    during_save = bool(tmp_dirs(ckpt, t0))  # a save's temporary dir survived the kill
                    break
                time.sleep(0.005)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    mine = train_steps(stage)[logged_before:]
    return {"mode": mode if killed else "none", "arg": arg, "killed": killed, "during_save": during_save,
            "rc": proc.returncode, "restored": restored, "restored_cursor": restored_cursor, "first_step": mine[0] if mine else None,
            "last_step": mine[-1] if mine else None, "seconds": round(time.time() - t0, 1),
            "after_kill_latest": max(complete_steps(ckpt), default=0)}


def fault_stage(name: str, cmd: list[str], env: dict, stage: Path, steps: int, batch: int, kills: int,
                rng: random.Random, log: Path) -> list[dict]:
    """Kills the run ``kills`` times (fewer if it finishes first), then lets it finish."""
    stage.mkdir(parents=True, exist_ok=True)
    trials: list[dict] = []
    while sum(t["killed"] for t in trials) < kills:
        mode = rng.choice(MODES)
        arg = round(rng.uniform(0.5, 25.0), 2) if mode == "time" else rng.randint(1, 8)
        t = trial(cmd, env, stage, log, mode, arg)
        trials.append(t)
        print(f"{name} trial {len(trials):2d}: {t['mode']:8} {t['arg']!s:>5}  restored {t['restored']:3d}  steps "
              f"{t['first_step']}..{t['last_step']}  latest after {t['after_kill_latest']:3d}  "
              f"{'DURING SAVE ' if t['during_save'] else ''}{t['seconds']} s", flush=True)
        if not t["killed"]:
            break  # the run finished before the kill fired
    if trials[-1]["killed"]:
        trials.append(trial(cmd, env, stage, log, None, 0))
        print(f"{name} final   : restored {trials[-1]['restored']} steps {trials[-1]['first_step']}.."
              f"{trials[-1]['last_step']} status {trials[-1]['rc']}", flush=True)
    final = trials[-1]
    if final["rc"] != 0 or final["last_step"] != steps:
        raise RuntimeError(f"{name}: the final trial did not finish ({final}); see {log}")
    return trials


def run_faults(work: Path, kills: int, finetune_kills: int, seed: int, steps: int, every: int,
               batch: int) -> dict[str, dict]:
    env = base_env(work / "jax_cache")
    common = [f"data.corpus={CORPUS}", f"data.cache_dir={work / 'cache'}", f"train.steps={steps}",
              f"train.checkpoint_every={every}", f"train.batch_size={batch}", "train.log_every=1",
              "train.eval_every=0", "train.async_checkpoints=true"]
    ptm = [sys.executable, "-m", "ptm_jax.cli"]
    subprocess.run(ptm + ["data", "-c", "bert_tiny", *common[:2], "tokenizer.vocab_size=1000",
                          f"output_dir={work / 'data'}"], env=env, check=True, capture_output=True)
    common.append(f"tokenizer.vocab_file={work / 'data/tokenizer/vocab.txt'}")
    stages = {"pretrain": (ptm + ["pretrain", "-c", "bert_tiny", *common], "pretrain", kills, batch)}
    if finetune_kills > 0 and "finetune" in subprocess.run(ptm + ["--help"], env=env, capture_output=True,
                                                           text=True).stdout:
        # the embedded task, initialised from the uninterrupted pretraining run; an eval + checkpoint every 5 steps
        stages["finetune"] = (ptm + ["finetune", "-c", "bert_tiny", "--task", "embedded", "--init",
                                     str(work / "pretrain-reference"), "finetune.eval_every=5", "train.log_every=1",
                                     "train.async_checkpoints=true"], "finetune-embedded", finetune_kills, 16)
    rng = random.Random(seed)
    results = {}
    for name, (cmd, stage_name, n_kills, stage_batch) in stages.items():
        t0 = time.time()
        ref = subprocess.run(cmd + [f"output_dir={work / f'{name}-reference'}"], env=env, capture_output=True,
                             text=True)
        if ref.returncode != 0:
            raise RuntimeError(f"{name} reference run failed:\n{ref.stdout[-2000:]}\n{ref.stderr[-3000:]}")
        reference_s = time.time() - t0
        ref_stage = work / f"{name}-reference" / stage_name
        stage_steps = json.loads((ref_stage / "summary.json").read_text()).get("steps", steps)
        stage = work / f"{name}-faulted" / stage_name
        t0 = time.time()
        trials = fault_stage(name, cmd + [f"output_dir={stage.parent}"], env, stage, stage_steps, stage_batch,
                             n_kills, rng, work / f"{name}-faulted.log")
        results[name] = verify(trials, ref_stage, stage, stage_steps, stage_batch, reference_s, time.time() - t0)
    return results


def verify(trials: list[dict], ref_stage: Path, stage: Path, steps: int, batch: int, reference_s: float,
           faulted_s: float) -> dict:
    import jax
    import numpy as np

    from ptm_jax.export.params import load_params

    ckpt = stage / "checkpoints"
    bad_resumes = [i for i, t in enumerate(trials[1:], 1)
                   if t["first_step"] is not None and t["first_step"] != t["restored"] + 1]
    recomputed = sum(max((t["last_step"] or t["restored"]) - trials[i + 1]["restored"], 0)
                     for i, t in enumerate(trials[:-1]))
    # every restart continued from cursor == restored step * global batch, and the final cursor covers all steps
    lost = abs(steps * batch - cursor_of(ckpt, steps)) + sum(
        abs(t["restored_cursor"] - t["restored"] * batch) for t in trials) + sum(
        abs(t["first_step"] - t["restored"] - 1) * batch for t in trials if t["first_step"] is not None)
    got, _, _, _ = load_params(stage)
    ref, _, _, _ = load_params(ref_stage)
    assert jax.tree.structure(got) == jax.tree.structure(ref)
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)))
    out = {"trials": len(trials), "kills": sum(t["killed"] for t in trials),
           "kills_during_save": sum(t["during_save"] for t in trials),
           "kills_by_mode": {m: sum(t["killed"] and t["mode"] == m for t in trials) for m in MODES},
           "restarts": len(trials) - 1, "bad_resumes": bad_resumes,
           "steps": steps, "steps_recomputed": recomputed, "examples_lost": lost,
           "final_max_abs_diff": diff, "leftover_tmp_dirs": tmp_dirs(ckpt),
           "reference_s": round(reference_s, 1), "faulted_s": round(faulted_s, 1), "detail": trials}
    if (ref_stage / "best.json").is_file():  # finetuning keeps the best model by the task metric
        out["best_equal"] = json.loads((ref_stage / "best.json").read_text()) == \
            json.loads((stage / "best.json").read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs during pretraining")
    p.add_argument("--finetune-kills", type=int, default=10, help="SIGKILLs during finetuning (0: skip it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=150, help="pretraining steps")
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary directory)")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ptm-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = run_faults(work, args.kills, args.finetune_kills, args.seed, args.steps, args.checkpoint_every,
                             args.batch_size)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'stage':9} {'steps':>5} {'trials':>6} {'kills':>5} {'in save':>7} {'restarts':>8} "
          f"{'bad resumes':>11} {'recomputed':>10} {'examples lost':>13} {'max |dparam|':>12}")
    for name, r in results.items():
        print(f"{name:9} {r['steps']:5d} {r['trials']:6d} {r['kills']:5d} {r['kills_during_save']:7d} "
              f"{r['restarts']:8d} {len(r['bad_resumes']):11d} {r['steps_recomputed']:10d} {r['examples_lost']:13d} "
              f"{r['final_max_abs_diff']:12.2e}")
    for name, r in results.items():
        print(f"{name}: kills by mode {r['kills_by_mode']}; leftover orbax tmp dirs {len(r['leftover_tmp_dirs'])}; "
              f"reference {r['reference_s']} s, faulted {r['faulted_s']} s"
              + (f"; best model equal: {r['best_equal']}" if "best_equal" in r else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    ok = all(r["final_max_abs_diff"] <= 1e-6 and r["examples_lost"] == 0 and not r["bad_resumes"]
             and r.get("best_equal", True) for r in results.values())
    return 0 if ok and results["pretrain"]["kills"] >= args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
