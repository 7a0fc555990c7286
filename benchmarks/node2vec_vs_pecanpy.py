"""node2vec (ptm_jax/families/node2vec) against PecanPy (Liu & Krishnan 2021, the optimised node2vec; its ``PreComp``
mode is the paper's per-edge alias tables) as users run both: two whole processes on the same edge list with the
same work (d = 128, walks of 80, 10 per node, window 10, one epoch, skip-gram with gensim's defaults on PecanPy's
side: 5 negatives, sample 1e-3, alpha 0.025; ``configs/node2vec.toml`` on ours).

Quality (``ptm_jax/families/node2vec/quality.py``): node classification (micro/macro F1) on the labelled graph,
link prediction (ROC AUC) on the graph with 20% of its edges held out; (p, q) is chosen on dev among ``--grid``
with our side, and both sides are reported on test at that choice. Speed: ``--pairs`` interleaved whole-process
runs of each side on the full graph at the chosen (p, q) (ours: ``ptm pretrain`` + ``ptm export``; PecanPy: its
CLI, which writes the vectors), the ratio of their wall times.

PecanPy 2.0.9 lives in its own folder (``pip install --target DIR pecanpy numba numba-progress nptyping
llvmlite tqdm --no-deps``); nptyping 2.5.0 reads numpy aliases that numpy 2 removed (``np.bool8``, ``np.float_``,
...), so its process sets them back before importing PecanPy (``SHIM``), nothing else.

    python benchmarks/node2vec_vs_pecanpy.py --edges cora_edgelist.txt --labels cora_labels.txt \
        --pecanpy DIR --out /tmp/n2v
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
SHIM = """import sys
import numpy as np
for old, new in (("bool8", np.bool_), ("object0", np.object_), ("int0", np.intp), ("uint0", np.uintp),
                 ("void0", np.void), ("bytes0", np.bytes_), ("str0", np.str_), ("cfloat", np.complex128),
                 ("clongfloat", np.clongdouble), ("complex_", np.complex128), ("float_", np.float64),
                 ("longcomplex", np.clongdouble), ("longfloat", np.longdouble), ("singlecomplex", np.complex64),
                 ("string_", np.bytes_), ("unicode_", np.str_)):
    setattr(np, old, new)
from pecanpy.cli import main
sys.argv = ["pecanpy"] + sys.argv[1:]
main()
"""


def read_pairs(path: Path) -> tuple[list[str], np.ndarray]:
    names: dict[str, int] = {}
    seen, pairs = set(), []
    for line in path.read_text().split("\n"):
        f = line.split()
        if len(f) < 2:
            continue
        a, b = (names.setdefault(x, len(names)) for x in f[:2])
        key = (min(a, b), max(a, b))
        if a != b and key not in seen:
            seen.add(key)
            pairs.append(key)
    return list(names), np.array(pairs, np.int64)


def write_edges(path: Path, names: list[str], pairs: np.ndarray) -> None:
    path.write_text("".join(f"{names[a]}\t{names[b]}\n" for a, b in pairs.tolist()))


def vectors(path: Path, names: list[str]) -> np.ndarray:
    """The vectors of a word2vec text file in the order of ``names`` (a node missing from it: zeros)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(path))
    out = np.zeros((len(names), kv.vector_size), np.float32)
    for i, n in enumerate(names):
        if n in kv.key_to_index:
            out[i] = kv[n]
    return out


def ours(graph: Path, p: float, q: float, out: Path, seed: int) -> tuple[Path, float]:
    from ptm_jax.families.node2vec.graph import read_edge_list

    g = read_edge_list(graph, directed=False, weighted=False)
    steps = math.ceil(10 * g.num_nodes * 81 / 16384)   # configs/node2vec.toml's batch
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "node2vec", f"data.graph={graph}",
                    f"data.p={p}", f"data.q={q}", f"model.vocab_size={g.num_nodes + 3}", f"train.steps={steps}",
                    f"data.seed={seed}", f"output_dir={out}", "train.progress_bar=false"],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "ptm_jax.cli", "export", str(out), "--format", "text_vectors", "--out",
                    str(out / "vectors.txt"), "--force"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return out / "vectors.txt", time.perf_counter() - t


