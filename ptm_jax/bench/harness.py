"""`ptm bench`: time the real jitted train step on synthetic batches, and the tf.data pipeline on real text.

Train mode builds the configured objective (``ptm_jax.objectives.registry``) over a two-document dummy source,
fills batches of the exact training shapes with random token ids and BERT-like masking (google-research/bert
create_pretraining_data.py: ~15% of the real tokens, at most ``max_predictions_per_seq``, sorted positions,
weight 1 on real predictions), places them on the mesh once, compiles the step through
``ptm_jax.train.loop.compile_objective`` (the step ``fit`` runs: same shardings, same donation) and times
``steps`` calls after ``warmup``, blocking on each. Figures: compile time, step-time median / p10 / p90 / std,
tokens/s and examples/s, model FLOPs (``flops.py``), XLA's FLOPs, MFU against the device's bf16 peak, per-device
memory from ``memory_analysis()`` and the parameter count.

``ptm bench --training`` times two variants interleaved (``training_and_upper_bound``): the training
configuration (dropout as configured, the configured attention path, the first batches of the real feed over
the configured corpus held in memory) and the synthetic upper bound (every dropout 0, synthetic batches).

Data mode times what feeds the step: raw text -> tokenizer -> token cache (``stages.prepare_corpus``), then the
MLM+NSP tf.data stream from the cache, in examples/s and per CPU core.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from ptm_jax import fs
from ptm_jax.bench import flops as flops_lib
from ptm_jax.config import MeshConfig, RunConfig
from ptm_jax.errors import ConfigError

# ----------------------------------------------------------------------------------------------------
# Objective over synthetic data


def _dummy_corpus(cfg: RunConfig) -> Any:
    from ptm_jax.data.pretraining.source import ArraySource, SpecialIds

    v = cfg.model.vocab_size
    docs = [[np.arange(5, 9) % v], [np.arange(9, 12) % v]]
    special = SpecialIds(pad=0, cls=1, sep=2, mask=3, vocab_size=v)
    tokenizer = types.SimpleNamespace(pad_id=0, sep_id=2, eos_id=2)  # what the causal-LM builder reads
    source = ArraySource(docs)
    source.meta = {"fingerprint": "bench-synthetic"}  # the documents stand for the token cache (artifact keys)
    corpus = types.SimpleNamespace(train=source, eval=None, special=special, tokenizer=tokenizer, artifacts={},
                                   cache=source)
    from ptm_jax.families import registry
    from ptm_jax.train.stages import build_artifacts

    family = registry.family_of_objective(cfg.objective)
    if family.pretraining.artifacts:  # the family's derived data, over these documents, in a scratch folder
        corpus.artifacts = build_artifacts(cfg, corpus, family, fs.path(tempfile.mkdtemp(prefix="ptm-bench-")))
    return corpus


def build_bench_objective(cfg: RunConfig, mlm_head: str = "sparse") -> Any:
    from ptm_jax.families import registry
    from ptm_jax.objectives.registry import build_objective

    if registry.family_of_objective(cfg.objective).bench.corpus == "configured":
        from ptm_jax.train.stages import prepare_corpus

        corpus = prepare_corpus(cfg)  # as `ptm data` does: into the run's cache, which the run then reuses
    else:
        corpus = _dummy_corpus(cfg)
    objective = build_objective(cfg, corpus)
    if mlm_head == "sparse":
        return objective
    variants = registry.get(cfg.model.family).bench.variants
    if mlm_head not in variants:
        raise ConfigError(f"--mlm-head={mlm_head!r}: expected sparse" + "".join(f" or {v}" for v in variants)
                          + f" for model.family={cfg.model.family!r}")
    return variants[mlm_head](objective)


def synthetic_batch(example: dict[str, np.ndarray], cfg: RunConfig, rng: np.random.Generator
                    ) -> dict[str, np.ndarray]:
    """Random data in the shapes and dtypes of ``example`` (one global batch): the family's own
    (``Bench.synthetic_batch``), else ``example`` unchanged."""
    from ptm_jax.families import registry

    make = registry.get(cfg.model.family).bench.synthetic_batch
    return make(example, cfg, rng) if make is not None else {k: np.array(v) for k, v in example.items()}


def packed_lm_batch(example: dict[str, np.ndarray], cfg: RunConfig, rng: np.random.Generator
                    ) -> dict[str, np.ndarray]:
    """Rows packed full of random ids (no padding) and random language-model targets: ``target_ids`` /
    ``target_weights`` and, where the example has them, a ``target_mapping`` of distinct positions and the
    ``perm_mask`` of one random factorization order (the data builders are not part of the timed step)."""
    out = {k: np.array(v) for k, v in example.items()}
    v = cfg.model.vocab_size
    b, s = out["input_ids"].shape
    out["input_ids"] = rng.integers(5, max(v, 6), (b, s)).astype(np.int32)
    return _lm_targets(out, v, b, s, rng)


def _lm_targets(out: dict[str, np.ndarray], v: int, b: int, s: int, rng: np.random.Generator
                ) -> dict[str, np.ndarray]:
    """Synthetic targets of the LM objectives (their data builders are not part of the timed step)."""
    if "target_ids" in out:  # next tokens at every position, or the P targets
        out["target_ids"] = rng.integers(5, max(v, 6), out["target_ids"].shape).astype(np.int32)
        out["target_weights"] = np.ones(out["target_weights"].shape, np.float32)
    if "target_mapping" in out:  # P targets at random distinct positions, one permutation order
        p = out["target_mapping"].shape[1]
        pos = np.stack([np.sort(rng.choice(s, size=p, replace=False)) for _ in range(b)])
        out["target_mapping"] = (pos[:, :, None] == np.arange(s)[None, None, :]).astype(np.float32)
        rank = rng.permuted(np.tile(np.arange(s), (b, 1)), axis=1)
        out["perm_mask"] = (rank[:, :, None] <= rank[:, None, :]).astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------------
# Figures shared by `bench` and `compile`


def memory_figures(compiled: Any) -> dict[str, int]:
    """Per-device bytes of a compiled executable (XLA's buffer assignment)."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        m = None
    if m is None:
        return {}
    arg, out, temp = int(m.argument_size_in_bytes), int(m.output_size_in_bytes), int(m.temp_size_in_bytes)
    alias = int(getattr(m, "alias_size_in_bytes", 0))
    return {"argument_bytes": arg, "output_bytes": out, "temp_bytes": temp, "alias_bytes": alias,
            "total_bytes": arg + out + temp,
            "peak_bytes": arg + out + temp - alias}  # donated state: outputs reuse the argument buffers


def param_count(abstract_params: Any) -> int:
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(abstract_params)))


