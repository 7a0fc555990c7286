"""LoRA's low-rank updates (Hu et al. 2021 Sec. 4.1): which kernels get one, their initialisation, and the
model's forward with them, merged into the kernel or run beside it.

A targeted kernel W of shape [*in, *out] (a scanned stack adds a leading layer axis L) is read as a matrix
[d_in, d_out], d_in = prod(in), and gets A [*in, r] and B [r, *out] (peft's lora_A / lora_B, transposed to the
Flax [in, out] layout); the model sees W + s A B, s = alpha / r. The input axes are those of the kernel's
logical names (``ptm_jax/models/layers.py`` ``partitioned``): all but the last when the last is 'embed' and the
first is not (an output projection [heads, kv, embed]), else the first (a query [embed, heads, kv], an MLP
[embed, mlp]).

Adapters live beside the model's parameters in a tree of their own that mirrors them: the adapter of
``params/bert/encoder/layers_0/attention/query/kernel`` is ``lora/bert/encoder/layers_0/attention/query/kernel``
holding ``{'lora_a': A, 'lora_b': B}``.

Forward: with ``lora.dropout`` 0 the merged kernel W + s A B replaces W on the fly (:func:`merge`), which is the
adapted model exactly and works for any kernel. With dropout the update cannot be merged (h = W x + s B A
dropout(x)), so the adapter runs beside the layer: ``flax.linen.intercept_methods`` adds s dropout(x) A B to the
output of each flax ``Dense``/``DenseGeneral`` whose kernel is a target (:func:`beside_dense`); a target that no
such call reaches is a ConfigError.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.adapters.lora.config import LoraConfig
from ptm_jax.errors import ConfigError
from ptm_jax.models.layers import Partitioned
from ptm_jax.train.param_groups import Rule, path_keys, stack_layer

COLLECTION = "lora"


@dataclasses.dataclass(frozen=True)
class Target:
    """One adapted kernel: its path keys under the 'params' collection, its shape split into input and output
    axes, and whether it is a scanned stack (leading layer axis)."""

    keys: tuple[str, ...]
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    stacked: int  # layers of a scanned stack, 0 when unrolled
    in_names: tuple[Any, ...] = ()
    out_names: tuple[Any, ...] = ()
    layer_name: Any = None

    @property
    def path(self) -> str:
        return "/".join(("params",) + self.keys)

    def count(self, rank: int) -> int:
        """Trained parameters of this adapter: r (d_in + d_out), times the layers of a stack."""
        return rank * (math.prod(self.in_shape) + math.prod(self.out_shape)) * max(self.stacked, 1)


class FrozenTrunk(Rule):
    """The frozen rule of a LoRA run: the pretrained trunk (``params/<trunk>/``) but the ``lora.trainable``
    patterns; the adapters ('lora/...') and the task head are not matched, so they train."""

    def __init__(self, trunk: str, trainable: tuple[str, ...]):
        super().__init__(f"^params/{re.escape(trunk)}/", frozen=True, where="lora (the frozen pretrained trunk)")
        object.__setattr__(self, "trainable", tuple(trainable))

    def matches(self, path: str) -> bool:
        return re.search(self.pattern, path) is not None and not any(re.search(p, path) for p in self.trainable)


def _in_ndim(names: tuple[Any, ...], ndim: int) -> int:
    if names and names[-1] == "embed" and names[0] != "embed":
        return ndim - 1
    return 1


def find_targets(cfg: LoraConfig, boxed: Any, frozen: FrozenTrunk, where: str = "lora") -> list[Target]:
    """The kernels the ``targets`` patterns find among the frozen parameters of the (abstract, boxed) init tree.
    A pattern that finds none, or a match that is not a frozen kernel of rank >= 2, is a ConfigError."""
    leaves = jax.tree_util.tree_flatten_with_path(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))[0]
    found: dict[str, Target] = {}
    paths = []
    for path, leaf in leaves:
        keys = path_keys(path)
        joined = "/".join(keys)
        paths.append(joined)
        hits = [i for i, p in enumerate(cfg.targets) if re.search(p, joined)]
        if not hits:
            continue
        names = tuple(getattr(leaf, "names", ()) or ())
        shape = tuple(np.shape(leaf.value if isinstance(leaf, nn.LogicallyPartitioned) else leaf))
        field = f"{where}.targets[{hits[0]}]={cfg.targets[hits[0]]!r}"
        if keys[0] != "params" or not frozen.matches(joined):
            raise ConfigError(f"{field} matches {joined}, which is not a frozen pretrained weight (the task head and "
                              f"{where}.trainable train in full); narrow the pattern to the trunk's kernels")
        stacked = shape[0] if stack_layer(keys) == "stacked" else 0
        layer_name = names[0] if stacked and names else None
        core, core_names = (shape[1:], names[1:]) if stacked else (shape, names)
        if keys[-1] != "kernel" or len(core) < 2:
            raise ConfigError(f"{field} matches {joined} of shape {shape}, not a kernel; LoRA adapts weight "
                              "matrices (leaves named 'kernel'): narrow the pattern (e.g. end it with '/kernel$')")
        k = _in_ndim(core_names, len(core))
        found[joined] = Target(tuple(keys[1:]), core[:k], core[k:], stacked, core_names[:k], core_names[k:],
                               layer_name)
    for i, p in enumerate(cfg.targets):
        if not any(re.search(p, t) for t in found):
            sample = ", ".join(x for x in paths if x.endswith("kernel"))[:400]
            raise ConfigError(f"{where}.targets[{i}]={p!r} matches no kernel of the model; kernel paths look like "
                              f"{sample} ...; fix the pattern")
    return list(found.values())


def grown_paths(boxed: Any, pretrained: dict, trunk: str) -> tuple[str, ...]:
    """Paths ('params/<trunk>/...') of the trunk tensors whose shape the pretrained tree does not have (rows
    added for task tokens)."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(
            boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))[0]:
        keys = path_keys(path)
        if len(keys) < 2 or keys[:2] != ["params", trunk]:
            continue
        node: Any = pretrained
        for k in keys[1:]:
            node = node.get(k) if isinstance(node, dict) else None
        shape = np.shape(leaf.value if isinstance(leaf, nn.LogicallyPartitioned) else leaf)
        if node is not None and np.shape(node) != shape:
            out.append("/".join(keys))
    return tuple(out)


