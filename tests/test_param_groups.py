"""Parameter groups (ptm_jax/train/param_groups.py): layer-wise lr decay on unrolled and scanned layer stacks
(model.scan_layers: one 'layers' tensor with a leading layer axis), rule matching and multiplication."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ptm_jax.config import TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import plain_tree, to_layout
from ptm_jax.train.optim import make_optimizer
from ptm_jax.train.param_groups import (
    DEFAULT_RULES,
    PerLayer,
    Rule,
    layerwise_decay_rules,
    multipliers,
)

DECAY, LAYERS = 0.8, 3


@pytest.fixture(scope="module")
def unrolled():
    """bert_tiny's parameter tree with 3 layers, unrolled (layers_0..2), as the {'params': {...}} tree the optimizer
    sees; random values (numpy: no model initialisation to compile)."""
    from ptm_jax.families.bert.heads import BertForPreTraining

    cfg = load_config("bert_tiny", [f"model.num_layers={LAYERS}"]).model
    ids = jnp.zeros((2, 8), jnp.int32)
    shapes = nn.meta.unbox(jax.eval_shape(lambda: BertForPreTraining(cfg).init(jax.random.key(0), ids, ids, ids,
                                                                                ids[:, :2])))
    rng = np.random.default_rng(1)
    return jax.tree.map(lambda x: (0.02 * rng.standard_normal(x.shape)).astype(np.float32), shapes)


def _scanned(tree):
    return {"params": to_layout(plain_tree(tree), scan=True)}


def _unrolled(tree):
    return {"params": to_layout(plain_tree(tree), scan=False)}


def test_scanned_stack_gets_one_multiplier_per_layer_along_its_leading_axis(unrolled):
    rules = layerwise_decay_rules(DECAY, LAYERS)
    scanned = _scanned(unrolled)
    got = multipliers(rules, scanned, "lr")["params"]
    q = got["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"]
    shape = scanned["params"]["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"].shape
    assert np.shape(q) == (LAYERS,) + (1,) * (len(shape) - 1) and shape[0] == LAYERS
    np.testing.assert_allclose(np.ravel(q), [DECAY ** 3, DECAY ** 2, DECAY ** 1], rtol=1e-7)
    assert set(jax.tree.leaves(got["bert"]["embeddings"])) == {DECAY ** 4}
    assert set(jax.tree.leaves(got["bert"]["pooler"])) == {1.0}
    # the same multipliers, layer by layer, as the unrolled model's
    flat = multipliers(rules, unrolled, "lr")["params"]["bert"]["encoder"]
    for i in range(LAYERS):
        assert flat[f"layers_{i}"]["attention"]["query"]["kernel"] == pytest.approx(float(np.ravel(q)[i]), rel=1e-7)


def test_scanned_and_unrolled_models_get_the_same_first_update(unrolled):
    """The scan_layers bug of finetune.layerwise_lr_scale: the scanned names did not match 'layers_(\\d+)', so every
    layer got multiplier 1 (here a 1.25x to 1.95x larger update than the unrolled model's). Now the first update of the
    scanned model is the unrolled model's, restacked, to float32 rounding (XLA folds a scalar multiplier into
    the learning rate, a per-layer vector not; clip_norm=0: the global norm sums the squares in another order)."""
    tcfg = TrainConfig(learning_rate=1e-3, warmup_steps=0, steps=10, clip_norm=0.0)
    rules = [*DEFAULT_RULES, *layerwise_decay_rules(DECAY, LAYERS)]
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda x: rng.standard_normal(x.shape).astype(np.float32), unrolled)
    tx, _ = make_optimizer(tcfg, rules)
    want, _ = jax.jit(tx.update)(grads, tx.init(unrolled), unrolled)
    scanned = _scanned(unrolled)
    got, _ = jax.jit(tx.update)(_scanned(grads), tx.init(scanned), scanned)
    got = _unrolled(got)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=0, err_msg=jax.tree_util.keystr(path))
    # and the multipliers took effect: layer 0's update is DECAY**2 times layer 2's for equal gradients
    enc = want["params"]["bert"]["encoder"]
    assert not np.allclose(enc["layers_0"]["output"]["dense"]["bias"], enc["layers_2"]["output"]["dense"]["bias"])


def test_multipliers_of_matching_rules_multiply_and_static_ones_stay_python_floats():
    tree = {"a": {"kernel": jnp.ones(2), "bias": jnp.ones(2)}, "b": {"kernel": jnp.ones(2)}}
    rules = [Rule("a/", lr=0.5), Rule("kernel", lr=0.1), *DEFAULT_RULES]
    lr = multipliers(rules, tree, "lr")
    assert lr == {"a": {"kernel": 0.05, "bias": 0.5}, "b": {"kernel": 0.1}}
    assert multipliers(rules, tree, "weight_decay") == {"a": {"kernel": 1.0, "bias": 0.0}, "b": {"kernel": 1.0}}
    step_lr = multipliers([Rule("b/", lr=lambda s: jnp.where(s >= 5, 1.0, 0.0))], tree, "lr", jnp.int32(4))
    assert float(step_lr["b"]["kernel"]) == 0.0 and step_lr["a"]["kernel"] == 1.0


def test_per_layer_rule_on_a_parameter_outside_the_stack_is_a_config_error(unrolled):
    with pytest.raises(ConfigError, match=r"one multiplier per layer, but parameter params/bert/embeddings/.* is not "
                                          r"in a layer stack"):
        multipliers([Rule("embeddings", lr=PerLayer((1.0, 1.0, 1.0)), where="x")], unrolled, "lr")
    with pytest.raises(ConfigError, match=r"has 2 per-layer values but the scanned parameter .* has shape \(3,"):
        multipliers([Rule("layers/", lr=PerLayer((1.0, 1.0)))], _scanned(unrolled), "lr")


def test_finetune_stage_uses_its_own_optimizer_and_not_the_pretraining_groups():
    from ptm_jax.train.finetune import finetune_train_config

    cfg = load_config("bert_tiny", ['train.param_groups=[{"pattern": "predictions", "lr": 2.0}]',
                                    "finetune.optimizer=sgd"])
    tcfg = finetune_train_config(cfg, 100)
    assert tcfg.optimizer == "sgd" and tcfg.param_groups == [] and cfg.train.optimizer == "adamw"


def test_boxed_parameters_get_the_paths_and_state_shardings_of_unboxed_ones():
    """The loop calls tx.init on boxed (LogicallyPartitioned) parameters and tx.update on unboxed ones: an anchored
    frozen pattern must match both, and the frozen leaves' empty optimizer state must pass through the sharding
    rules (parallel/rules.py) on a (2,2,2) mesh."""
    from ptm_jax.config import MeshConfig
    from ptm_jax.families.bert.heads import BertForPreTraining
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.parallel.rules import LOGICAL_RULES, state_shardings
    from ptm_jax.train.state import TrainState

    cfg = load_config("bert_tiny", ['train.param_groups=[{"pattern": "bias$", "frozen": True}]'])
    tx, _ = make_optimizer(cfg.train)
    ids = jnp.zeros((2, 8), jnp.int32)
    with nn.logical_axis_rules(LOGICAL_RULES):
        boxed = jax.eval_shape(lambda: TrainState.create(
            BertForPreTraining(cfg.model).init(jax.random.key(0), ids, ids, ids, ids[:, :2]), tx))
    unboxed = nn.meta.unbox(boxed)
    assert jax.tree.structure(tx.init(unboxed.params)) == jax.tree.structure(unboxed.opt_state)
    adam = unboxed.opt_state.inner_states["trainable"].inner_state[1]
    mu = adam.mu["params"]["bert"]["encoder"]["layers_0"]["attention"]["query"]
    assert mu["kernel"].shape == (32, 2, 16) and isinstance(mu["bias"], optax.MaskedNode)  # no state: frozen
    shardings = state_shardings(boxed, make_mesh(MeshConfig(data=2, fsdp=2, tensor=2)))
    kernel = shardings.params["params"]["bert"]["encoder"]["layers_0"]["attention"]["query"]["kernel"]
    assert shardings.opt_state.inner_states["trainable"].inner_state[1].mu["params"]["bert"]["encoder"][
        "layers_0"]["attention"]["query"]["kernel"] == kernel