def make_bench_mesh(cfg: RunConfig, mesh_shape: tuple[int, int, int] | None, devices: list | None = None):
    from ptm_jax.parallel.mesh import make_mesh

    mcfg = MeshConfig(*mesh_shape) if mesh_shape is not None else cfg.mesh
    devices = list(devices if devices is not None else jax.devices())
    if mesh_shape is not None and math.prod(mesh_shape) < len(devices):
        devices = devices[: math.prod(mesh_shape)]
    return make_mesh(mcfg, devices)


def check_batch(cfg: RunConfig, mesh: Any) -> None:
    """The global batch is split over data x fsdp (and into grad_accum_steps microbatches of that split)."""
    from ptm_jax.parallel.batch_check import check_batch as check

    sizes = MeshConfig(*(int(mesh.shape[axis]) for axis in ("data", "fsdp", "tensor")))
    check("train.batch_size", cfg.train.batch_size, sizes, int(mesh.devices.size), accum=cfg.train.grad_accum_steps)


def batch_specs(example: dict[str, np.ndarray], mesh: Any) -> dict[str, jax.ShapeDtypeStruct]:
    from ptm_jax.parallel.rules import batch_sharding

    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding(mesh, v.ndim))
            for k, v in example.items()}


def rng_spec(mesh: Any, impl: str | None = None) -> jax.ShapeDtypeStruct:
    from ptm_jax.parallel.rules import replicated

    key = jax.eval_shape(lambda: jax.random.key(0, impl=impl))
    return jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated(mesh))