def init_adapters(cfg: LoraConfig, targets: list[Target], rng: jax.Array) -> dict:
    """The adapter tree (``lora`` collection): A by ``cfg.init``, B zero, boxed with the kernel's logical names
    (A: its input axes and none for the rank; B: none, then its output axes)."""
    tree: dict = {}
    for i, t in enumerate(targets):
        lead = (t.stacked,) if t.stacked else ()
        d_in = math.prod(t.in_shape)
        key = jax.random.fold_in(rng, i)
        a_shape = lead + t.in_shape + (cfg.rank,)
        if cfg.init == "gaussian":
            a = jax.random.normal(key, a_shape, jnp.float32) / cfg.rank
        else:  # kaiming uniform with a = sqrt(5) over fan_in = d_in: U(-1/sqrt(d_in), 1/sqrt(d_in))
            bound = 1.0 / math.sqrt(d_in)
            a = jax.random.uniform(key, a_shape, jnp.float32, -bound, bound)
        b = jnp.zeros(lead + (cfg.rank,) + t.out_shape, jnp.float32)
        lead_names = (t.layer_name,) if t.stacked else ()
        node = tree
        for k in t.keys:
            node = node.setdefault(k, {})
        if t.in_names:
            node["lora_a"] = Partitioned(a, lead_names + t.in_names + (None,))
            node["lora_b"] = Partitioned(b, lead_names + (None,) + t.out_names)
        else:
            node["lora_a"], node["lora_b"] = a, b
    return tree


