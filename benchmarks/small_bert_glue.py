"""What pretraining adds to a small BERT: the finetuning settings chosen on dev splits carved from GLUE train, the
figures reported on the GLUE dev sets, against the same network finetuned from a random initialisation.

``select``: carves ``--n`` training examples of each task of the comparison (default
``configs/compare/bert_scratch_gutenberg.toml``) into a selection dev set (``benchmarks/selection_split.py``),
pretrains the comparison's entry as ``ptm compare``
would (skipped when done), and runs the comparison on the carved folders once per finetuning learning rate of
``--lrs`` (one seed; each rate an entry that shares the one pretraining), from-scratch rows included. It prints the
table and the rate with the best mean selection figure over the tasks, for the pretrained rows and for the
from-scratch rows apart, to be written into the comparison's ``[glue] finetune`` (and ``scratch`` if they
differ). GLUE dev is never read.

``report``: ``ptm compare`` of the comparison itself (GLUE dev, three seeds, the from-scratch rows), then, per task,
whether the pretrained model beats its from-scratch row by more than the larger of the two seed ranges.

    python benchmarks/small_bert_glue.py select --out runs/bert_scratch_select
    python benchmarks/small_bert_glue.py report        # ptm compare -c bert_scratch_gutenberg, then the verdict
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED = ("pretrain", "tokenizer", "cache", "config.json", "budget.json")
"""What the learning-rate entries of ``select`` share with the comparison's own entry folder (links)."""


def _mean_over_tasks(row: dict, tasks: list[str]) -> float:
    values = [row.get(f"finetune_{t}") for t in tasks]
    return sum(values) / len(values) if all(isinstance(v, float) for v in values) else float("-inf")


def select(a) -> int:
    from selection_split import FOLDERS, carve_glue

    from ptm_jax.evaluate.compare import compare, load_compare_config
    from ptm_jax.evaluate.compare_stages import entry_dir, pretrain_entry

    cmp = load_compare_config(a.config)
    out = Path(a.out)
    tasks = cmp["glue"]["finetune_tasks"]
    for task in tasks:
        if not (out / "glue" / FOLDERS[task] / "dev.tsv").exists():
            print(carve_glue(Path(cmp["glue"]["data_dir"]), task, out / "glue", a.n, a.seed))
    sel = copy.deepcopy(cmp)
    sel.update(output_dir=str(out), name=f"{cmp.get('name', 'compare')} on dev splits carved from train", entries=[])
    sel["glue"].update(data_dir=str(out / "glue"), seeds=[0])
    sel["glue"].pop("scratch", None)  # each rate's from-scratch twin runs at that rate: chosen apart, below
    for entry in cmp["entries"]:
        if pretrain_entry(cmp, entry).get("stopped"):
            print(f"{entry['name']}: pretraining stopped; run again to continue")
            return 1
        source = entry_dir(cmp, entry).resolve()
        for lr in a.lrs:
            e = {**entry, "name": f"{entry['name']}_lr{lr:g}",
                 "glue_finetune": [*entry.get("glue_finetune", []), f"finetune.learning_rate={lr}"]}
            d = out / e["name"]
            d.mkdir(parents=True, exist_ok=True)
            for part in SHARED:
                if (source / part).exists() and not (d / part).exists():
                    (d / part).symlink_to(source / part)
            sel["entries"].append(e)
    result = compare(sel)
    if result.get("stopped"):
        return 1
    for kind in ("pretrained", "from scratch"):
        rows = [r for r in result["rows"] if bool(r.get("from_scratch_of")) == (kind == "from scratch")]
        best = max(rows, key=lambda r: _mean_over_tasks(r, tasks))
        print(f"{kind}: best mean selection figure {_mean_over_tasks(best, tasks):.4f}: {best['entry']}")
    return 0


def report(a) -> int:
    from ptm_jax.evaluate.compare import compare

    result = compare(a.config)
    if result.get("stopped"):
        return 1
    for row in result["added"]:
        wins = [k for k in row if k.endswith("_value") and row[k] > row[k.replace("_value", "_spread")]]
        print(f"{row['entry']}: beats its from-scratch row by more than the seed range on {len(wins)} of "
              f"{sum(k.endswith('_value') for k in row)} tasks ({', '.join(k[9:-6] for k in wins) or 'none'})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("select")
    s.add_argument("--config", default="bert_scratch_gutenberg")
    s.add_argument("--out", default="runs/bert_scratch_select")
    s.add_argument("--lrs", nargs="+", type=float, default=[1e-4, 3e-4, 1e-3])
    s.add_argument("--n", type=int, default=1000, help="training examples carved out per task")
    s.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("report")
    r.add_argument("--config", default="bert_scratch_gutenberg")
    a = ap.parse_args(argv)
    return select(a) if a.command == "select" else report(a)


if __name__ == "__main__":
    raise SystemExit(main())
