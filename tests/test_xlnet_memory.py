"""XLNet's Transformer-XL memory is carried from one training step to the next (TrainState.carry): it holds
the reuse part's states of every layer, the next step's loss reads it, it is sharded over the batch,
checkpointed, and needs train.grad_accum_steps=1."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus_util import word_source

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.families.xlnet.plm import PlmObjective
from ptm_jax.parallel.feed import to_global
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective

VOCAB = 512


def _objective(shared_data, *overrides):
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", VOCAB)
    special = dataclasses.replace(special, continuation=np.zeros(VOCAB, bool))
    # a wide init so that one layer's attention is far from uniform and the memory visibly moves the outputs
    cfg = load_config("xlnet_tiny", [f"model.vocab_size={VOCAB}", "train.batch_size=8", "model.hidden_dropout=0.0",
                                     "model.attention_dropout=0.0", "model.initializer_range=0.5", *overrides])
    return cfg, PlmObjective(cfg, source, None, special)


def _two_steps(cfg, obj, mesh):
    compiled = compile_objective(obj, cfg.train, mesh)
    state0 = compiled.init_fn(jax.random.key(3))
    batches = obj.train_batches(0, cfg.train.batch_size, 0, 1)
    b0, b1 = next(batches), next(batches)
    params0 = jax.device_get(state0.params)
    carry0 = np.asarray(state0.carry)
    state1, _ = compiled.train_step(state0, to_global(b0, mesh, compiled.batch_keys), jax.random.key(0))
    params1, carry1 = jax.device_get(state1.params), np.asarray(state1.carry)
    state2, m2 = compiled.train_step(state1, to_global(b1, mesh, compiled.batch_keys), jax.random.key(0))
    return dict(compiled=compiled, b0=b0, b1=b1, params0=params0, carry0=carry0, params1=params1, carry1=carry1,
                state2=state2, loss2=float(m2["loss"]))


def test_memory_after_a_step_is_each_layers_reuse_states_and_feeds_the_next_loss(shared_data):
    cfg, obj = _objective(shared_data)
    m, r, n = cfg.model.mem_len, cfg.data.reuse_len, cfg.model.num_layers
    assert m == r == 16
    run = _two_steps(cfg, obj, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    assert run["carry0"].shape == (n, 8, m, cfg.model.hidden_size) and not run["carry0"].any()  # init_mems: zeros
    # layer 0's memory is the input of layer 0 at the reuse tokens: their word embeddings (dropout off)
    table = np.asarray(run["params0"]["params"]["xlnet"]["embeddings"]["word_embedding"]["embedding"])
    np.testing.assert_allclose(run["carry1"][0], table[run["b0"]["input_ids"][:, :r]], atol=1e-6)
    # every layer's memory is what the model returns as new mems for that batch
    _, new = obj.model.apply(run["params0"], *(jnp.asarray(run["b0"][k]) for k in ("input_ids", "segment_ids")),
                             None, jnp.asarray(run["b0"]["perm_mask"]), jnp.asarray(run["b0"]["target_mapping"]),
                             jnp.zeros_like(run["carry0"]))
    np.testing.assert_allclose(run["carry1"], np.stack(new), atol=1e-5)
    assert np.abs(run["carry1"][1:] - run["carry1"][:-1]).max() > 1e-3  # deeper layers hold other states

    b1 = {k: jnp.asarray(v) for k, v in run["b1"].items()}
    norms = obj.normalizers(b1)
    with_mem, _, _ = obj.loss_carrying(run["params1"], b1, jnp.asarray(run["carry1"]), None, norms, False)
    without, _, _ = obj.loss_carrying(run["params1"], b1, jnp.zeros_like(run["carry1"]), None, norms, False)
    assert abs(run["loss2"] - float(with_mem)) < 1e-5 * abs(float(with_mem))
    print("step-2 loss with the carried memory", float(with_mem), "with zero memory", float(without))
    assert abs(float(with_mem) - float(without)) > 1e-2  # the second step really reads the first step's states


def test_memory_is_sharded_over_the_batch_equal_to_one_device_and_checkpointed(shared_data, tmp_path):
    cfg, obj = _objective(shared_data)
    one = _two_steps(cfg, obj, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    mesh = make_mesh(MeshConfig(4, 2, 1))
    eight = _two_steps(cfg, obj, mesh)
    carry = eight["state2"].carry
    assert len(carry.sharding.device_set) == 8
    assert carry.sharding.spec[1] == ("data", "fsdp")  # the batch axis of [layers, batch, mem_len, hidden]
    np.testing.assert_allclose(eight["carry1"], one["carry1"], rtol=1e-5, atol=1e-5)
    assert abs(eight["loss2"] - one["loss2"]) < 1e-5 * abs(one["loss2"])

    ckpt = Checkpointer(tmp_path / "ckpt", async_save=False)
    ckpt.save(2, eight["state2"], {"cursor": 16, "step": 2})
    restored, _ = ckpt.restore(eight["compiled"].abstract_state)
    ckpt.close()
    np.testing.assert_array_equal(np.asarray(restored.carry), np.asarray(carry))
    assert restored.carry.sharding == carry.sharding


def test_memory_needs_grad_accum_1_and_mem_len_0_carries_nothing(shared_data):
    with pytest.raises(ConfigError, match="grad_accum_steps=1"):
        _objective(shared_data, "train.grad_accum_steps=2")
    cfg, obj = _objective(shared_data, "model.mem_len=0", "train.grad_accum_steps=2")
    compiled = compile_objective(obj, cfg.train, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    assert compiled.init_fn(jax.random.key(0)).carry is None


def test_a_checkpoint_written_before_the_carry_existed_still_restores(shared_data, tmp_path):
    """States without a carry are saved as they were before TrainState.carry existed (the five fields), so an
    older run (written as exactly those fields) resumes, and a new one reads back bitwise."""
    cfg, obj = _objective(shared_data, "model.mem_len=0")
    compiled = compile_objective(obj, cfg.train, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    state = compiled.init_fn(jax.random.key(1))
    assert state.carry is None
    old_layout = {"step": state.step, "params": state.params, "opt_state": state.opt_state,
                  "nonfinite_streak": state.nonfinite_streak, "nonfinite_total": state.nonfinite_total}
    ckpt = Checkpointer(tmp_path / "ckpt", async_save=False)
    ckpt.save(5, old_layout, {"cursor": 40, "step": 5})
    ckpt.save(6, state, {"cursor": 48, "step": 6})
    for step in (5, 6):
        restored, meta = ckpt.restore(compiled.abstract_state, step=step)
        assert type(restored).__name__ == "TrainState" and restored.carry is None and meta["step"] == step
        for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ckpt.close()