def environment() -> dict[str, Any]:
    dev = jax.devices()[0]
    return {"platform": dev.platform, "device_kind": dev.device_kind, "local_devices": jax.local_device_count(),
            "jax": jax.__version__, "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "prng_impl": str(jax.config.jax_default_prng_impl)}


def model_summary(cfg: RunConfig) -> dict[str, Any]:
    m = cfg.model

    def get(name):  # the Transformer fields; None for families without them (NNLM, word2vec)
        return getattr(m, name, None)

    seq = cfg.data.max_seq_length
    if flops_lib.has_formula(m.family):  # the family's tokens per example (word2vec: one center word, no seq)
        seq = flops_lib.train_step_flops(cfg).tokens // max(cfg.train.batch_size, 1)
    return {"family": m.family, "layers": get("num_layers"), "hidden": get("hidden_size"), "heads": get("num_heads"),
            "ffn": get("intermediate_size"), "vocab": m.vocab_size, "dim": get("dim") or get("embed_dim"),
            "dtype": get("dtype"), "remat": get("remat"),
            "scan_layers": get("scan_layers"), "attention_impl": get("attention_impl"),
            "dropout": [get("hidden_dropout"), get("attention_dropout")], "objective": cfg.objective,
            "batch": cfg.train.batch_size, "seq_len": seq,
            "predictions": getattr(cfg.data, "max_predictions_per_seq", None),
            "grad_accum_steps": cfg.train.grad_accum_steps}


def _percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


# ----------------------------------------------------------------------------------------------------
# Train mode


@dataclasses.dataclass
class Variant:
    """One configuration to time: the run config plus benchmark-only switches."""

    cfg: RunConfig
    mlm_head: str = "sparse"
    prng: str | None = None
    """Key implementation of the dropout RNG (threefry2x32 | rbg | unsafe_rbg); None: JAX's default."""
    feed: bool = False
    """Batches from the real feed (the objective's tf.data stream over the configured corpus, as ``fit`` reads
    it), built once and held in memory; False: synthetic batches of the same shapes."""


def no_dropout(cfg: RunConfig) -> RunConfig:
    """``cfg`` with every dropout rate of its ``[model]`` section at 0 (the synthetic upper bound)."""
    rates = {f.name: 0.0 for f in dataclasses.fields(cfg.model) if "dropout" in f.name
             and isinstance(getattr(cfg.model, f.name), float)}
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **rates))


def training_and_upper_bound(cfg: RunConfig, mlm_head: str = "sparse", prng: str | None = None
                             ) -> dict[str, Variant]:
    """``ptm bench --training``: the training configuration (dropout as configured, the configured attention path,
    batches from the real feed held in memory) and the synthetic upper bound (every dropout 0, synthetic
    batches), as named variants."""
    return {"training": Variant(cfg, mlm_head, prng, feed=True),
            "upper_bound": Variant(no_dropout(cfg), mlm_head, prng, feed=False)}


def feed_batches(cfg: RunConfig, n: int) -> list[dict[str, np.ndarray]]:
    """The first ``n`` global batches of the configured corpus's training stream (``prepare_corpus`` builds or
    reopens the tokenizer and token cache under ``cfg.output_dir``, as ``ptm pretrain`` does)."""
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import prepare_corpus

    objective = build_objective(cfg, prepare_corpus(cfg))
    stream = objective.train_batches(0, cfg.train.batch_size, 0, 1)
    try:
        return [next(stream) for _ in range(n)]
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


