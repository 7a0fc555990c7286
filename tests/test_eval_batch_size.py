"""``train.eval_batch_size``: a pretraining stage reads its held-out rows in batches of that size, and its
evaluation and reference baseline cover the same rows as at the training batch when ``train.eval_batches`` counts
the same rows (the finetuning side: tests/test_eval_dev_only.py and tests/test_mtdnn.py)."""
from __future__ import annotations

import json

import pytest

from ptm_jax.cli import main


def test_pretraining_evaluation_of_one_batch_of_16_equals_two_batches_of_8(tmp_path, capsys):
    summaries = {}
    for name, settings in (("8x2", ["train.eval_batches=2"]),
                           ("16x1", ["train.eval_batches=1", "train.eval_batch_size=16"])):
        out = tmp_path / name
        assert main(["pretrain", "-c", "bert_tiny", f"output_dir={str(out)!r}", "train.batch_size=8",
                     "train.steps=1", "train.progress_bar=false", *settings]) == 0, capsys.readouterr().err[-2000:]
        summaries[name] = json.loads((out / "pretrain" / "summary.json").read_text())
    want, got = summaries["8x2"], summaries["16x1"]
    assert set(want["eval"]) == set(got["eval"]) >= {"mlm_loss", "mlm_accuracy", "nsp_accuracy"}
    for k, v in want["eval"].items():
        assert got["eval"][k] == pytest.approx(v, rel=1e-5), (k, got["eval"][k], v)
    assert got["baseline"] == pytest.approx(want["baseline"], rel=1e-9) and want["baseline"]
    for k in ("loss", "grad_norm"):  # the training step saw the same batch of 8
        assert got["train"][k] == want["train"][k]
