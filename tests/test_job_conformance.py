"""Every registered finetuning job (and the single-task job under every adapter) on every Transformer family's
tiny preset: it runs, keeps a model that `ptm eval` scores as recorded, or is refused as its declarations say
(tests/job_conformance_checks.py; the other families: tests/test_job_conformance_lineage.py)."""
from __future__ import annotations

import json

import pytest
from job_conformance_checks import Pretrained, cases, check_pair


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return Pretrained(tmp_path_factory.mktemp("pretrained"))


@pytest.mark.parametrize("job,adapter,family", cases(transformers=True))
def test_job_runs_and_its_kept_model_scores_as_recorded_or_is_refused_as_declared(job, adapter, family, pretrained,
                                                                                shared_data, tmp_path, capsys):
    check_pair(job, adapter, family, pretrained, shared_data / "glue", tmp_path, capsys)


def test_the_family_of_the_model_the_job_trains_decides_this_runs_before_any_work(pretrained, shared_data, tmp_path,
                                                                                  capsys):
    """Without finetune.init the model is this run's pretraining, of the preset's family: ptm finetune refuses a job
    that family cannot run before it looks for the model (there is none here). With finetune.init the model's own
    family decides: a gpt_tiny config finetunes a BERT run's encoder with ConSERT."""
    from job_conformance_checks import COMMON, JOB_ARGS

    from ptm_jax.cli import main
    from ptm_jax.jobs import registry as jobs

    glue = shared_data / "glue"
    for preset, job, family in (("gpt_tiny", "mtdnn", "gpt"), ("bert_tiny", "ulmfit", "bert")):
        capsys.readouterr()
        out = tmp_path / f"{job}-nothing-pretrained"
        assert main(["finetune", "-c", preset, f"output_dir={str(out)!r}", f"finetune.job={job}",
                     *[a.format(glue=glue) for a in COMMON + JOB_ARGS[job]]]) == 2
        err = capsys.readouterr().err
        assert jobs.refusal(jobs.get(job), family) in err and "Traceback" not in err, err
        assert not out.exists()
    _, bert = pretrained("bert")
    out = tmp_path / "consert-from-bert"
    assert main(["finetune", "-c", "gpt_tiny", f"output_dir={str(out)!r}", f"finetune.init={str(bert)!r}",
                 "finetune.job=consert", *[a.format(glue=glue) for a in COMMON + JOB_ARGS["consert"]]]) == 0
    assert json.loads((out / "finetune-consert" / "summary.json").read_text())["step"] == 2