class _Run:
    """A compiled train step with its state and its batches (synthetic, or the real feed's), ready to step."""

    def __init__(self, v: Variant, mesh_shape: tuple[int, int, int] | None, num_batches: int):
        from ptm_jax.parallel.feed import to_global
        from ptm_jax.train.loop import compile_objective

        self.v, cfg = v, v.cfg
        self.objective = build_bench_objective(cfg, v.mlm_head)
        self.mesh = make_bench_mesh(cfg, mesh_shape)
        check_batch(cfg, self.mesh)
        example = self.objective.example_batch(cfg.train.batch_size)
        self.compiled = compile_objective(self.objective, cfg.train, self.mesh)
        t0 = time.perf_counter()
        lowered = self.compiled.train_step.lower(self.compiled.abstract_state, batch_specs(example, self.mesh),
                                                 rng_spec(self.mesh, v.prng))
        t1 = time.perf_counter()
        self.executable = lowered.compile()
        self.lower_s, self.compile_s = t1 - t0, time.perf_counter() - t0
        gen = np.random.default_rng(cfg.train.seed)
        host = (feed_batches(cfg, max(1, num_batches)) if v.feed
                else [synthetic_batch(example, cfg, gen) for _ in range(max(1, num_batches))])
        self.batches = [to_global(b, self.mesh, self.compiled.batch_keys) for b in host]
        self.rng = jax.device_put(jax.random.key(cfg.train.seed, impl=v.prng), rng_spec(self.mesh, v.prng).sharding)
        self.state = self.compiled.init_fn(jax.random.key(cfg.train.seed + 1))
        jax.block_until_ready(self.state)
        self.calls = 0
        self.cpu_times: list[float] = []
        self.first_loss = self.last_loss = float("nan")

    def step(self) -> float:
        """One blocking step; returns its wall time (its process CPU time goes to ``cpu_times``)."""
        start, cpu = time.perf_counter(), time.process_time()
        self.state, metrics = self.executable(self.state, self.batches[self.calls % len(self.batches)], self.rng)
        jax.block_until_ready((self.state, metrics))
        elapsed = time.perf_counter() - start
        self.cpu_times.append(time.process_time() - cpu)
        from ptm_jax.train.metrics import term_value

        self.last_loss = term_value(jax.device_get(metrics["loss"]))   # a (num, den) term or a scalar
        if self.calls == 0:
            self.first_loss = self.last_loss
        self.calls += 1
        return elapsed

    def figures(self, times: list[float], warmup: int, peak_tflops: float | None, device_kind: str | None
                ) -> dict[str, Any]:
        cfg, mesh, n_dev = self.v.cfg, self.mesh, self.mesh.devices.size
        med = statistics.median(times)
        b, s = cfg.train.batch_size, cfg.data.max_seq_length
        xla_matmul = _times(_hlo_flops(self.executable), n_dev)
        if flops_lib.has_formula(cfg.model.family):
            fl, source = flops_lib.train_step_flops(cfg), "formula"
        else:  # no analytic formula for the family: XLA's matmul count stands in for model FLOPs
            fl = flops_lib.StepFlops(forward={"xla_matmul": (xla_matmul or 0.0) / 3.0}, recompute=0.0,
                                     tokens=b * s)
            source = "xla_matmul"
        if self.v.mlm_head == "dense":  # the head runs at all S positions instead of P
            fwd = dict(fl.forward)
            fwd["mlm_head"] *= s / cfg.data.max_predictions_per_seq
            fl = dataclasses.replace(fl, forward=fwd)
        env = environment()
        env["prng_impl"] = self.v.prng or env["prng_impl"]
        kind = device_kind or env["device_kind"]
        peak = peak_tflops if peak_tflops is not None else flops_lib.peak_tflops(kind)
        achieved = fl.train / med
        return {
            "mode": "train", "model": model_summary(cfg), "mlm_head": self.v.mlm_head,
            "batches": "feed" if self.v.feed else "synthetic",
            "mesh": dict(zip(mesh.axis_names, (int(x) for x in mesh.devices.shape))), "devices": n_dev,
            "env": env, "device_kind": kind, "params": param_count(self.compiled.abstract_state.params),
            "lower_s": self.lower_s, "compile_s": self.compile_s, "steps": len(times), "warmup": warmup,
            "step_s_median": med, "step_s_p10": _percentile(times, 10), "step_s_p90": _percentile(times, 90),
            "step_s_mean": statistics.fmean(times), "step_s_std": statistics.pstdev(times),
            "step_s_min": min(times),
            "step_cpu_s_median": statistics.median(self.cpu_times[-len(times):]),  # all threads of the process
            "tokens_per_s": fl.tokens / med, "examples_per_s": b / med,
            "model_flops_per_step": fl.train, "model_flops_source": source,
            "model_flops_per_step_full_attention": fl.train_full_attention,  # causal attention in full
            "mfu_full_attention": (fl.train_full_attention / med / (peak * 1e12 * n_dev)) if peak else None,
            "model_flops_breakdown": fl.train_breakdown,
            "hardware_flops_per_step": fl.hardware,
            "xla_flops_per_step": _times(flops_lib.xla_cost_flops(self.executable), n_dev),
            "xla_matmul_flops_per_step": xla_matmul,
            "model_tflops_per_s": achieved / 1e12, "peak_tflops_per_device": peak,
            "mfu": (achieved / (peak * 1e12 * n_dev)) if peak else None,
            "memory_per_device": memory_figures(self.executable),
            "first_loss": self.first_loss, "final_loss": self.last_loss,
        }


def _check_counts(steps: int, warmup: int, rounds: int = 1) -> None:
    if steps < 1 or warmup < 0 or rounds < 1:
        raise ConfigError(f"--steps and --rounds must be >= 1 and --warmup >= 0 (got {steps}, {rounds}, {warmup})")


def bench(cfg: RunConfig, *, steps: int = 20, warmup: int = 3, mesh_shape: tuple[int, int, int] | None = None,
          peak_tflops: float | None = None, device_kind: str | None = None, mlm_head: str = "sparse",
          prng: str | None = None, num_batches: int = 4) -> dict[str, Any]:
    """Compiles and times the train step of ``cfg`` on synthetic batches; returns a flat-ish dict of figures.

    ``peak_tflops`` overrides the per-device peak looked up from ``device_kind`` (default: the first local
    device's kind); with neither known (CPU) MFU is None.
    """
    _check_counts(steps, warmup)
    run = _Run(Variant(cfg, mlm_head, prng), mesh_shape, num_batches)
    for _ in range(warmup):
        run.step()
    times = [run.step() for _ in range(steps)]
    return run.figures(times, warmup, peak_tflops, device_kind)


