"""train.init_from (train/warm_start.py): a stage starts from another run's latest checkpoint with the parameters
and LAMB's moments as they were and every counter (step, optimizer counts: bias correction and schedule) at 0, as
NVIDIA's BERT recipe starts phase 2 from phase 1; real orbax checkpoints on disk."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.config import TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.train.optim import make_optimizer
from ptm_jax.train.state import TrainState
from ptm_jax.train.warm_start import restart_counters, warm_state


def trained_state(steps: int = 3) -> TrainState:
    tx, _ = make_optimizer(TrainConfig(optimizer="lamb", adam_bias_correction=True, warmup_steps=2, steps=10,
                                       lr_decay_power=0.5, learning_rate=1e-2))
    r = np.random.default_rng(0)
    params = {"dense": {"kernel": jnp.asarray(r.normal(size=(4, 3)), jnp.float32), "bias": jnp.zeros(3)},
              "LayerNorm": {"scale": jnp.ones(3)}}
    state = TrainState.create(params, tx)
    for _ in range(steps):
        grads = jax.tree.map(lambda p: jnp.asarray(r.normal(size=p.shape), jnp.float32), state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                              opt_state=opt_state)
    return state


def counts(tree) -> list[int]:
    return [int(x) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.integer) and x.ndim == 0]


def test_phase_two_starts_from_phase_ones_parameters_and_moments_with_counters_at_zero(tmp_path):
    state = trained_state()
    assert max(counts(state.opt_state)) == 3
    ckpt = Checkpointer(tmp_path / "phase1/pretrain/checkpoints", async_save=False)
    ckpt.save(3, state, {"cursor": 3 * 64, "step": 3})
    ckpt.close()
    device = jax.devices()[0]
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                           sharding=jax.sharding.SingleDeviceSharding(device)), state)
    for source in (tmp_path / "phase1", tmp_path / "phase1/pretrain"):  # a run or its stage folder
        warm, was_at = warm_state(str(source), "pretrain", abstract)
        assert was_at == 3 and int(warm.step) == 0 and counts(warm) == [0] * len(counts(warm))
        for a, b in zip(jax.tree.leaves(warm.params) + jax.tree.leaves(warm.opt_state),
                        jax.tree.leaves(state.params) + jax.tree.leaves(state.opt_state)):
            if jnp.issubdtype(a.dtype, jnp.floating):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # parameters, m and v as saved
    with pytest.raises(ConfigError, match="train.init_from=.*no checkpoints in"):
        warm_state(str(tmp_path / "nowhere"), "pretrain", abstract)


def test_restart_counters_keeps_float_leaves_and_non_scalar_integers():
    tree = {"count": jnp.asarray(7, jnp.int32), "ids": jnp.arange(3), "mu": jnp.ones(2)}
    out = restart_counters(tree)
    assert int(out["count"]) == 0 and out["ids"].tolist() == [0, 1, 2] and out["mu"].tolist() == [1.0, 1.0]


def test_phase_presets_follow_the_lamb_recipe():
    one, two = load_config("bert_large_lamb_phase1"), load_config("bert_large_lamb_phase2")
    for cfg in (one, two):
        t = cfg.train
        assert (t.optimizer, t.adam_bias_correction, t.weight_decay, t.clip_norm, t.lr_decay_power) == \
            ("lamb", True, 0.01, 1.0, 0.5)
        assert cfg.model.num_layers == 24 and cfg.model.hidden_size == 1024
        assert cfg.model.attention_dropout == 0.1  # the recipe's, where bert_large drops it
    # phase 2 restores phase 1's parameter tree: a scanned stack's is [L, ...] leaves, an unrolled one's per layer
    assert one.model.scan_layers is two.model.scan_layers is False
    assert (one.model.remat, two.model.remat) == ("none", "none")
    assert (one.data.max_seq_length, one.train.batch_size, one.train.steps, one.train.learning_rate) == \
        (128, 65536, 7038, 6e-3)
    assert one.train.warmup_steps == round(0.2843 * 7038) and one.train.init_from == ""
    assert (two.data.max_seq_length, two.data.max_predictions_per_seq, two.train.batch_size, two.train.steps,
            two.train.learning_rate) == (512, 80, 32768, 1563, 4e-3)
    assert two.train.warmup_steps == round(0.128 * 1563) and two.train.init_from == one.output_dir
    # finetuning from phase 2 (the runbook's MNLI) neither starts from phase 1 nor takes LAMB's decay power
    from ptm_jax.train.finetune import finetune_train_config

    tuned = finetune_train_config(two, 1000)
    assert (tuned.init_from, tuned.lr_decay_power, tuned.optimizer) == ("", 1.0, "adamw")


@pytest.mark.slow
def test_ptm_pretrain_phase_two_starts_at_step_one_from_phase_ones_checkpoint(shared_data, tmp_path, caplog):
    """Two real `ptm pretrain` stages of bert_tiny with LAMB: seq 32, then seq 64 from the first's checkpoint."""
    import json
    import logging

    from ptm_jax.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes((shared_data / "corpus/tinyshakespeare/input.txt").read_bytes()[:40_000])
    common = ["-c", "bert_tiny", f"data.corpus={corpus}", "data.format=lines", "tokenizer.vocab_size=400",
              f"data.cache_dir={tmp_path / 'cache'}", "train.optimizer='lamb'", "train.adam_bias_correction=true",
              "train.log_every=1", "train.eval_every=0", "train.batch_size=8"]
    one, two = tmp_path / "phase1", tmp_path / "phase2"
    assert main(["pretrain", *common, f"output_dir={one}", "data.max_seq_length=32", "train.steps=3",
                 "train.checkpoint_every=3"]) == 0
    with caplog.at_level(logging.INFO, logger="ptm_jax.train.loop"):
        assert main(["pretrain", *common, f"output_dir={two}", "data.max_seq_length=64", "train.steps=2",
                     "train.warmup_steps=2", f"train.init_from={one}",
                     f"tokenizer.vocab_file={one / 'tokenizer/vocab.txt'}"]) == 0
    assert f"pretrain: parameters and optimizer state from {one} (step 3); step, schedule and data from 0" \
        in caplog.text
    records = [json.loads(x) for x in (two / "pretrain/metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2] and train[0]["learning_rate"] == 0.0  # the warmup starts again
