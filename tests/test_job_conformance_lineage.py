"""Every registered finetuning job (and the single-task job under every adapter) on the tiny preset of every
family that is not a Transformer (word vectors, NNLM, the LSTMs): it runs, keeps a model that `ptm eval` scores as
recorded, or is refused as its declarations say (tests/job_conformance_checks.py; the Transformer families:
tests/test_job_conformance.py)."""
from __future__ import annotations

import pytest
from job_conformance_checks import cases, check_pair, pretrained  # noqa: F401  (the fixture)


@pytest.mark.parametrize("job,adapter,family", cases(transformers=False))
def test_job_runs_and_its_kept_model_scores_as_recorded_or_is_refused_as_declared(job, adapter, family, pretrained,
                                                                                shared_data, tmp_path, capsys):
    check_pair(job, adapter, family, pretrained, shared_data / "glue", tmp_path, capsys)
