"""Parameter groups: rules from parameter-path patterns to a learning-rate multiplier, a weight-decay
multiplier and a frozen flag (the model is big_vision's ``optax.make``: a list of ``(regex, settings)``;
big_vision/optax.py).

A parameter's path is its keys joined by '/', e.g. ``params/bert/encoder/layers_3/attention/query/kernel``
(a scanned stack: ``params/bert/encoder/layers/layer/attention/query/kernel`` with a leading layer axis).
Every rule whose ``pattern`` is found in the path (``re.search``) applies, and the multipliers of all the
rules that match a parameter multiply; a parameter matched by a frozen rule gets no update and no optimizer
state (``optax.multi_transform`` with ``optax.set_to_zero``).

A multiplier is a number, a function of the step (``step -> multiplier``, traced inside the jitted update),
or ``PerLayer`` values: layer i of a layer stack gets ``values[i]``, whether the stack is unrolled (``layers_i``) or scanned
(one tensor whose leading axis is the layer). Layer-wise learning-rate decay (``layerwise_decay_rules``) and
BERT's weight-decay mask (``KERNEL_ONLY_DECAY``) are rules of this kind. A family supplies its own rules in place
of ``DEFAULT_RULES`` (and, for its own layer naming, its own ``PerLayer.layer_of``).

A rule's ``start_step`` freezes its parameters until that step (gradual unfreezing, Howard & Ruder 2018 Sec. 3.3):
before it their gradients are zeroed ahead of clipping, their optimizer state does not move and they get no
update, not even weight decay, as fastai freezes a layer group with ``requires_grad=False`` (the gradient is None,
so neither ``clip_grad_norm_`` nor the optimizer sees it). From that step on they train as any other; Adam's bias
correction counts their own steps (PyTorch keeps a step per parameter). ``train/optim.py`` ``train_from`` does it.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.errors import ConfigError


def stack_layer(keys: Sequence[str]) -> int | str | None:
    """The layer a parameter belongs to: ``i`` under an unrolled ``layers_i``, ``'stacked'`` under a scanned
    ``layers`` stack (the tensor's leading axis is the layer), None outside the layer stack."""
    for k in keys:
        m = re.fullmatch(r"layers_(\d+)", k)
        if m:
            return int(m.group(1))
        if k == "layers":
            return "stacked"
    return None


@dataclasses.dataclass(frozen=True)
class PerLayer:
    """A multiplier per layer of a stack: layer i gets ``values[i]``."""

    values: tuple[float, ...]
    layer_of: Callable[[Sequence[str]], int | str | None] = stack_layer


Multiplier = float | Callable[[jax.Array], jax.Array] | PerLayer


@dataclasses.dataclass(frozen=True)
class Rule:
    """Parameters whose path matches ``pattern`` (``re.search``) get these settings; ``where`` names the rule
    in errors (e.g. a config field); ``must_match``: a rule that matches no parameter is a ConfigError (given
    rules: a misspelt pattern), or not (a family's rules for parameters that a model may lack)."""

    pattern: str
    lr: Multiplier = 1.0
    weight_decay: Multiplier = 1.0
    frozen: bool = False
    where: str = ""
    must_match: bool = True
    start_step: int = 0
    """Frozen before this step (module doc); 0: trains from the first step."""

    def __post_init__(self):
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise ConfigError(f"{self.where or 'parameter group'}: pattern {self.pattern!r} is not a regular "
                              f"expression ({e}); fix the pattern") from None

    def matches(self, path: str) -> bool:
        return re.search(self.pattern, path) is not None


KERNEL_ONLY_DECAY = Rule(r"(^|/)(?!(kernel|embedding)$)[^/]*$", weight_decay=0.0,
                         where="weight decay on kernels and embeddings only", must_match=False)
"""google-research/bert optimization.py: no weight decay on LayerNorm parameters and biases: only leaves named
``kernel`` or ``embedding`` are decayed."""

DEFAULT_RULES: tuple[Rule, ...] = (KERNEL_ONLY_DECAY,)


def layerwise_decay_rules(decay: float, num_layers: int) -> list[Rule]:
    """Layer-wise learning-rate decay (ELECTRA / BEiT finetuning): layer l of L gets ``decay**(L - l)``, the
    embeddings ``decay**(L + 1)``, everything else (heads, pooler) 1."""
    where = "finetune.layerwise_lr_decay"
    return [Rule("embeddings", lr=decay ** (num_layers + 1), where=where, must_match=False),
            Rule(r"(^|/)layers(_\d+)?/", lr=PerLayer(tuple(decay ** (num_layers - i) for i in range(num_layers))),
                 where=where, must_match=False)]


def path_keys(path: tuple[Any, ...]) -> list[str]:
    """A key path's names. Attribute steps are skipped (the ``value`` of a flax ``LogicallyPartitioned`` box:
    ``tx.init`` sees boxed parameters in the loop, ``tx.update`` unboxed ones, and both must get the same paths)."""
    return [str(getattr(k, "key", getattr(k, "idx", k))) for k in path
            if not isinstance(k, jax.tree_util.GetAttrKey)]


def _value(m: Multiplier, rule: Rule, field: str, keys: list[str], leaf: Any, step: jax.Array | None):
    """One rule's multiplier for one leaf: a Python float when static, else a traced array (broadcast along
    the leading axis for a scanned stack)."""
    if isinstance(m, PerLayer):
        layer = m.layer_of(keys)
        where = f"{rule.where or 'parameter group ' + repr(rule.pattern)}: {field}"
        if layer is None:
            raise ConfigError(f"{where} gives one multiplier per layer, but parameter {'/'.join(keys)} is not in a "
                              f"layer stack; narrow the pattern {rule.pattern!r}")
        if layer == "stacked":
            shape = np.shape(leaf)
            if not shape or shape[0] != len(m.values):
                raise ConfigError(f"{where} has {len(m.values)} per-layer values but the scanned parameter "
                                  f"{'/'.join(keys)} has shape {shape}; give one value per layer")
            return jnp.asarray(m.values, jnp.float32).reshape((len(m.values),) + (1,) * (len(shape) - 1))
        if layer >= len(m.values):
            raise ConfigError(f"{where} has {len(m.values)} per-layer values but {'/'.join(keys)} is layer {layer}")
        return float(m.values[layer])
    if callable(m):
        if step is None:
            raise ValueError("a step-dependent multiplier needs the step")
        return jnp.asarray(m(step), jnp.float32)
    return float(m)


def is_dynamic(rules: Sequence[Rule], field: str) -> bool:
    """Whether some rule's ``field`` multiplier depends on the step."""
    return any(callable(getattr(r, field)) and not isinstance(getattr(r, field), PerLayer) for r in rules)


def multipliers(rules: Sequence[Rule], tree: Any, field: str, step: jax.Array | None = None) -> Any:
    """Per-leaf product of the ``field`` ('lr' or 'weight_decay') multipliers of the rules matching each leaf:
    a Python float where static (exactly 1.0 where no rule applies), an array where it depends on the step or
    on the layer of a scanned stack."""

    def one(path, leaf):
        keys = path_keys(path)
        joined = "/".join(keys)
        out: Any = 1.0
        for r in rules:
            if r.matches(joined):
                v = _value(getattr(r, field), r, field, keys, leaf, step)
                out = out * v if not (isinstance(v, float) and v == 1.0) else out
        return out

    return jax.tree_util.tree_map_with_path(one, tree)


def start_steps(rules: Sequence[Rule], tree: Any) -> Any:
    """Per-leaf step from which the leaf trains: the largest ``start_step`` of the rules matching it (0: none).
    Leaves a masking transform hid (``optax.MaskedNode``) stay hidden."""
    timed = [r for r in rules if r.start_step > 0]
    return jax.tree_util.tree_map_with_path(
        lambda path, _: max([r.start_step for r in timed if r.matches("/".join(path_keys(path)))], default=0), tree)


def frozen_labels(rules: Sequence[Rule], tree: Any) -> Any:
    """'frozen' for the leaves some frozen rule matches, 'trainable' for the others."""
    frozen = [r for r in rules if r.frozen]
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "frozen" if any(r.matches("/".join(path_keys(path))) for r in frozen) else "trainable", tree)


def check_rules_match(rules: Sequence[Rule], tree: Any) -> None:
    """A ``must_match`` rule that matches no parameter is a ConfigError (a misspelt pattern would silently do
    nothing)."""
    paths = ["/".join(path_keys(p)) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    for r in rules:
        if not r.must_match:
            continue
        if not any(r.matches(p) for p in paths):
            sample = ", ".join(paths[:4])
            raise ConfigError(f"{r.where or 'parameter group'}: pattern {r.pattern!r} matches no parameter; paths "
                              f"look like {sample} ({len(paths)} in all); fix the pattern")


def rules_from_config(groups: Sequence[Any], where: str) -> list[Rule]:
    """``train.param_groups`` / ``finetune.param_groups`` tables -> rules (``start_step`` > 0: frozen until that
    step, module doc)."""
    return [Rule(g.pattern, lr=g.lr, weight_decay=g.weight_decay, frozen=g.frozen, where=f"{where}[{i}]",
                 start_step=int(g.start_step)) for i, g in enumerate(groups)]
