"""Every registered finetuning job (and the single-task job under every adapter) on every Transformer family's
tiny preset: it runs, keeps a model that `ptm eval` scores as recorded, or is refused as its declarations say
(tests/job_conformance_checks.py; the other families: tests/test_job_conformance_lineage.py)."""
from __future__ import annotations

import json

import pytest
from job_conformance_checks import cases, check_pair, pretrained  # noqa: F401  (the fixture)


@pytest.mark.parametrize("job,adapter,family", cases(transformers=True))
def test_job_runs_and_its_kept_model_scores_as_recorded_or_is_refused_as_declared(job, adapter, family, pretrained,
                                                                                shared_data, tmp_path, capsys):
    check_pair(job, adapter, family, pretrained, shared_data / "glue", tmp_path, capsys)


def test_the_family_of_the_model_the_job_trains_decides_this_runs_before_any_work(pretrained, shared_data, tmp_path,
                                                                                  capsys):
    """Without finetune.init the model is this run's pretraining, of the preset's family: ptm finetune refuses a job
    that family cannot run before it looks for the model (there is none here), and ptm run before it pretrains.
    With finetune.init the model's own family decides: a gpt_tiny config finetunes a BERT run's encoder with
    ConSERT, a bert_tiny config is refused MT-DNN on a GPT run, and ptm eval refuses ConSERT's scoring of a GPT."""
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
    capsys.readouterr()
    out = tmp_path / "run-gpt-mtdnn"
    assert main(["run", "-c", "gpt_tiny", f"output_dir={str(out)!r}", "finetune.job=mtdnn",
                 *[a.format(glue=glue) for a in COMMON + JOB_ARGS["mtdnn"]]]) == 2
    assert jobs.refusal(jobs.get("mtdnn"), "gpt") in capsys.readouterr().err
    assert not (out / "pretrain").exists(), "ptm run must refuse before pretraining"
    _, gpt = pretrained("gpt")
    for cmd, job in ((["finetune", "-c", "bert_tiny", f"output_dir={str(tmp_path / 'mtdnn-gpt')!r}",
                       f"finetune.init={str(gpt)!r}"], "mtdnn"),
                     (["eval", "--model", str(gpt), "-c", "bert_tiny"], "consert")):
        capsys.readouterr()
        assert main([*cmd, f"finetune.job={job}", *[a.format(glue=glue) for a in COMMON + JOB_ARGS[job]]]) == 2
        err = capsys.readouterr().err
        assert jobs.refusal(jobs.get(job), "gpt") in err and "Traceback" not in err, err
    assert not (tmp_path / "mtdnn-gpt").exists()
    _, bert = pretrained("bert")
    out = tmp_path / "consert-from-bert"
    assert main(["finetune", "-c", "gpt_tiny", f"output_dir={str(out)!r}", f"finetune.init={str(bert)!r}",
                 "finetune.job=consert", *[a.format(glue=glue) for a in COMMON + JOB_ARGS["consert"]]]) == 0
    assert json.loads((out / "finetune-consert" / "summary.json").read_text())["step"] == 2
