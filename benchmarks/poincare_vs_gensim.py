"""Poincare embeddings (ptm_jax/families/poincare) against gensim's ``PoincareModel`` on the same closure, at the
same dimensions, epochs, burn-in, negatives, batch size and learning rates (gensim's defaults: alpha 0.1,
burn-in 10 epochs at 0.01, batches of 10, 10 negatives drawn by count).

Quality: reconstruction mean rank and MAP (``reconstruction.py``: each related node ranked among the nodes not
related to u, u left out) of both sides' vectors through the same function; gensim's own
``ReconstructionEvaluation`` on its model is printed beside it (its ranks count u itself: one more each).
Reconstruction measures how well the embedding holds the closure it was trained on, so there is no held-out
split; nothing is chosen on the figures (both sides run their defaults). Ours runs at gensim's
``regularization_coeff`` = 1.0 too (``model.regularization``), our default being 0 (the paper's loss).
Speed: whole processes, ``--pairs`` interleaved runs of each side (ours: ``ptm pretrain``; gensim: a Python
process that reads the closure, trains and writes the vectors).

    python benchmarks/poincare_vs_gensim.py --closure mammal_closure.csv --dim 10 --epochs 50 --out /tmp/poincare
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GENSIM = """import sys, logging
from gensim.models.poincare import PoincareModel
tsv, out = sys.argv[1], sys.argv[2]
dim, epochs, neg, seed = (int(a) for a in sys.argv[3:7])
rel = [tuple(line.rstrip("\\n").split("\\t")) for line in open(tsv, encoding="utf-8") if line.strip()]
m = PoincareModel(rel, size=dim, negative=neg, seed=seed)
m.train(epochs=epochs, batch_size=10)
m.kv.save_word2vec_format(out)
"""


def ours(tsv: Path, nodes: int, relations: int, args, out: Path, reg: float, seed: int) -> tuple[Path, float]:
    steps = math.ceil((10 + args.epochs) * relations / 10)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "poincare", f"data.hierarchy={tsv}",
                    f"model.dim={args.dim}", f"model.vocab_size={nodes + 3}", f"train.steps={steps}",
                    f"model.regularization={reg}", f"data.seed={seed}", f"output_dir={out}",
                    "train.progress_bar=false"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    secs = time.perf_counter() - t
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", "export", str(out), "--format", "text_vectors", "--out",
                    str(out / "vectors.txt"), "--force"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return out / "vectors.txt", secs


def gensim(tsv: Path, args, out: Path, seed: int) -> tuple[Path, float]:
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", GENSIM, str(tsv), str(out / "vectors.txt"), str(args.dim),
                    str(args.epochs), "10", str(seed)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return out / "vectors.txt", time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--closure", required=True, help="a closure file ('CHILD PARENT' lines or id1,id2,weight CSV)")
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from gensim.models import KeyedVectors
    from gensim.models.poincare import PoincareKeyedVectors, ReconstructionEvaluation

    from ptm_jax.families.poincare.hierarchy import read_relations
    from ptm_jax.families.poincare.reconstruction import reconstruction

    h = read_relations(args.closure)
    tsv = out / "closure.tsv"
    tsv.write_text("".join(f"{h.names[u]}\t{h.names[v]}\n" for u, v in h.relations.tolist()), encoding="utf-8")

    def score(path: Path) -> dict:
        kv = KeyedVectors.load_word2vec_format(str(path))
        x = np.stack([kv[n] for n in h.names])
        return reconstruction(x, h)

    report: dict = {"nodes": h.num_nodes, "relations": int(len(h.relations)), "dim": args.dim,
                    "epochs": args.epochs, "burn_in": 10, "negative": 10, "runs": []}
    for i in range(args.pairs):
        a_path, a = ours(tsv, h.num_nodes, len(h.relations), args, out / f"ours-{i}", 0.0, i)
        b_path, b = gensim(tsv, args, out / f"gensim-{i}", i)
        run = {"ours_seconds": a, "gensim_seconds": b, "ours": score(a_path), "gensim": score(b_path)}
        if i == 0:
            kv = PoincareKeyedVectors.load_word2vec_format(str(b_path))
            run["gensim_own_evaluation"] = ReconstructionEvaluation(str(tsv), kv).evaluate()
            r_path, _ = ours(tsv, h.num_nodes, len(h.relations), args, out / "ours-reg1", 1.0, 0)
            run["ours_regularization_1"] = score(r_path)
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
    ratios = [r["gensim_seconds"] / r["ours_seconds"] for r in report["runs"]]
    report["speed_ratio_gensim_over_ours"] = {"median": float(np.median(ratios)), "min": min(ratios),
                                              "max": max(ratios), "pairs": len(ratios)}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
