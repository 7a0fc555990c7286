"""The jobs x families conformance checks (docs/conformance.md), collected by tests/test_job_conformance.py
(the Transformer families) and tests/test_job_conformance_lineage.py (every other registered family).

Every registered finetuning job (``ptm_jax/jobs/registry.py``), and the single-task job under every registered
adapter (``ptm_jax/adapters``), meets every registered family on its tiny preset, pretrained for 2 steps on the
embedded corpus. What a pair must do is read from declarations, not listed here:

- the job's own ``Job.family`` and ``Job.needs`` (capabilities of the family, ``jobs/registry.refusal``);
- the task's needs: SST-2 is a GLUE task, read by the family's ``Finetuning.classifier``;
- the feature-head job reads word features (capability 'word_features') or static vectors ('word_vectors') of
  the model ``finetune.init`` names; the CVT job reads static vectors ('word_vectors') only;
- an adapter's default targets (LoRA: the attention projections) exist in Transformer families only.

A pair that must be refused ends ``ptm finetune`` with exit status 2, one ``ptm finetune: error:`` line holding
the reason, no traceback and no finetuning output. A pair that must run finishes its 2 steps (MT-DNN: its
multi-task and per-task steps) with finite metrics in every stage's summary.json, keeps a best model, and
``ptm eval`` of each kept model gives the best dev metric the stage recorded (1e-5). A new job or family lands
under test by registering; a new job also needs its tiny settings in :data:`JOB_ARGS`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ptm_jax.adapters import registry as adapters
from ptm_jax.families import registry as families
from ptm_jax.jobs import registry as jobs

TRANSFORMER_FAMILIES = frozenset({"bert", "gpt", "xlnet", "ernie", "ernie2"})

JOB_ARGS = {
    "task": ["finetune.task=sst2"],
    "mtdnn": ["mtdnn.tasks=[sst2,rte]", "mtdnn.finetune_epochs=0.5"],
    "consert": ["finetune.data_dir={glue}/STS-B/train.tsv", "consert.eval_data_dir={glue}"],
    "features": ["finetune.task=sst2", "features.head=textcnn"],
    "ulmfit": ["finetune.task=sst2", "ulmfit.target_lm_steps=2"],
    "cvt": ["finetune.task=conll2003", "finetune.data_dir={glue}/../conll2003", "cvt.unlabelled_sentences=32",
            "cvt.unlabelled={glue}/../corpus/wikitext-2-tokenized/valid.txt", "cvt.hidden_1=8", "cvt.hidden_2=8",
            "cvt.projection=8"],
}
"""A job's tiny settings beside :data:`COMMON` (``{glue}``: the GLUE folder of ../shared/data)."""
COMMON = ["finetune.batch_size=8", "finetune.max_seq_length=32", "finetune.train_subset=16", "finetune.epochs=1",
          "finetune.eval_every=2", "finetune.data_dir={glue}", "train.steps=2", "train.progress_bar=false",
          "finetune.eval_batch_size=64"]
"""Every pair's tiny settings. The dev sets are scored whole (SST-2's 872 sentences) in batches of 64, by the
finetuning stage and by ``ptm eval`` alike: the BERT pairs of tests/test_job_conformance.py took 55.6 and 56.0 s
against 60.2 and 62.9 s in batches of 8 (alternating runs, ``-k "bert and not ernie"``; 256 gave 56.0).
Scoring does not depend on the evaluation batch (tests/test_eval_dev_only.py, tests/test_mtdnn.py)."""


def cases(transformers: bool) -> list:
    """(job, adapter, family) for every registered job x family (adapters on the single-task job), the
    Transformer families or the others."""
    jobs.load_all(), adapters.load_all()
    variants = [(name, "") for name in sorted(jobs.jobs())] + [("task", a) for a in sorted(adapters.adapters())]
    names = sorted(n for n in families.families() if (n in TRANSFORMER_FAMILIES) == transformers)
    return [pytest.param(j, a, f, id=f"{j}{'+' + a if a else ''}-{f}") for j, a in variants for f in names]