def pecanpy(graph: Path, p: float, q: float, out: Path, folder: str, seed: int) -> tuple[Path, float]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": folder}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", SHIM, "--input", str(graph), "--output", str(out / "vectors.txt"),
                    "--mode", "PreComp", "--p", str(p), "--q", str(q), "--random_state", str(seed)],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out / "vectors.txt", time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", required=True)
    ap.add_argument("--labels", required=True, help="'NODE LABEL' lines")
    ap.add_argument("--pecanpy", required=True, help="the folder PecanPy was installed into (--target)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", default="1,1 0.25,4 4,0.25", help="(p, q) settings chosen among on dev")
    ap.add_argument("--pairs", type=int, default=2, help="interleaved whole-process runs of each side")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ptm_jax.families.node2vec import quality

    names, pairs = read_pairs(Path(args.edges))
    full = out / "full.edg"
    write_edges(full, names, pairs)
    label_of = dict(line.split()[:2] for line in Path(args.labels).read_text().split("\n") if line.strip())
    labelled = [i for i, n in enumerate(names) if n in label_of]
    y = np.array([label_of[names[i]] for i in labelled])
    split = quality.label_split(len(labelled), args.seed)
    links = quality.link_split(pairs, len(names), args.seed)
    reduced = out / "train.edg"
    write_edges(reduced, names, links["train"])
    report: dict = {"nodes": len(names), "edges": int(len(pairs)), "labelled": len(labelled),
                    "classes": int(len(set(y))), "grid": {}, "speed": []}
    grid = [tuple(float(v) for v in s.split(",")) for s in args.grid.split()]
    for p, q in grid:
        key = f"p={p:g},q={q:g}"
        v, secs = ours(full, p, q, out / f"ours-{key}", args.seed)
        cls = quality.node_classification(vectors(v, names)[labelled], y, split)
        v2, _ = ours(reduced, p, q, out / f"ours-links-{key}", args.seed)
        lp = quality.link_prediction(vectors(v2, names), links, len(names), args.seed)
        report["grid"][key] = {"classification": cls, "links": lp, "seconds": secs}
        print(key, json.dumps(report["grid"][key]), flush=True)
    best_c = max(report["grid"], key=lambda k: report["grid"][k]["classification"]["dev_micro_f1"])
    best_l = max(report["grid"], key=lambda k: report["grid"][k]["links"]["dev_auc"])
    report["chosen"] = {"classification": best_c, "links": best_l}
    pq = {k: tuple(float(x.split("=")[1]) for x in k.split(",")) for k in report["grid"]}
    v, secs = pecanpy(full, *pq[best_c], out / "pecanpy-full", args.pecanpy, args.seed)
    report["pecanpy"] = {"classification": quality.node_classification(vectors(v, names)[labelled], y, split)}
    report["speed"].append({"ours": report["grid"][best_c]["seconds"], "pecanpy": secs})
    v2, _ = pecanpy(reduced, *pq[best_l], out / "pecanpy-links", args.pecanpy, args.seed)
    report["pecanpy"]["links"] = quality.link_prediction(vectors(v2, names), links, len(names), args.seed)
    print("pecanpy", json.dumps(report["pecanpy"]), flush=True)
    for i in range(1, args.pairs):
        _, a = ours(full, *pq[best_c], out / f"speed-ours-{i}", args.seed + i)
        _, b = pecanpy(full, *pq[best_c], out / f"speed-pecanpy-{i}", args.pecanpy, args.seed + i)
        report["speed"].append({"ours": a, "pecanpy": b})
        print("speed", report["speed"][-1], flush=True)
    ratios = [s["pecanpy"] / s["ours"] for s in report["speed"]]
    report["speed_ratio_pecanpy_over_ours"] = {"median": float(np.median(ratios)), "min": min(ratios),
                                               "max": max(ratios), "pairs": len(ratios)}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
