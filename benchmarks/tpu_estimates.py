"""The pod presets' train steps compiled for a small TPU slice (``--slices v5e`` or ``v5p``: 4 chips) or a whole
v5e-256 (``--slices v5e-256``) by the real TPU compiler (libtpu) on this CPU machine, and the step time the
compiler's own cost model estimates for each variant (``ptm compile``'s ``compile_report`` with
``bench/cost_model.py``): attention path, attention dropout, dropout bits, remat, scan, mesh, per-chip batch, GELU.

Every figure is an ESTIMATE of the compiler's cost model, not a measurement: no TPU has run these steps.

One JSON file per (preset, slice, variant) under ``--out`` (the HLO text beside it, gzipped, so the estimator can
be re-run without recompiling: ``--reestimate``); a run skips the files that exist, so it resumes after a stop.
``--table`` prints the Markdown tables of docs/benchmarks.md from the files.

  source launch/perf_env.sh
  PYTHONPATH=.venv/libtpu JAX_PLATFORMS=cpu nice -n 15 python benchmarks/tpu_estimates.py \\
      --rows bert_large_s512,gpt2_124m_s1024 --slices v5e \\
      --variants base,splash+scan,splash+unrolled,splash+unrolled+fsdp --out runs/tpu_estimates
  python benchmarks/tpu_estimates.py --rows bert_large_s512,gpt2_124m_s1024 --table --breakdown splash+unrolled \\
      --out runs/tpu_estimates

``--extra model.num_layers=4`` (with another ``--out``) compiles a shallower twin of every variant, minutes instead
of most of an hour on a loaded 2-core host.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")  # no TPU host: quiets libtpu's metadata lookups
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # beside other compile processes (libtpu's lock file)

# slice -> (topology, chips): 4-chip slices, and a whole v5e-256 (the runbook's pod) where a per-chip cost
# depends on the chip count (a state sharded by fsdp, the update it shards, the collectives' rings)
SLICES = {"v5e": ("v5e:2x2", 4), "v5p": ("v5p:2x2x1", 4), "v5e-256": ("v5e:16x16", 256)}
# row -> (preset, sequence length, the runbook's per-chip batch on v5e-256, overrides)
ROWS = {
    "bert_base_s128": ("bert_base", 128, 16, []),
    "bert_large_s128": ("bert_large", 128, 16, []),
    "bert_large_s512": ("bert_large", 512, 4, ["data.max_predictions_per_seq=80"]),
    "gpt2_124m_s1024": ("gpt2_124m", 1024, 2, []),
    "gpt2_355m_s1024": ("gpt2_355m", 1024, 2, []),
    "xlnet_base_s512": ("xlnet_base", 512, 8, []),
    "xlnet_large_s512": ("xlnet_large", 512, 2, []),
    "gpt2_774m_s1024": ("gpt2_774m", 1024, 2, []),
    "gpt2_1558m_s1024": ("gpt2_1558m", 1024, 2, []),
    # the LAMB phases at their v5p-128 rows a chip (the configs' comments): 1,024 as 8 microbatches, 512 as 16
    "bert_large_lamb_phase1_s128": ("bert_large_lamb_phase1", 128, 1024, ["train.grad_accum_steps=8"]),
    "bert_large_lamb_phase2_s512": ("bert_large_lamb_phase2", 512, 512, ["train.grad_accum_steps=16"]),
    # and at their v5e-256 rows a chip, as the configs run them: 256 as 8 microbatches of 32, 128 as 32 of 4
    "bert_large_lamb_phase1_s128_v5e256": ("bert_large_lamb_phase1", 128, 256, ["train.grad_accum_steps=8"]),
    "bert_large_lamb_phase2_s512_v5e256": ("bert_large_lamb_phase2", 512, 128, ["train.grad_accum_steps=32"]),
}
# variant token -> (overrides, dropout key implementation, per-chip batch factor); a variant is tokens joined by
# '+' ("splash+unrolled"), "base" the preset as it is
TOKENS = {
    "base": ([], None, 1),
    "no_attn_dropout": (["model.attention_dropout=0.0"], None, 1),
    "paper_dropout": (["model.attention_dropout=0.1", "model.attention_impl='auto'"], None, 1),
    # the pod presets' settings before they were chosen by this estimate: "paper_dropout+scan"
    "einsum": (["model.attention_impl='einsum'"], None, 1),
    "xla": (["model.attention_dropout=0.0", "model.attention_impl='xla'"], None, 1),
    "splash": (["model.attention_dropout=0.0", "model.attention_impl='splash'"], None, 1),
    "rbg": ([], "rbg", 1),
    "unrolled": (["model.scan_layers=false"], None, 1),
    "scan": (["model.scan_layers=true"], None, 1),
    "remat_none": (["model.remat='none'"], None, 1),
    "save_dots": (["model.remat='save_dots'"], None, 1),
    "full": (["model.remat='full'"], None, 1),
    "fsdp": (["mesh.data=1", "mesh.fsdp=-1"], None, 1),
    # the state sharded over groups of 16 chips, the batch over the groups as well (a v5e-256: 16 x 16)
    "fsdp16": (["mesh.data=-1", "mesh.fsdp=16"], None, 1),
    # the tanh approximation of GELU (GPT's; transformers' gelu_new), not the exact erf GELU the released BERT
    # weights were trained with (the BERT presets' default, kept)
    "gelu_tanh": (["model.hidden_act='gelu_tanh'"], None, 1),
    "x2": ([], None, 2),
    "x4": ([], None, 4),
    "x8": ([], None, 8),
}


def variant_parts(variant: str) -> tuple[list[str], str | None, int]:
    overrides, prng, factor = [], None, 1
    for token in variant.split("+"):
        o, p, f = TOKENS[token]
        overrides, prng, factor = overrides + o, p or prng, factor * f
    return overrides, prng, factor


KEEP = ("model", "mesh", "devices", "device_kind", "params", "state_bytes_per_device", "memory_per_device",
        "model_flops_per_step", "compile_s", "notes", "estimate")


def variant_overrides(row: str, variant: str, extra: list[str],
                      chips: int = 4) -> tuple[str, list[str], str | None, int]:
    preset, seq, per_chip, row_extra = ROWS[row]
    overrides, prng, factor = variant_parts(variant)
    batch = per_chip * factor * chips
    return preset, [f"data.max_seq_length={seq}", f"train.batch_size={batch}", "mesh.data=-1", *row_extra,
                    *overrides, *extra], prng, per_chip * factor


def compile_one(row: str, slice_name: str, variant: str, extra: list[str], out: Path) -> dict:
    from ptm_jax.bench.aot import compile_report
    from ptm_jax.config_loading import load_config

    preset, overrides, prng, per_chip = variant_overrides(row, variant, extra, SLICES[slice_name][1])
    stem = out / f"{row}-{slice_name}-{variant}"
    cfg = load_config(preset, overrides)
    t0 = time.perf_counter()
    record = {"row": row, "slice": slice_name, "variant": variant, "preset": preset, "per_chip_batch": per_chip,
              "overrides": overrides, "prng": prng, "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS", "")}
    try:
        r = compile_report(cfg, None, SLICES[slice_name][0], estimate=True, hlo_path=f"{stem}.hlo", prng=prng)
        record.update({k: r.get(k) for k in KEEP}, ok=True)
        with open(f"{stem}.hlo", "rb") as src, gzip.open(f"{stem}.hlo.gz", "wb") as dst:
            dst.write(src.read())
        os.remove(f"{stem}.hlo")
    except Exception as e:  # the compiler's refusal (e.g. HBM), reported in the table
        record.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    record["seconds"] = time.perf_counter() - t0
    Path(f"{stem}.json").write_text(json.dumps(record, indent=1, default=float))
    return record


def reestimate(path: Path) -> None:
    """Re-runs the estimator on a stored HLO (after a change to bench/cost_model.py), keeping the compile."""
    from ptm_jax.bench import cost_model

    record = json.loads(path.read_text())
    hlo = Path(str(path)[: -len(".json")] + ".hlo.gz")
    if not record.get("ok") or not hlo.exists():
        return
    old = record["estimate"] or {}
    n = record["devices"]
    flops = record.get("model_flops_per_step")
    est = cost_model.estimate(gzip.open(hlo, "rt").read(), record["device_kind"], n, old.get("device_cores"),
                              None if flops is None else flops / n)
    est["libtpu"] = old.get("libtpu")
    record["estimate"] = est
    path.write_text(json.dumps(record, indent=1, default=float))


def _largest_non_matmul(e: dict) -> str:
    cats = {k: v for k, v in e["breakdown_s"].items() if not k.startswith("matmul") and k != "collectives"}
    worst = max(cats, key=cats.get) if cats else "-"
    return f"{worst} {cats.get(worst, 0) * 1e3:,.1f} ms"


def table_row(r: dict) -> str:
    """One variant: compute (with the modelled splash time), collectives, step exposed / overlapped, model FLOPs
    at the peak, estimated MFU exposed / overlapped, the compiler's peak memory a chip, the largest cost that
    is not a matmul. Every time an ESTIMATE of the compiler's cost model."""
    head = f"| {r['variant']} | {r['per_chip_batch']} |"
    if not r.get("ok"):
        return f"{head} refused: {r['error'][:90]} | | | | | | |"
    e = r["estimate"]
    if not e:
        return f"{head} no estimate | | | | | | |"
    splash = e.get("modelled_kernels_s") or 0.0
    shift = e.get("modelled_memory_bound_s") or 0.0
    modelled = [f"splash {splash * 1e3:.1f}"] if splash else []
    modelled += [f"shift kernels and reverses {shift * 1e3:.1f}"] if shift else []
    compute = f"{e['compute_s'] * 1e3:,.1f} ms" + (f" ({', '.join(modelled)} modelled)" if modelled else "")
    peak = r["memory_per_device"]["peak_bytes"] / 2**30
    mfu = f"{100 * (e.get('mfu_exposed') or 0):.1f}% / {100 * (e.get('mfu_overlapped') or 0):.1f}%"
    return (f"{head} {compute} | {e['collectives_s'] * 1e3:,.1f} ms | {e['step_s_exposed'] * 1e3:,.1f} / "
            f"{e['step_s_overlapped'] * 1e3:,.1f} ms | {e['model_flops_at_peak_s'] * 1e3:,.1f} ms | {mfu} | "
            f"{peak:.2f} | {_largest_non_matmul(e)} |")