def _get(tree: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        tree = tree[k]
    return tree


def _set(tree: dict, keys: tuple[str, ...], value: Any) -> dict:
    """A copy of ``tree`` (dicts along the path only) with the leaf at ``keys`` replaced."""
    if not keys:
        return value
    out = dict(tree)
    out[keys[0]] = _set(tree[keys[0]], keys[1:], value)
    return out


def delta(t: Target, a: jax.Array, b: jax.Array, scale: float) -> jax.Array:
    """s A B in the kernel's shape (a stack: one product per layer)."""
    if t.stacked:
        return scale * jax.vmap(lambda x, y: jnp.tensordot(x, y, axes=1))(a, b)
    return scale * jnp.tensordot(a, b, axes=1)


def merge(params: dict, adapters: dict, targets: list[Target], scale: float) -> dict:
    """The 'params' collection with every target kernel replaced by W + s A B (same dtype as W)."""
    for t in targets:
        node = _get(adapters, t.keys)
        w = _get(params, t.keys)
        params = _set(params, t.keys, (w + delta(t, node["lora_a"], node["lora_b"], scale)).astype(w.dtype))
    return params


def freeze(params: dict, frozen: FrozenTrunk) -> dict:
    """``stop_gradient`` on the frozen leaves: the backward pass computes no gradient for the pretrained
    weights (only activation gradients flow through them), which is where LoRA saves time."""
    return jax.tree_util.tree_map_with_path(
        lambda p, x: jax.lax.stop_gradient(x) if frozen.matches("/".join(("params",) + tuple(path_keys(p))))
        else x, params)


@contextlib.contextmanager
def beside_dense(adapters: dict, targets: list[Target], scale: float, rate: float, rng: jax.Array):
    """Within this context every flax Dense/DenseGeneral call whose kernel is a target returns
    ``W x + b + s dropout(x) A B`` (dropout at ``rate``, keyed by ``rng`` and the target). On exit, a target
    no such call reached is a ConfigError (its module is not a Dense, or it sits in a scanned stack)."""
    by_module = {t.keys[:-1]: (i, t) for i, t in enumerate(targets) if t.keys[-1] == "kernel" and not t.stacked}
    seen: set[int] = set()

    def interceptor(next_fun, args, kwargs, context):
        mod = context.module
        if context.method_name != "__call__" or not isinstance(mod, (nn.Dense, nn.DenseGeneral)):
            return next_fun(*args, **kwargs)
        hit = by_module.get(tuple(mod.scope.path))
        if hit is None:
            return next_fun(*args, **kwargs)
        i, t = hit
        axis = (-1,) if isinstance(mod, nn.Dense) else tuple(np.atleast_1d(mod.axis).tolist())
        if len(axis) != len(t.in_shape) or sorted(a % args[0].ndim for a in axis) != list(
                range(args[0].ndim - len(axis), args[0].ndim)):
            raise ConfigError(f"lora.dropout>0: {t.path} is contracted over axes {axis}, not its input axes "
                              f"{t.in_shape}; set lora.dropout=0 (the merged update is exact for any kernel)")
        seen.add(i)
        y = next_fun(*args, **kwargs)
        x = args[0]
        if rate > 0.0:
            keep = jax.random.bernoulli(jax.random.fold_in(rng, i), 1.0 - rate, x.shape)
            x = jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)
        node = _get(adapters, t.keys)
        h = jnp.tensordot(x, node["lora_a"].astype(x.dtype), axes=len(t.in_shape))
        return y + (scale * jnp.tensordot(h, node["lora_b"].astype(x.dtype), axes=1)).astype(y.dtype)

    with nn.intercept_methods(interceptor):
        yield
    missing = [t.path for i, t in enumerate(targets) if i not in seen]
    if missing:
        raise ConfigError(f"lora.dropout>0 runs the adapters beside flax Dense/DenseGeneral calls, but no such call "
                          f"uses {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} (another module, or a "
                          "scanned layer stack); set lora.dropout=0")
