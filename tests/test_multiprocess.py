"""Multi-process training: 2 processes x 4 CPU devices (jax.distributed over 127.0.0.1, gloo collectives,
the JAX 0.10 default on CPU) give the losses of 1 process x 8 devices, and checkpoints move between process
counts (2 -> 1 -> 2) without repeating or skipping an example (docs/reliability.md,
"Multi-process saves and evaluation rows").

Runs are real subprocesses: ``launch/local_multiprocess.py -n 2 --devices-per-process 4 -- ptm pretrain ...``
and plain ``python -m ptm_jax.cli pretrain``; they share one tokenizer, token cache and JAX persistent
compilation cache. R = the uninterrupted 1x8 reference (12 steps, a checkpoint every 4). The chain starts from
R's step-4 checkpoint: A = 2x4 resumes it and stops after step 8; B = 1x8 resumes A's checkpoint to step 12.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_env import xla_flags

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.config_loading import load_config
from ptm_jax.data.cache import build_or_load_cache
from ptm_jax.export.params import load_params
from ptm_jax.objectives.registry import build_objective
from ptm_jax.train import stages

REPO = Path(__file__).resolve().parent.parent
STEPS, LEG, BATCH = 12, 4, 16
ENV = {**os.environ, "XLA_FLAGS": xla_flags(8), "JAX_PLATFORMS": "cpu",
       "USE_TF": "0", "TF_CPP_MIN_LOG_LEVEL": "2", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def overrides(shared: dict, out: Path) -> list[str]:
    return [f"data.corpus={shared['corpus']}", f"tokenizer.vocab_file={shared['vocab']}",
            f"data.cache_dir={shared['cache']}", f"output_dir={out}", f"train.steps={STEPS}",
            f"train.batch_size={BATCH}", f"train.checkpoint_every={LEG}", "train.keep_checkpoints=10",
            "train.log_every=1", "train.eval_every=0"]


def run(argv: list[str], shared: dict, cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(argv, env=env or shared["env"], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return done.stdout


def one_process(shared: dict, out: Path, *extra: str) -> str:
    return run([sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "bert_tiny", *overrides(shared, out),
                *extra], shared, out.parent)


def two_processes(shared: dict, out: Path, *extra: str) -> str:
    """Without the test run's shared JAX_COMPILATION_CACHE_DIR: the run's own default applies (a multi-host run
    keeps its cache under output_dir)."""
    env = {k: v for k, v in shared["env"].items() if k != "JAX_COMPILATION_CACHE_DIR"}
    return run([sys.executable, str(REPO / "launch/local_multiprocess.py"), "-n", "2", "--devices-per-process",
                "4", "--timeout", "560", "--", "ptm", "pretrain", "-c", "bert_tiny", *overrides(shared, out),
                *extra], shared, out.parent, env)


def train_records(stage: Path) -> list[dict]:
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "train"]


@pytest.fixture(scope="module")
def shared(shared_data, tmp_path_factory) -> dict:
    from ptm_jax.cli import main

    root = tmp_path_factory.mktemp("mp_shared")
    # two files; the token cache's chunks do not depend on the process count (data.cache_chunk_bytes)
    corpus = f"{shared_data / 'corpus/tinyshakespeare/input.txt'},{shared_data / 'corpus/gutenberg/11-0.txt'}"
    assert main(["data", "-c", "bert_tiny", f"data.corpus={corpus}", "tokenizer.vocab_size=1000",
                 f"data.cache_dir={root / 'cache'}", f"output_dir={root / 'data'}"]) == 0
    return {"corpus": corpus, "vocab": str(root / "data/tokenizer/vocab.txt"), "cache": str(root / "cache"),
            "env": dict(ENV)}


@pytest.fixture(scope="module")
def reference(shared, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mp_reference") / "run"
    one_process(shared, out)
    return out


@pytest.fixture(scope="module")
def chain(shared, reference, tmp_path_factory) -> dict:
    """R's 1-process checkpoint at step 4 -> A: 2 processes, steps 5-8 -> B: 1 process, steps 9-12."""
    out = tmp_path_factory.mktemp("mp_chain") / "run"
    stage = out / "pretrain"
    shutil.copytree(reference / f"pretrain/checkpoints/{LEG}", stage / f"checkpoints/{LEG}")
    logs = {"A": two_processes(shared, out, "--stop-after", str(LEG))}
    legs = {"A": train_records(stage)}
    logs["B"] = one_process(shared, out)
    legs["B"] = train_records(stage)[len(legs["A"]):]
    return {"out": out, "legs": legs, "logs": logs}


