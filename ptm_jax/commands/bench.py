"""`ptm bench` and `ptm compile`: argument parsing, a printed table and a JSON file.

The timing and compiling are ``bench/harness.py`` and ``bench/aot.py``. The same commands also run stand-alone,
without the rest of the CLI, as ``python -m ptm_jax.commands.bench bench ...`` / ``... compile ...``. Each
handler returns an exit code and raises ``PtmError`` subclasses for user errors.

    ptm bench -c bert_small --steps 20 --warmup 3 --json runs/bench/bert_small.json
    ptm bench -c bert_base model.dtype='bfloat16' --peak-tflops 989
    ptm bench -c bert_small --mode data data.corpus='../shared/data/corpus/gutenberg/*.txt'
    ptm bench -c bert_small --variant bf16:model.dtype=bfloat16 --variant rbg:prng=rbg --rounds 3
    ptm bench -c bert_base model.dtype='bfloat16' --training   # training configuration vs synthetic upper bound
    ptm compile -c bert_large --mesh 2,2,2 --device-type cpu
    ptm compile -c bert_large --device-type v5e:2x2 mesh.data=-1 train.batch_size=16   # + estimated step time
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def _config_args(p: argparse.ArgumentParser, default_preset: str) -> None:
    p.add_argument("-c", "--config", default=default_preset,
                   help="preset name in configs/ or a .toml path (default: %(default)s)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="config overrides, e.g. model.dtype='bfloat16' model.remat='full' train.batch_size=64")


def _load(args: argparse.Namespace):
    from ptm_jax.config_loading import load_config

    return load_config(args.config, list(args.overrides))


def _gib(n: Any) -> str:
    return "-" if n is None else f"{n / 2**30:.3f} GiB"


def _num(x: Any, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def _print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(title)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def _fields(*pairs: tuple[str, Any], sep: str = "=") -> str:
    """' name=value' for each field the family has (None: a field of other families, e.g. a Transformer's
    layers for word2vec), so a header never prints None."""
    return "".join(f" {k}{sep}{v}" if k else f" {v}" for k, v in pairs if v is not None)


def _shape(m: dict[str, Any]) -> str:
    """'batch B x seq S (P=..)' or 'batch B' for families whose example is one token (word2vec's center)."""
    seq = f" x seq {m['seq_len']}" if m.get("seq_len") not in (None, 1) else ""
    return f"batch {m['batch']}{seq}{_fields(('P', m.get('predictions')))}"


def print_train(r: dict[str, Any]) -> None:
    m, mem = r["model"], r.get("memory_per_device", {})
    _print_rows(
        f"ptm bench: {m['family']}{_fields(('L', m['layers']), ('H', m['hidden']), ('heads', m['heads']))}"
        f"{_fields(('FFN', m['ffn']), ('dim', m.get('dim')), ('V', m['vocab']))} | {_shape(m)} |"
        f"{_fields(('', m['dtype']), ('remat', m['remat']), ('scan', m['scan_layers']))}"
        f"{_fields(('attention', m['attention_impl']), ('accum', m['grad_accum_steps']))} "
        f"mlm_head={r['mlm_head']} | mesh {r['mesh']} on {r['devices']} x {r['device_kind']}",
        [
            ("parameters", f"{r['params']:,}"),
            ("compile (lower+compile)", f"{r['compile_s']:.2f} s"),
            ("step time median", f"{r['step_s_median'] * 1e3:.2f} ms over {r['steps']} steps "
                                 f"(after {r['warmup']} warm-up)"),
            ("step time p10 / p90 / std", f"{r['step_s_p10'] * 1e3:.2f} / {r['step_s_p90'] * 1e3:.2f} / "
                                          f"{r['step_s_std'] * 1e3:.2f} ms"),
            ("step CPU time median", f"{r['step_cpu_s_median'] * 1e3:.2f} ms (all threads)"),
            ("tokens/s", _num(r["tokens_per_s"], ",.0f")),
            ("examples/s", _num(r["examples_per_s"], ",.1f")),
            ("model FLOPs/step", f"{r['model_flops_per_step']:.4g} "
                                 f"(XLA matmul {_num(r['xla_matmul_flops_per_step'], '.4g')}, "
                                 f"XLA all ops {_num(r['xla_flops_per_step'], '.4g')})"),
            *_full_attention_rows(r),
            ("model TFLOP/s", f"{r['model_tflops_per_s']:.3f}"),
            ("MFU", "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}% of {r['peak_tflops_per_device']} "
                                                  "TFLOP/s per device"),
            ("memory/device (arg+out+temp)", f"{_gib(mem.get('total_bytes'))} (temp {_gib(mem.get('temp_bytes'))}, "
                                             f"donated alias {_gib(mem.get('alias_bytes'))})"),
            ("final loss", f"{r['final_loss']:.4f}"),
            ("load average", " ".join(str(x) for x in r["env"]["load_average"])),
        ])


def print_data(r: dict[str, Any]) -> None:
    _print_rows(
        f"ptm bench --mode data: corpus {r['corpus']} ({r['documents']:,} documents, {r['tokens']:,} tokens, "
        f"{r['tokenizer']} vocab {r['vocab_size']:,})",
        [
            ("raw text -> tokenizer + cache", f"{r['prepare_s']:.2f} s"
             + (f" ({r['prepare_tokens_per_s']:,.0f} tokens/s)" if r.get("prepare_tokens_per_s") else "")),
            ("reopen tokenizer + cache", f"{r['reopen_s'] * 1e3:.1f} ms"),
            ("MLM+NSP stream", f"{r['examples_per_s']:,.0f} examples/s ({r['batches']} batches of "
                               f"{r['batch_size']} x {r['seq_len']})"),
            ("per CPU core", f"{r['examples_per_s_per_core']:,.0f} examples/s ({r['cores']} cores)"),
            ("per CPU-second", _num(r.get("examples_per_cpu_s"), ",.0f")),
            ("real tokens per example", f"{r['real_tokens_per_example']:.1f}"),
            ("load average", " ".join(str(x) for x in r["env"]["load_average"])),
        ])


def _per_step(r: dict[str, Any], key: str) -> float | None:
    return None if r.get(key) is None else r[key] * r["devices"]


def print_compile(r: dict[str, Any]) -> None:
    mem, m = r["memory_per_device"], r["model"]
    _print_rows(
        f"ptm compile: {m['family']}{_fields(('L', m['layers']), ('H', m['hidden']), ('dim', m.get('dim')))}"
        f"{_fields(('V', m['vocab']))} | {_shape(m)} |"
        f"{_fields(('', m['dtype']), ('remat', m['remat']), ('scan', m['scan_layers'])) or ' -'} | mesh {r['mesh']} "
        f"on {r['devices']} x {r['device_kind']} ({r['device_type']})",
        [
            ("parameters", f"{r['params']:,}"),
            ("train state per device", _gib(r["state_bytes_per_device"])),
            ("arguments per device", _gib(mem.get("argument_bytes"))),
            ("outputs per device", _gib(mem.get("output_bytes")) + f" (aliased to donated inputs: "
                                                                   f"{_gib(mem.get('alias_bytes'))})"),
            ("temporaries per device", _gib(mem.get("temp_bytes"))),
            ("total per device (arg+out+temp)", _gib(mem.get("total_bytes"))),
            ("peak per device (minus aliased)", _gib(mem.get("peak_bytes"))),
            ("model FLOPs/step (analytic)", _num(r["model_flops_per_step"], ".6g")),
            ("XLA FLOPs/step: matmul, all ops", f"{_num(_per_step(r, 'xla_matmul_flops_per_device'), '.6g')}, "
                                                f"{_num(_per_step(r, 'xla_flops_per_device'), '.6g')} "
                                                "(per device x devices; all ops count a scan body once)"),
            ("compile time", f"{r['compile_s']:.2f} s"),
        ] + [("note", n) for n in r.get("notes", [])])
    if r.get("estimate"):
        print_estimate(r["estimate"], r["devices"])


def print_estimate(e: dict[str, Any], devices: int, top: int = 10) -> None:
    """The compiler's estimated step time (``bench/cost_model.py``): totals, MFU, breakdown, top operations."""
    ms = lambda s: f"{s * 1e3:,.2f} ms"  # noqa: E731
    mfu = lambda key: "-" if e.get(key) is None else f"{100 * e[key]:.1f}%"  # noqa: E731
    rows = [
        ("source", f"TPU cost model of libtpu {e.get('libtpu') or '?'} (an ESTIMATE, not a measurement)"),
        ("chip", f"{e['chip']}: clock {e['clock_hz'] / 1e9:.2f} GHz, {e['peak_tflops_per_device']:.1f} TFLOP/s "
                 f"bf16 per device ({e['device_cores']} TensorCore(s)), ICI link {e['ici_link_gbps']:.0f} GB/s"),
        ("compute (sum of estimated_cycles)", f"{ms(e['compute_s'])} over {e['ops_estimated']} scheduled ops"),
        ("collectives (bytes / ICI)", ms(e["collectives_s"])),
        ("step: exposed / overlapped", f"{ms(e['step_s_exposed'])} / {ms(e['step_s_overlapped'])}"),
    ]
    if e.get("model_flops_at_peak_s") is not None:
        rows.append(("model FLOPs at peak", ms(e["model_flops_at_peak_s"])))
        rows.append(("estimated MFU: exposed / overlapped", f"{mfu('mfu_exposed')} / {mfu('mfu_overlapped')}"))
    missing = e.get("ops_without_estimate") or {}
    if missing:
        rows.append(("ops without an estimate (runs)", ", ".join(f"{k} {v:,.0f}" for k, v in list(missing.items())[:6])
                     + " (scalar, in-place or async: counted as 0)"))
    total = e["compute_s"] or 1.0
    for cat, secs in sorted(e["breakdown_s"].items(), key=lambda kv: -kv[1]):
        rows.append((f"  {cat}", ms(secs) + ("" if cat == "collectives" else f" ({100 * secs / total:.1f}%)")))
    rows += [("note", n) for n in e.get("notes", [])]
    _print_rows(f"estimated step time per device ({devices} devices)", rows)
    print(f"  top operations (share of the compute estimate):")
    for op in e["top_ops"][:top]:
        print(f"    {op['seconds'] * 1e3:8.2f} ms {100 * op['share']:5.1f}%  x{op['times']:<4.0f} {op['category']:<34} "
              f"{op['op_name'][-90:] or op['opcode']}")


def print_variants(results: dict[str, dict[str, Any]]) -> None:
    base = next(iter(results.values()))
    m = base["model"]
    print(f"ptm bench (interleaved A/B, {base['rounds']} rounds, {base['steps']} timed steps per variant): "
          f"{m['family']} L={m['layers']} H={m['hidden']} V={m['vocab']} | batch {m['batch']} x seq {m['seq_len']} | "
          f"mesh {base['mesh']} on {base['devices']} x {base['device_kind']}")
    head = (f"  {'variant':<26} {'median ms':>10} {'p10-p90 ms':>13} {'min ms':>7} {'CPU ms':>7} {'ex/s':>8} "
            f"{'vs first':>8} {'TFLOP/s':>8} {'MFU':>6} {'mem GiB':>8} {'compile s':>9}")
    print(head)
    for name, r in results.items():
        print(f"  {name:<26} {r['step_s_median'] * 1e3:>10.1f} "
              f"{r['step_s_p10'] * 1e3:>6.0f}-{r['step_s_p90'] * 1e3:<6.0f} {r['step_s_min'] * 1e3:>7.0f} "
              f"{r['step_cpu_s_median'] * 1e3:>7.0f} {r['examples_per_s']:>8.2f} "
              f"{base['step_s_median'] / r['step_s_median']:>7.2f}x {r['model_tflops_per_s']:>8.4f} "
              f"{'-' if r['mfu'] is None else format(100 * r['mfu'], '.1f') + '%':>6} "
              f"{r['memory_per_device'].get('total_bytes', 0) / 2**30:>8.3f} {r['compile_s']:>9.1f}")
    print(f"  load average {' '.join(str(x) for x in base['env']['load_average'])}")


TRAINING_LEGEND = ("training = the training configuration (dropout as configured, the configured attention "
                   "path, batches from the real feed held in memory); upper_bound = synthetic upper bound "
                   "(dropout 0, synthetic batches)")


def parse_variant(text: str, args: argparse.Namespace):
    """'NAME:key=value,key=value' -> (name, Variant); keys mlm_head and prng are benchmark switches."""
    from ptm_jax.bench.harness import Variant
    from ptm_jax.config_loading import load_config
    from ptm_jax.errors import ConfigError

    name, sep, rest = text.partition(":")
    if not sep or not name:
        raise ConfigError(f"--variant {text!r}: expected NAME:key=value[,key=value...], e.g. "
                          "bf16:model.dtype=bfloat16 or rbg:prng=rbg")
    items = [x.strip() for x in rest.split(",") if x.strip()]
    switches = {"mlm_head": args.mlm_head, "prng": args.prng}
    overrides = []
    for item in items:
        key, _, value = item.partition("=")
        if key in switches:
            switches[key] = value.strip("'\"")
        else:
            overrides.append(item)
    cfg = load_config(args.config, list(args.overrides) + overrides)
    return name, Variant(cfg, switches["mlm_head"], switches["prng"])


def _write(result: dict[str, Any], path: str | None) -> None:
    if path:
        from ptm_jax.bench.harness import write_json

        print(f"wrote {write_json(result, path)}")


def cmd_bench(args: argparse.Namespace) -> int:
    cfg = _load(args)
    if args.mode == "data":
        from ptm_jax.bench.harness import bench_data

        result = bench_data(cfg, args.steps, warmup=args.warmup, fresh=not args.reuse_cache)
        print_data(result)
    elif args.training:
        from ptm_jax.bench.aot import parse_mesh
        from ptm_jax.bench.harness import bench_variants, training_and_upper_bound

        result = bench_variants(training_and_upper_bound(cfg, args.mlm_head, args.prng), steps=args.steps,
                                warmup=args.warmup, rounds=args.rounds,
                                mesh_shape=parse_mesh(args.mesh) if args.mesh else None,
                                peak_tflops=args.peak_tflops, device_kind=args.device_kind,
                                log=lambda msg: print(msg, file=sys.stderr, flush=True))
        print_variants(result)
        print(f"  {TRAINING_LEGEND}")
    elif args.variant:
        from ptm_jax.bench.aot import parse_mesh
        from ptm_jax.bench.harness import Variant, bench_variants

        variants = {"baseline": Variant(cfg, args.mlm_head, args.prng)}
        for text in args.variant:
            name, v = parse_variant(text, args)
            variants[name] = v
        result = bench_variants(variants, steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                mesh_shape=parse_mesh(args.mesh) if args.mesh else None,
                                peak_tflops=args.peak_tflops, device_kind=args.device_kind,
                                log=lambda msg: print(msg, file=sys.stderr, flush=True))
        print_variants(result)
    else:
        from ptm_jax.bench.aot import parse_mesh
        from ptm_jax.bench.harness import bench

        mesh = parse_mesh(args.mesh) if args.mesh else None
        result = bench(cfg, steps=args.steps, warmup=args.warmup, mesh_shape=mesh, peak_tflops=args.peak_tflops,
                       device_kind=args.device_kind, mlm_head=args.mlm_head, prng=args.prng)
        print_train(result)
    _write(result, args.json)
    return 0


def _full_attention_rows(r: dict) -> list[tuple[str, str]]:
    """The causal attention counted in full beside MaxText's half (``bench/flops.py``), where they differ."""
    full = r.get("model_flops_per_step_full_attention")
    if full is None or full == r["model_flops_per_step"]:
        return []
    mfu = r.get("mfu_full_attention")
    return [("model FLOPs/step, causal attention in full", f"{full:.4g}"
             + ("" if mfu is None else f" (MFU {100 * mfu:.1f}%)"))]


def cmd_compile(args: argparse.Namespace) -> int:
    from ptm_jax.bench.aot import compile_report, parse_mesh, virtual_cpu_devices

    mesh = parse_mesh(args.mesh) if args.mesh else None
    if (args.device_type or "").lower() == "cpu" and mesh is not None and -1 not in mesh:
        virtual_cpu_devices(mesh[0] * mesh[1] * mesh[2])  # before anything starts the JAX backends
    cfg = _load(args)
    from ptm_jax import versions
    from ptm_jax.parallel import compile_cache

    versions.log_versions()
    compile_cache.enable(cfg.output_dir)  # one process: only with PTM_COMPILE_CACHE=<path>
    result = compile_report(cfg, mesh, args.device_type, estimate=args.estimate, hlo_path=args.hlo,
                            prng=args.prng)
    print_compile(result)
    _write(result, args.json)
    return 0


def register(subparsers) -> None:
    """Adds ``bench`` and ``compile``; each parser gets ``handler=`` (call it with the parsed args)."""
    p = subparsers.add_parser("bench", help="time the train step (synthetic batches) or the data pipeline",
                              description="Compile and time the jitted train step on synthetic batches of the "
                              "configured shapes (--mode train), or the MLM+NSP tf.data stream from raw text and "
                              "from the token cache (--mode data). Prints a table; --json writes every figure.")
    _config_args(p, "bert_small")
    p.add_argument("--mode", choices=("train", "data"), default="train")
    p.add_argument("--steps", type=int, default=20, help="timed steps (train) or timed batches (data)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps/batches first")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="per-device peak for MFU (default: bf16 dense peak of the device kind; none on CPU)")
    p.add_argument("--device-kind", default=None, help="look the peak up for this device kind instead")
    p.add_argument("--mesh", default=None, help="data,fsdp,tensor (default: the config's mesh)")
    p.add_argument("--mlm-head", choices=("sparse", "dense"), default="sparse",
                   help="dense: benchmark-only MLM logits at all positions (what the gather saves)")
    p.add_argument("--prng", choices=("threefry2x32", "rbg", "unsafe_rbg"), default=None,
                   help="key implementation of the dropout RNG (default: JAX's threefry2x32)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:key=value[,key=value]",
                   help="A/B mode (repeatable): also time the config with these overrides, interleaved with the "
                   "baseline in --rounds rounds; keys mlm_head and prng set the switches above")
    p.add_argument("--training", action="store_true",
                   help="time the training configuration (dropout as configured, batches from the real feed over "
                   "data.corpus held in memory) beside the synthetic upper bound (dropout 0, synthetic batches), "
                   "interleaved in --rounds rounds")
    p.add_argument("--rounds", type=int, default=3, help="A/B mode: interleaved timing rounds")
    p.add_argument("--reuse-cache", action="store_true",
                   help="data mode: use output_dir's tokenizer/cache as is instead of building fresh ones")
    p.add_argument("--json", default=None, metavar="OUT", help="write all figures to this JSON file")
    p.set_defaults(handler=cmd_bench)

    p = subparsers.add_parser("compile", help="ahead-of-time compile the sharded train step; per-device memory "
                              "and, for a TPU, the compiler's estimated step time",
                              description="Lower and compile the train step for a mesh without running it and "
                              "print the per-device memory XLA assigns; for a TPU topology also the step time the "
                              "TPU compiler's cost model estimates (an estimate, not a measurement), the estimated "
                              "MFU and where the time goes.")
    _config_args(p, "bert_base")
    p.add_argument("--mesh", default=None, help="data,fsdp,tensor, e.g. 2,2,2 (default: the config's mesh)")
    p.add_argument("--device-type", default=None,
                   help="local (default), cpu (virtual CPU devices), or a TPU topology such as v5e:4x4")
    p.add_argument("--estimate", action=argparse.BooleanOptionalAction, default=None,
                   help="the TPU compiler's estimated step time, MFU and breakdown (default: on for a TPU topology; "
                   "an estimate from libtpu's cost model, not a measurement)")
    p.add_argument("--hlo", default=None, metavar="OUT", help="also write the compiled program's HLO text here")
    p.add_argument("--prng", choices=("threefry2x32", "rbg", "unsafe_rbg"), default=None,
                   help="key implementation of the dropout RNG (default: JAX's, as the run's)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the figures to this JSON file")
    p.set_defaults(handler=cmd_compile)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: python -m ptm_jax.commands.bench bench|compile ..."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ptm_jax.errors import PtmError

    parser = argparse.ArgumentParser(prog="ptm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args, extra = parser.parse_known_args(argv)
    stray = [x for x in extra if "=" not in x or x.startswith("-")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    args.overrides = list(args.overrides) + extra  # section.key=value given after an option
    try:
        return args.handler(args)
    except PtmError as e:
        print(f"ptm {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
