#!/usr/bin/env python3
"""Did the ptm command that just ran stop early (SIGTERM -> checkpoint -> exit 0) in any stage?

    python launch/stopped_early.py SINCE_EPOCH_SECONDS -- <ptm command line>   # exit 0: yes (start it again)
    python launch/stopped_early.py SINCE_EPOCH_SECONDS --command-file FILE     # the command line, shell-quoted
                                                                              # exit 1: no; 2: usage;
                                                                              # 3: cannot tell (one line says why)
The output directory is resolved from the command line exactly as ``ptm`` resolves it (preset, overrides,
--output-dir). Then the ``summary.json`` files every stage writes (``<output_dir>/summary.json`` of ``ptm run``,
``<output_dir>/pretrain/summary.json``, ``<output_dir>/finetune-<task>/summary.json``) that were written at or
after SINCE (a summary left by an earlier command does not count) are read; the answer is yes when one of them
says ``"preempted": true`` at any depth. The output directory may be local or gs:// (read through
ptm_jax.fs). Used by launch/slurm_gpu.sbatch (requeue) and launch/tpu_pod.sh (watch -> resume).
"""
from __future__ import annotations

import json
import sys


def _preempted(node) -> bool:
    if isinstance(node, dict):
        return node.get("preempted") is True or any(_preempted(v) for v in node.values())
    return False


def stopped_early(output_dir: str, since: float) -> list[str]:
    """The summaries written since ``since`` that record an early stop."""
    from ptm_jax import fs

    root = fs.path(output_dir)
    if not root.exists():
        return []
    candidates = [root / "summary.json", root / "pretrain" / "summary.json"]
    candidates += [d / "summary.json" for d in root.iterdir() if d.name.startswith("finetune")]
    found = []
    for path in candidates:
        try:
            if not path.exists():
                continue
            mtime = getattr(path.stat(), "mtime", None)
            if mtime is not None and float(mtime) + 2 < since:  # 2 s of clock skew between hosts
                continue
            if _preempted(json.loads(path.read_text())):
                found.append(str(path))
        except (OSError, ValueError):
            continue
    return found


def output_dir_of(ptm_args: list[str]) -> str:
    """The output_dir ``ptm <ptm_args>`` writes to."""
    from ptm_jax.cli import build_parser
    from ptm_jax.commands.stages import config_of

    args, extra = build_parser().parse_known_args(ptm_args)
    args.overrides = list(getattr(args, "overrides", [])) + [a for a in extra if "=" in a and not a.startswith("-")]
    return config_of(args).output_dir


def main(argv: list[str]) -> int:
    import shlex

    if len(argv) >= 2 and argv[1] == "--":
        ptm_args = argv[2:]
    elif len(argv) == 3 and argv[1] == "--command-file":
        with open(argv[2], encoding="utf-8") as f:
            ptm_args = shlex.split(f.read())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        output_dir = output_dir_of(ptm_args)
    except Exception as e:  # noqa: BLE001 -- a launcher must not read "cannot tell" as "finished"
        print(f"stopped_early: cannot resolve the output_dir of `ptm {' '.join(ptm_args)}`: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return 3
    found = stopped_early(output_dir, float(argv[0]))
    for path in found:
        print(f"stopped early: {path}")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