def bench_variants(variants: dict[str, Variant], *, steps: int = 5, warmup: int = 2, rounds: int = 3,
                   mesh_shape: tuple[int, int, int] | None = None, peak_tflops: float | None = None,
                   device_kind: str | None = None, num_batches: int = 2,
                   log: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """A/B timing in one process: all variants compiled first, then ``rounds`` rounds of ``steps`` steps each,
    variant after variant, so load from other processes falls on all of them alike. Figures pool the timed
    steps of all rounds; ``round_medians_s`` keeps each round's median."""
    _check_counts(steps, warmup, rounds)
    say = log or (lambda _msg: None)
    runs = {}
    for name, v in variants.items():
        runs[name] = _Run(v, mesh_shape, num_batches)
        for _ in range(warmup):
            runs[name].step()
        say(f"{name}: compiled in {runs[name].compile_s:.1f} s")
    times: dict[str, list[float]] = {n: [] for n in runs}
    medians: dict[str, list[float]] = {n: [] for n in runs}
    for r in range(rounds):
        for name, run in runs.items():
            t = [run.step() for _ in range(steps)]
            times[name] += t
            medians[name].append(statistics.median(t))
        say(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {medians[n][-1] * 1e3:.0f} ms" for n in runs)
            + f" (load {os.getloadavg()[0]:.2f})")
    out = {}
    for name, run in runs.items():
        out[name] = run.figures(times[name], warmup, peak_tflops, device_kind)
        out[name]["round_medians_s"] = medians[name]
        out[name]["rounds"] = rounds
    return out


def _times(x: float | None, n: int) -> float | None:
    return None if x is None else x * n


def _hlo_flops(executable: Any) -> float | None:
    try:
        return flops_lib.hlo_matmul_flops(executable.as_text())
    except Exception:
        return None


# ----------------------------------------------------------------------------------------------------
# Data mode


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def bench_data(cfg: RunConfig, batches: int = 50, *, warmup: int = 5, fresh: bool = True) -> dict[str, Any]:
    """Examples/s of the MLM+NSP stream that ``fit`` consumes.

    ``fresh``: build the tokenizer and cache from raw text into a temporary output dir (timed), then reopen it
    (timed); otherwise use ``cfg.output_dir`` as it is (a cache already there is reused).
    """
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import prepare_corpus

    tmp = None
    if fresh:
        tmp = tempfile.mkdtemp(prefix="ptm_bench_data_")
        cfg = dataclasses.replace(cfg, output_dir=tmp, data=dataclasses.replace(cfg.data, cache_dir=""))
    try:
        t0 = time.perf_counter()
        corpus = prepare_corpus(cfg)
        prepare_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        corpus = prepare_corpus(cfg)
        reopen_s = time.perf_counter() - t0
        objective = build_objective(cfg, corpus)
        gb = cfg.train.batch_size
        it = objective.train_batches(0, gb, 0, 1)
        for _ in range(warmup):
            next(it)
        t0, c0 = time.perf_counter(), time.process_time()
        real = 0
        for _ in range(batches):
            real += int(np.sum(next(it)["input_mask"]))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = batches * gb
        cores = _cores()
        tokens = int(corpus.cache.num_tokens)
        return {
            "mode": "data", "corpus": cfg.data.corpus, "documents": int(corpus.cache.num_docs), "tokens": tokens,
            "tokenizer": corpus.tokenizer.kind, "vocab_size": int(corpus.tokenizer.vocab_size),
            "prepare_s": prepare_s, "prepare_tokens_per_s": tokens / prepare_s if fresh else None,
            "reopen_s": reopen_s, "batches": batches, "batch_size": gb, "seq_len": cfg.data.max_seq_length,
            "stream_s": wall, "stream_cpu_s": cpu, "examples_per_s": n / wall, "cores": cores,
            "examples_per_s_per_core": n / wall / cores, "examples_per_cpu_s": n / cpu if cpu > 0 else None,
            "real_tokens_per_example": real / n, "env": environment(),
        }
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(result: dict[str, Any], path: str | os.PathLike) -> Path:
    import json

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return p
