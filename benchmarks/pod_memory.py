"""Per-chip memory of the pod presets on v5e-256 and v5p-128, compiled by the real TPU compiler on this CPU
machine (``ptm compile``'s ``compile_report``; libtpu on PYTHONPATH, no TPU attached), and the largest per-chip
batch that fits a chip's HBM.

For each row: one compile at the runbook's global batch, one at twice its per-chip batch; peak memory is
affine in the per-chip batch (state + batch x activations), so the two give the largest batch under the
chip's HBM, which a third compile checks (the TPU compiler refuses a program that does not fit HBM; on a
refusal the batch steps down). When twice the batch is refused already, compiles bisect between the two. Prints one JSON line per compile and a Markdown table at the end.

  PYTHONPATH=.venv/libtpu JAX_PLATFORMS=cpu python benchmarks/pod_memory.py [--rows bert_base,...] [--slices v5e]
      [--no-search] [--extra model.scan_layers=false ...]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")  # no TPU host: quiets libtpu's metadata lookups
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # beside other compile processes (libtpu's lock file)

GIB = 2**30
SLICES = {  # name -> (topology, chips, HBM GiB per chip)
    "v5e-256": ("v5e:16x16", 256, 16),
    "v5p-128": ("v5p:4x4x4", 64, 95),
}
# preset -> (sequence length, the runbook's global batch, overrides)
ROWS = {
    "bert_base": (128, 4096, []),
    "bert_large": (512, 1024, ["data.max_predictions_per_seq=80"]),
    "gpt2_124m": (1024, 512, []),
    "xlnet_large": (512, 512, []),
    # the LAMB recipe's two phases at their global batches (run with --no-search: the batch is the recipe's)
    "bert_large_lamb_phase1": (128, 65536, []),
    "bert_large_lamb_phase2": (512, 32768, []),
}
DEFAULT_ROWS = ("bert_base", "bert_large", "gpt2_124m", "xlnet_large")
# (preset, slice) -> overrides for that slice: microbatches sized to the chip's HBM
SLICE_OVERRIDES = {
    ("bert_large_lamb_phase2", "v5p-128"): ["train.grad_accum_steps=16"],
}


def _versions() -> str:
    import importlib.metadata as md

    return ", ".join(f"{d} {md.version(d)}" for d in ("jax", "jaxlib", "libtpu"))


def compile_at(preset: str, seq: int, batch: int, extra: list[str], topology: str) -> dict:
    from ptm_jax.bench.aot import compile_report
    from ptm_jax.config_loading import load_config

    overrides = [f"data.max_seq_length={seq}", f"train.batch_size={batch}", "mesh.data=-1", *extra]
    cfg = load_config(preset, overrides)
    t0 = time.perf_counter()
    try:
        r = compile_report(cfg, None, topology)
    except Exception as e:  # the TPU compiler's refusal of a program that does not fit HBM, among others
        return {"ok": False, "batch": batch, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                "seconds": time.perf_counter() - t0, "overrides": overrides}
    mem = r["memory_per_device"]
    return {"ok": True, "versions": _versions(), "batch": batch, "peak_gib": mem["peak_bytes"] / GIB,
            "state_gib": r["state_bytes_per_device"] / GIB, "temp_gib": mem["temp_bytes"] / GIB,
            "params": r["params"], "model": r["model"], "seconds": time.perf_counter() - t0,
            "overrides": overrides}


def row(preset: str, slice_name: str, search: bool = True, more: list[str] | None = None) -> dict:
    seq, batch, extra = ROWS[preset]
    extra = [*extra, *SLICE_OVERRIDES.get((preset, slice_name), []), *(more or [])]
    topology, chips, hbm = SLICES[slice_name]
    first = compile_at(preset, seq, batch, extra, topology)
    print(json.dumps({"preset": preset, "slice": slice_name, **first}), flush=True)
    out = {"preset": preset, "slice": slice_name, "seq": seq, "first": first, "chips": chips, "hbm": hbm}
    if not first["ok"] or not search:
        return out
    second = compile_at(preset, seq, 2 * batch, extra, topology)
    print(json.dumps({"preset": preset, "slice": slice_name, **second}), flush=True)
    out["second"] = second
    per0, per1 = batch // chips, 2 * batch // chips
    if not second["ok"]:  # twice the batch is refused: bisect between the two per-chip batches
        good = per0
        while per1 - good > 1:
            mid = (good + per1) // 2
            check = compile_at(preset, seq, mid * chips, extra, topology)
            print(json.dumps({"preset": preset, "slice": slice_name, "check": True, **check}), flush=True)
            if check["ok"]:
                good, out["largest"] = mid, {"per_chip": mid, **check}
            else:
                per1 = mid
        out.setdefault("largest", {"per_chip": per0, **first})
        return out
    slope = (second["peak_gib"] - first["peak_gib"]) / (per1 - per0)
    fixed = first["peak_gib"] - slope * per0
    per = max(per0, math.floor((hbm - fixed) / slope)) if slope > 0 else per1
    for _ in range(4):  # the compiler has the last word: step down on a refusal
        check = compile_at(preset, seq, per * chips, extra, topology)
        print(json.dumps({"preset": preset, "slice": slice_name, "check": True, **check}), flush=True)
        if check["ok"]:
            out["largest"] = {"per_chip": per, **check}
            break
        per = max(1, int(per * 0.9))
    out["fit"] = {"fixed_gib": fixed, "gib_per_row": slope}
    return out


def table(results: list[dict]) -> str:
    lines = ["| preset | slice | seq | global batch (per chip) | peak GiB/chip | state GiB/chip | largest per-chip "
             "batch that compiles (peak GiB) | command |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        f = r["first"]
        topology = SLICES[r["slice"]][0]
        cmd = (f"`ptm compile -c {r['preset']} --device-type {topology} "
               + " ".join(f["overrides"]) + "`")
        if not f["ok"]:
            lines.append(f"| {r['preset']} | {r['slice']} | {r['seq']} | {f['batch']} | refused: {f['error'][:80]} "
                         f"| | | {cmd} |")
            continue
        big = r.get("largest")
        big_s = f"{big['per_chip']} ({big['peak_gib']:.2f})" if big else ("not searched" if "second" not in r
                                                                          else "not found")
        lines.append(f"| {r['preset']} | {r['slice']} | {r['seq']} | {f['batch']} ({f['batch'] // r['chips']}) | "
                     f"{f['peak_gib']:.2f} | {f['state_gib']:.2f} | {big_s} | {cmd} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=f"presets, comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--slices", default=",".join(SLICES), help="slices, comma-separated")
    ap.add_argument("--no-search", action="store_true", help="only the runbook's batch (one compile a row)")
    ap.add_argument("--extra", action="append", default=[],
                    help="an override added to every compile (e.g. model.scan_layers=false); repeatable")
    args = ap.parse_args(argv)
    results = [row(p, s, not args.no_search, args.extra) for s in args.slices.split(",")
               for p in args.rows.split(",")]
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
