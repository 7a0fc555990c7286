"""The one table that maps logical axis names to mesh axes, and the specs derived from it.

Models name every parameter and activation dimension with a logical axis ('embed', 'mlp', 'heads', ...);
only this module knows the mesh axes ``data``, ``fsdp`` and ``tensor``. Parameters shard their 'embed'
dimension over ``fsdp`` (ZeRO-3 style) and their 'mlp'/'heads'/'vocab' dimension over ``tensor``
(Megatron style); activations shard the batch over ``data`` x ``fsdp``.
"""
from __future__ import annotations

import logging
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

log = logging.getLogger(__name__)

MESH_AXES = ("data", "fsdp", "tensor")

LOGICAL_RULES: tuple[tuple[str, Any], ...] = (
    # activations
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),
    ("act_mlp", "tensor"),
    ("act_heads", "tensor"),
    ("act_kv", None),
    ("act_vocab", "tensor"),
    ("predictions", None),
    # parameters
    ("embed", "fsdp"),
    ("embed_out", "tensor"),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("positions", None),
    ("types", None),
    ("classes", None),
    ("layers", None),
)


def _divisible(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
    """Drops mesh axes that do not divide a dimension (e.g. vocab 30522 over tensor=4): replicate it instead."""
    fixed = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        names = (axes,) if isinstance(axes, str) else tuple(axes or ())
        size = 1
        for n in names:
            size *= mesh.shape[n]
        fixed.append(axes if size == 1 or dim % size == 0 else None)
    return P(*fixed)


def logical_to_sharding(logical_specs: Any, shapes: Any, mesh: Mesh) -> Any:
    """Tree of logical PartitionSpecs + tree of shapes -> tree of NamedShardings on ``mesh``."""

    def one(spec, shape):
        if shape is None:  # an empty field of the state (TrainState.carry of an objective that carries nothing)
            return None
        if not hasattr(shape, "shape"):  # optax.MaskedNode: no optimizer state for a frozen parameter
            return shape
        mesh_spec = nn.logical_to_mesh_axes(spec, LOGICAL_RULES) if spec is not None else P()
        return NamedSharding(mesh, _divisible(mesh_spec, tuple(shape.shape), mesh))

    return jax.tree.map(one, logical_specs, shapes, is_leaf=lambda x: isinstance(x, P) or x is None)


def state_shardings(abstract_boxed_state: Any, mesh: Mesh) -> Any:
    """Shardings for a (possibly boxed) abstract train state, from the logical names on its parameters."""
    logical = nn.get_partition_spec(abstract_boxed_state)
    shapes = nn.meta.unbox(abstract_boxed_state)
    return logical_to_sharding(logical, shapes, mesh)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Batch dimension over data x fsdp, the rest replicated."""
    return NamedSharding(mesh, nn.logical_to_mesh_axes(("batch",) + (None,) * (ndim - 1), LOGICAL_RULES))


def group_sharding(mesh: Mesh, ndim: int = 3) -> NamedSharding:
    """A stack of batches ([k, batch, ...], ``train.steps_per_call``): the batch dimension as ``batch_sharding``
    places it, the leading one on every device."""
    return NamedSharding(mesh, P(None, *batch_sharding(mesh, ndim - 1).spec))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