def table(out: Path, rows: list[str], slices: list[str], breakdown: str = "base") -> None:
    for row in rows:
        for s in slices:
            recs = [json.loads(p.read_text()) for p in sorted(out.glob(f"{row}-{s}-*.json"))]
            if not recs:
                continue
            topology, chips = SLICES[s]
            print(f"\n{row} on {topology} ({chips} chips); every time an ESTIMATE of the TPU compiler's cost model "
                  f"(libtpu {next((r['estimate'] or {}).get('libtpu') for r in recs if r.get('ok'))})\n")
            print("| variant | per chip | compute | collectives (exposed) | estimated step (exposed / overlapped) "
                  "| model FLOPs at peak | estimated MFU (exposed / overlapped) | peak GiB per chip | "
                  "largest non-matmul category |")
            print("|---|---|---|---|---|---|---|---|---|")
            for r in sorted(recs, key=lambda r: (r["variant"] != "base", r["variant"])):
                print(table_row(r))
            chosen = next((r for r in recs if r["variant"] == breakdown and r.get("ok") and r["estimate"]), None)
            if chosen:
                e = chosen["estimate"]
                parts = sorted(((k, v) for k, v in e["breakdown_s"].items() if v >= 5e-6), key=lambda kv: -kv[1])
                print(f"\n{breakdown}, by category (ms; all but the collectives sum to the compute, "
                      f"{e['compute_s'] * 1e3:,.1f} ms): " + ", ".join(f"{k} {v * 1e3:,.2f}" for k, v in parts))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--slices", default="v5e")
    p.add_argument("--variants", default="base", help="comma-separated; each a '+'-joined list of "
                   f"{', '.join(TOKENS)}")
    p.add_argument("--out", default="runs/tpu_estimates")
    p.add_argument("--extra", action="append", default=[], help="an override added to every compile")
    p.add_argument("--table", action="store_true", help="print the tables of the stored results and stop")
    p.add_argument("--breakdown", default="base", help="the variant whose time by category --table prints")
    p.add_argument("--reestimate", action="store_true", help="re-run the estimator on the stored HLO and stop")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, slices = args.rows.split(","), args.slices.split(",")
    if args.reestimate:
        for path in sorted(out.glob("*.json")):
            reestimate(path)
    if args.table or args.reestimate:
        table(out, rows, slices, args.breakdown)
        return 0
    for row in rows:
        for s in slices:
            for v in args.variants.split(","):
                if (out / f"{row}-{s}-{v}.json").exists():
                    continue
                r = compile_one(row, s, v, args.extra, out)
                e = r.get("estimate") or {}
                print(json.dumps({"row": row, "slice": s, "variant": v, "ok": r["ok"], "seconds": r["seconds"],
                                  "step_ms": None if not e else e["step_s_exposed"] * 1e3,
                                  "mfu": e.get("mfu_exposed"), "error": r.get("error")}), flush=True)
    table(out, rows, slices, args.breakdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
