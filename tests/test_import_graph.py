"""The import graph of ptm_jax read from its source (benchmarks/import_graph.py): no import circle anywhere in the
package, even counting the imports written inside functions, and the registries of jobs, tasks and
adapters sit at the bottom (they import nothing of ptm_jax but the error types and the GLUE table)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "benchmarks" / "import_graph.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_no_import_circle_passes_through_the_finetuning_modules():
    g = _graph_module()
    edges, inner = g.graph(ROOT)
    assert "ptm_jax.jobs.mtdnn.job" in edges and "ptm_jax.train.finetune" in edges  # the graph covers them
    assert g.finetuning_circles(edges) == []
    assert g.finetuning_circles(g.graph_with_inner(edges, inner)) == []
    # the counter finds circles: a two-module loop added by hand is reported
    looped = {**edges, "ptm_jax.train.finetune": edges["ptm_jax.train.finetune"] | {"ptm_jax.jobs.mtdnn.job"}}
    assert ["ptm_jax.jobs.mtdnn.job", "ptm_jax.train.finetune"] in g.finetuning_circles(looped)


def test_no_import_circle_anywhere_in_the_package_counting_imports_inside_functions():
    g = _graph_module()
    edges, inner = g.graph(ROOT)
    assert len(edges) > 250 and sum(map(len, inner.values())) > 400  # the whole package, inner imports read
    assert g.circles(edges) == []
    assert g.circles(g.graph_with_inner(edges, inner)) == []


def test_the_registries_of_jobs_tasks_and_adapters_import_nothing_of_the_spine():
    g = _graph_module()
    edges, inner = g.graph(ROOT)
    allowed = {"ptm_jax.errors", "ptm_jax.plugins", "ptm_jax.data.tasks.glue"}
    for mod in ("ptm_jax.jobs.registry", "ptm_jax.data.tasks.registry", "ptm_jax.adapters.registry"):
        assert edges[mod] <= allowed, (mod, edges[mod])
    assert edges["ptm_jax.data.tasks.glue"] <= {"ptm_jax.errors"}
    assert edges["ptm_jax.plugins"] <= {"ptm_jax.errors"}
    # a job package's __init__ (what config.py loads to read the job's section) reaches only the registry and
    # the job's own config dataclass
    for job in ("task", "mtdnn", "consert", "features"):
        pkg = f"ptm_jax.jobs.{job}"
        assert edges[pkg] <= {"ptm_jax.jobs.registry", "ptm_jax.plugins", f"{pkg}.config"}, (pkg, edges[pkg])


def test_registering_every_family_and_ptm_export_import_no_tensorflow():
    """TensorFlow costs about 6 CPU-seconds a process: a command that builds no tf.data pipeline (`ptm export`, a
    config error, `ptm families`) must not pay it, so registering the families imports no data pipeline."""
    import subprocess

    code = ("import sys; from ptm_jax.families import registry; registry.load_all(); import ptm_jax.cli; "
            "import ptm_jax.export.params; print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout[-500:]
