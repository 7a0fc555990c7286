"""Fault injection: SIGKILL a pretraining run at random moments, restart it each time with the same command,
and check that the end result equals an uninterrupted run.

Each trial starts ``python -m ptm_jax.cli pretrain`` and kills it (SIGKILL: no handler runs) at a moment drawn
from a seeded generator, in one of four modes:

  time      after a random 0.5-25 s: during start-up, compilation, restore or training
  step      when the run has logged a random 1-8 steps past the checkpoint it restored
  save      while an asynchronous save is in progress (an orbax ``N.orbax-checkpoint-tmp`` directory exists),
            once at least one save of this trial has completed (so the run keeps progressing)
  boundary  right after a checkpoint directory appears (orbax may still be finalising or pruning old steps)

After every kill the next trial must restore the latest complete checkpoint: its first logged step is that
checkpoint's step + 1 and the checkpoint's data cursor is step * global_batch (so no example is skipped or
replayed). A final trial runs to the end; its parameters are compared with an uninterrupted run's
(``ptm_jax.export.params.load_params``). Run from the repository root (takes ~10-20 min on 2 cores):

    python benchmarks/fault_injection.py --kills 24 --seed 0
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
        from ptm_jax.train.checkpoint import Checkpointer

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
    logged_before = len(train_steps(stage))
    start_steps = set(complete_steps(ckpt))
    t0 = time.time()
    with open(log, "ab") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=stage.parent.parent)
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
            "rc": proc.returncode, "restored": restored, "first_step": mine[0] if mine else None,
            "last_step": mine[-1] if mine else None, "seconds": round(time.time() - t0, 1),
            "after_kill_latest": max(complete_steps(ckpt), default=0)}


def run_faults(work: Path, kills: int, seed: int, steps: int, every: int, batch: int) -> dict:
    env = base_env(work / "jax_cache")
    common = [f"data.corpus={CORPUS}", f"data.cache_dir={work / 'cache'}", f"train.steps={steps}",
              f"train.checkpoint_every={every}", f"train.batch_size={batch}", "train.log_every=1",
              "train.eval_every=0", "train.async_checkpoints=true"]
    ptm = [sys.executable, "-m", "ptm_jax.cli"]
    subprocess.run(ptm + ["data", "-c", "bert_tiny", *common[:2], "tokenizer.vocab_size=1000",
                          f"output_dir={work / 'data'}"], env=env, check=True, capture_output=True)
    common.append(f"tokenizer.vocab_file={work / 'data/tokenizer/vocab.txt'}")
    t0 = time.time()
    ref = subprocess.run(ptm + ["pretrain", "-c", "bert_tiny", *common, f"output_dir={work / 'reference'}"],
                         env=env, capture_output=True, text=True)
    if ref.returncode != 0:
        raise RuntimeError(f"reference run failed:\n{ref.stdout[-2000:]}\n{ref.stderr[-3000:]}")
    reference_s = time.time() - t0
    out = work / "faulted"
    stage = out / "pretrain"
    stage.mkdir(parents=True, exist_ok=True)
    cmd = ptm + ["pretrain", "-c", "bert_tiny", *common, f"output_dir={out}"]
    rng = random.Random(seed)
    trials: list[dict] = []
    t0 = time.time()
    while sum(t["killed"] for t in trials) < kills:
        mode = rng.choice(MODES)
        arg = round(rng.uniform(0.5, 25.0), 2) if mode == "time" else rng.randint(1, 8)
        t = trial(cmd, env, stage, work / "faulted.log", mode, arg)
        trials.append(t)
        print(f"trial {len(trials):2d}: {t['mode']:8} {t['arg']!s:>5}  restored {t['restored']:3d}  steps "
              f"{t['first_step']}..{t['last_step']}  latest after {t['after_kill_latest']:3d}  "
              f"{'DURING SAVE ' if t['during_save'] else ''}{t['seconds']} s", flush=True)
        if not t["killed"]:
            if t["rc"] != 0:
                raise RuntimeError(f"trial {len(trials)} failed with status {t['rc']}; see {work / 'faulted.log'}")
            break  # the run finished before the kill fired
    if trials[-1]["killed"]:
        trials.append(trial(cmd, env, stage, work / "faulted.log", None, 0))
        print(f"final   : restored {trials[-1]['restored']} steps {trials[-1]['first_step']}.."
              f"{trials[-1]['last_step']} status {trials[-1]['rc']}", flush=True)
    faulted_s = time.time() - t0
    final = trials[-1]
    if final["rc"] != 0 or final["last_step"] != steps:
        raise RuntimeError(f"the final trial did not finish: {final}; see {work / 'faulted.log'}")
    return verify(work, trials, stage, steps, batch, reference_s, faulted_s)


def verify(work: Path, trials: list[dict], stage: Path, steps: int, batch: int, reference_s: float,
           faulted_s: float) -> dict:
    import jax
    import numpy as np

    from ptm_jax.export.params import load_params

    ckpt = stage / "checkpoints"
    bad_resumes = [i for i, t in enumerate(trials[1:], 1)
                   if t["first_step"] is not None and t["first_step"] != t["restored"] + 1]
    recomputed = sum(max((t["last_step"] or t["restored"]) - trials[i + 1]["restored"], 0)
                     for i, t in enumerate(trials[:-1]))
    final_cursor = cursor_of(ckpt, steps)
    lost = abs(steps * batch - final_cursor) + sum(
        abs(cursor_of(ckpt, s) - s * batch) for s in complete_steps(ckpt) if s != steps)
    got, _, _, _ = load_params(work / "faulted")
    ref, _, _, _ = load_params(work / "reference")
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)))
    return {"trials": len(trials), "kills": sum(t["killed"] for t in trials),
            "kills_during_save": sum(t["during_save"] for t in trials),
            "kills_by_mode": {m: sum(t["killed"] and t["mode"] == m for t in trials) for m in MODES},
            "restarts": len(trials) - 1, "bad_resumes": bad_resumes,
            "steps": steps, "steps_recomputed": recomputed, "examples_lost": lost,
            "final_max_abs_diff": diff, "leftover_tmp_dirs": tmp_dirs(ckpt),
            "reference_s": round(reference_s, 1), "faulted_s": round(faulted_s, 1), "detail": trials}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary directory)")
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ptm-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        r = run_faults(work, args.kills, args.seed, args.steps, args.checkpoint_every, args.batch_size)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'stage':9} {'trials':>6} {'kills':>5} {'in save':>7} {'restarts':>8} {'bad resumes':>11} "
          f"{'recomputed':>10} {'examples lost':>13} {'max |dparam|':>12}")
    print(f"{'pretrain':9} {r['trials']:6d} {r['kills']:5d} {r['kills_during_save']:7d} {r['restarts']:8d} "
          f"{len(r['bad_resumes']):11d} {r['steps_recomputed']:10d} "
          f"{r['examples_lost']:13d} {r['final_max_abs_diff']:12.2e}")
    print(f"kills by mode: {r['kills_by_mode']}; leftover orbax tmp dirs: {len(r['leftover_tmp_dirs'])}; "
          f"reference run {r['reference_s']} s, faulted run {r['faulted_s']} s in total")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    ok = r["final_max_abs_diff"] <= 1e-6 and r["examples_lost"] == 0 and not r["bad_resumes"] and \
        r["kills"] >= args.kills
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
