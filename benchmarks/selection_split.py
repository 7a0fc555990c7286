"""Selection splits carved from training data, so that settings are chosen on data that is neither trained on nor
reported: a GLUE task's training file split into a smaller ``train.tsv`` and a ``dev.tsv`` of ``n`` training
examples (the task's own format, read by ``ptm finetune`` like the real folder), and the same for the embedded
task of ``ptm run`` (written in SST-2's format: one sentence, two labels, accuracy).

The carve is seeded (``random.Random(seed)`` over the data lines) and keeps the file order of both parts; the real
dev sets are never read. Used by ``benchmarks/main_job_selection.py`` and ``benchmarks/small_bert_glue.py``:

    python benchmarks/selection_split.py --out runs/glue_select --tasks sst2 mrpc stsb cola --n 1000
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GLUE_DATA = REPO.parent / "shared" / "data" / "glue"
FOLDERS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "cola": "CoLA", "rte": "RTE", "wnli": "WNLI"}
NO_HEADER = {"cola"}  # CoLA's train and dev files have no header line


def carve_lines(lines: list[str], n: int, seed: int) -> tuple[list[str], list[str]]:
    """(kept for training, the ``n`` carved out), each in file order."""
    if not 0 < n < len(lines):
        raise SystemExit(f"cannot carve {n} of {len(lines)} lines")
    order = list(range(len(lines)))
    random.Random(seed).shuffle(order)
    carved = set(order[:n])
    return ([x for i, x in enumerate(lines) if i not in carved], [x for i, x in enumerate(lines) if i in carved])


def carve_glue(glue_dir: Path, task: str, out: Path, n: int, seed: int = 0) -> dict:
    """``out/<Folder>/train.tsv`` and ``dev.tsv``: the task's training file less ``n`` lines, and those lines."""
    folder = FOLDERS[task]
    text = (Path(glue_dir) / folder / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
    header, rows = ([], text) if task in NO_HEADER else (text[:1], text[1:])
    rows = [r for r in rows if r.strip()]
    train, dev = carve_lines(rows, n, seed)
    (out / folder).mkdir(parents=True, exist_ok=True)
    for name, part in (("train.tsv", train), ("dev.tsv", dev)):
        (out / folder / name).write_text("\n".join(header + part) + "\n", encoding="utf-8")
    return {"task": task, "train": len(train), "selection": len(dev), "seed": seed}


def carve_embedded(out: Path, n: int, seed: int = 0) -> dict:
    """The embedded task's training sentences (``data/tasks/embedded_task.py``) as an SST-2-format folder
    ``out/SST-2``: train less ``n`` sentences, and those ``n`` as dev (its real dev split is not read)."""
    from ptm_jax.data.tasks.embedded_task import embedded_task

    _, train, _ = embedded_task()
    rows = [f"{e.text_a.replace(chr(9), ' ')}\t{e.label}" for e in train]
    kept, carved = carve_lines(rows, n, seed)
    (out / "SST-2").mkdir(parents=True, exist_ok=True)
    for name, part in (("train.tsv", kept), ("dev.tsv", carved)):
        (out / "SST-2" / name).write_text("\n".join(["sentence\tlabel", *part]) + "\n", encoding="utf-8")
    return {"task": "embedded", "train": len(kept), "selection": len(carved), "seed": seed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--glue-dir", default=str(GLUE_DATA))
    ap.add_argument("--tasks", nargs="+", default=["sst2", "mrpc", "stsb", "cola"], choices=[*FOLDERS, "embedded"])
    ap.add_argument("--n", type=int, default=1000, help="training examples carved out per task")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for task in a.tasks:
        made = (carve_embedded(Path(a.out), a.n, a.seed) if task == "embedded"
                else carve_glue(Path(a.glue_dir), task, Path(a.out), a.n, a.seed))
        print(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