def expected_refusal(job_name: str, adapter: str, family: str) -> str | None:
    """The reason (a part of the error line) why this pair must be refused, or None: it must run."""
    job, fam = jobs.get(job_name), families.get(family)
    reason = jobs.refusal(job, family)
    if reason:
        return reason
    if "finetune.task=sst2" in JOB_ARGS[job_name] and job_name != "features" and fam.finetuning.classifier is None:
        return f"model.family={family!r} does not support sequence classification finetuning"
    if job_name == "features" and not {"word_vectors", "word_features"} & fam.capabilities:
        return f"model.family={family!r} gives neither word vectors nor per-layer word features"
    if job_name == "cvt" and "word_vectors" not in fam.capabilities:  # the BiLSTM reads random or static vectors
        return "finetune.job=cvt reads random or static word vectors"
    if adapter == "lora" and family not in TRANSFORMER_FAMILIES:
        return "matches no kernel of the model"
    return None


class Pretrained:
    """Each family's tiny preset pretrained for 2 steps, once per module, on first use (the ``pretrained``
    fixture), without the held-out evaluation at its last step (``train.eval_every=0``: the pairs finetune the
    model; nothing here reads the pretraining's eval record, whose program would be one more compile per family)."""

    def __init__(self, root: Path):
        self.root, self.done = root, {}

    def __call__(self, family: str) -> tuple[str, Path]:
        from ptm_jax.cli import main

        preset = families.get(family).tiny_preset
        if family not in self.done:
            out = self.root / family
            assert main(["pretrain", "-c", preset, f"output_dir={str(out)!r}", "train.steps=2",
                         "train.eval_every=0", "train.progress_bar=false"]) == 0
            self.done[family] = out
        return preset, self.done[family]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Pretrained:
    return Pretrained(tmp_path_factory.mktemp("pretrained"))


def _finite(tree) -> bool:
    if isinstance(tree, dict):
        return all(_finite(v) for v in tree.values())
    return not isinstance(tree, float) or math.isfinite(tree)


def check_pair(job_name: str, adapter: str, family: str, pretrained: Pretrained, glue: Path, tmp_path: Path,
               capsys) -> None:
    from ptm_jax.cli import main

    if job_name not in JOB_ARGS:
        pytest.fail(f"finetune.job={job_name!r} is registered but has no tiny settings: add them to JOB_ARGS in "
                    "tests/job_conformance_checks.py")
    preset, init = pretrained(family)
    out = tmp_path / "run"
    args = [a.format(glue=glue) for a in COMMON + JOB_ARGS[job_name]]
    args += [f"finetune.job={job_name}", f"finetune.init={str(init)!r}", f"output_dir={str(out)!r}"]
    if adapter:
        args.append(f"finetune.adapter={adapter}")
    capsys.readouterr()
    rc = main(["finetune", "-c", preset, *args])
    err = capsys.readouterr().err
    reason = expected_refusal(job_name, adapter, family)
    if reason is not None:
        lines = [ln for ln in err.splitlines() if ln.startswith("ptm finetune: error:")]
        assert rc == 2 and len(lines) == 1 and reason in lines[0], (rc, reason, err[-2000:])
        assert "Traceback" not in err
        assert not list(out.glob("**/summary.json")), "a refused job must not train"
        return
    assert rc == 0, err[-3000:]
    summaries = [json.loads(p.read_text()) for p in out.glob("**/summary.json")]
    assert summaries and all(_finite(s) and not s["preempted"] and s["step"] == s["steps"] > 0 for s in summaries), \
        summaries
    kept = sorted(p.parent for p in out.glob("**/best.json") if (p.parent / "best").is_dir())
    assert kept, f"no kept model (<stage>/best with best.json) under {out}"
    job = jobs.get(job_name)
    scored_by = job_name if (job.build or job.load_model) else "task"  # MT-DNN keeps single-task models
    for stage in kept:
        recorded = json.loads((stage / "best.json").read_text())
        task = [f"finetune.task={stage.name}"] if job_name == "mtdnn" else []  # mtdnn/<task>/best
        capsys.readouterr()
        assert main(["eval", "--model", str(stage / "best"), "-c", preset, *args, f"finetune.job={scored_by}",
                     *task]) == 0
        result = json.loads(capsys.readouterr().out)
        again = result["metrics"][result["primary_metric"]]
        sign = -1.0 if result["primary_metric"].endswith("loss") else 1.0  # best.json keeps -loss
        assert math.isfinite(recorded["value"]) and sign * again == pytest.approx(recorded["value"], abs=1e-5), \
            (stage, result["primary_metric"], again, recorded)