def test_two_processes_x_4_devices_give_the_losses_of_one_process_x_8(chain, reference):
    ref = {r["step"]: r["loss"] for r in train_records(reference / "pretrain")}
    assert sorted(ref) == list(range(1, STEPS + 1))
    got = {r["step"]: r["loss"] for r in chain["legs"]["A"]}
    assert len(got) == len(chain["legs"]["A"]) == LEG, "each step is logged once (by process 0 only)"
    np.testing.assert_allclose([got[s] for s in sorted(got)], [ref[s] for s in sorted(got)], rtol=1e-5)
    # both processes ran and met in jax.distributed (the launcher prefixes each line with its process)
    assert "[p0] pretrain: step 8" in chain["logs"]["A"] and "[p1] pretrain: step 8" in chain["logs"]["A"]
    # a multi-host run keeps JAX's compilation cache under its output_dir by default (process 0 writes it)
    cache = chain["out"] / "compile_cache"
    assert f"[p1] INFO ptm_jax.parallel.compile_cache: compilation cache: {cache} (persistent" in chain["logs"]["A"]
    assert any(cache.glob("*-cache")), "the 2-process leg stored its compiled programs"
    assert "[p0] INFO ptm_jax.versions: versions: python" in chain["logs"]["A"]


def test_checkpoints_move_from_1_process_to_2_and_back_with_the_uninterrupted_parameters(chain, reference):
    legs = chain["legs"]
    assert [r["step"] for r in legs["A"]] == [5, 6, 7, 8], "2 processes resume the 1-process checkpoint at 4"
    assert [r["step"] for r in legs["B"]] == [9, 10, 11, 12], "1 process resumes the 2-process checkpoint at 8"
    ref = {r["step"]: r["loss"] for r in train_records(reference / "pretrain")}
    got = {r["step"]: r["loss"] for leg in legs.values() for r in leg}
    steps = range(LEG + 1, STEPS + 1)
    np.testing.assert_allclose([got[s] for s in steps], [ref[s] for s in steps], rtol=1e-5)
    ref_params, _, ref_info, _ = load_params(reference)
    got_params, _, got_info, _ = load_params(chain["out"])
    assert ref_info["step"] == got_info["step"] == STEPS
    assert jax.tree.structure(ref_params) == jax.tree.structure(got_params)
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree.leaves(ref_params), jax.tree.leaves(got_params)))
    assert diff <= 1e-6


def test_every_global_step_consumes_the_next_examples_across_process_count_changes(chain, reference, shared):
    """Data level: each checkpoint's cursor is step * global_batch, and the streams a restart opens at that
    cursor -- on 1 or 2 processes -- yield exactly the plan's next example ids, with the features of the
    uninterrupted 1-process stream."""
    metas = {}
    for run_dir, steps in ((reference, (4, 8, 12)), (chain["out"], (4, 8, 12))):
        ckpt = Checkpointer(run_dir / "pretrain/checkpoints", async_save=False)
        try:
            assert ckpt.all_steps() == list(steps)
            metas[run_dir] = {s: ckpt.restore_meta(s)["cursor"] for s in steps}
        finally:
            ckpt.close()
        assert metas[run_dir] == {s: s * BATCH for s in steps}, f"{run_dir}: cursor != step * global_batch"

    cfg = load_config("bert_tiny", overrides(shared, chain["out"]))
    objective = build_objective(cfg, stages.prepare_corpus(cfg))
    full = objective.train_batches(0, BATCH, 0, 1)
    uninterrupted = [next(full) for _ in range(STEPS)]
    # the chain: steps 1-4 from cursor 0 on 1 process (R), 5-8 from R's cursor on 2 processes (A),
    # 9-12 from A's cursor on 1 process (B)
    consumed: list[np.ndarray] = []
    for start, count, first_step in ((0, 1, 0), (metas[reference][4], 2, 4), (metas[chain["out"]][8], 1, 8)):
        streams = [objective.train_batches(start, BATCH, p, count) for p in range(count)]
        for k in range(LEG):
            parts = [next(s) for s in streams]
            batch = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
            assert batch["example_id"].tolist() == list(range(start + k * BATCH, start + (k + 1) * BATCH))
            for key, value in batch.items():
                np.testing.assert_array_equal(value, uninterrupted[first_step + k][key],
                                              err_msg=f"{key} of step {first_step + k + 1} ({count} processes)")
            consumed.append(batch["example_id"])
    ids = np.concatenate(consumed)
    assert ids.tolist() == list(range(STEPS * BATCH)), "an example was repeated, skipped or reordered"


def test_the_token_cache_has_the_same_documents_for_1_and_2_processes(shared, tmp_path):
    """The cache is cut into chunks that do not depend on the process count: what 2 processes open is the
    cache `ptm data` built with one, chunk for chunk, and nothing is tokenized again."""
    cfg = load_config("bert_tiny", overrides(shared, tmp_path))
    one = stages.prepare_corpus(cfg).cache
    before = sorted(p.name for p in Path(one.directory).iterdir())
    two = [build_or_load_cache(cfg.data, stages.prepare_corpus(cfg).tokenizer, shared["cache"], p, 2)
           for p in range(2)]
    assert sorted(p.name for p in Path(one.directory).iterdir()) == before
    assert all(t.meta["shards"] == one.meta["shards"] for t in two)
    for d in range(one.num_docs):
        np.testing.assert_array_equal(two[1].doc_tokens(d), one.doc_tokens(d))
