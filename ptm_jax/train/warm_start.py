"""``train.init_from``: start a stage from another run's latest checkpoint, optimizer state included, with the
step, the learning-rate schedule and the data cursor back at 0.

This is how NVIDIA's BERT recipe (DeepLearningExamples, PyTorch/LanguageModeling/BERT ``run_pretraining.py``)
starts phase 2 (seq 512) from phase 1 (seq 128): the model and the LAMB state (both moments) are loaded from
phase 1's last checkpoint, the optimizer's step is set to 0 and the new phase's learning rate, warmup and
length apply. Here the state's integer counters (the train step, optax's ``count`` fields, which drive Adam's
bias correction and the schedule; the non-finite counters) are zeroed and every float leaf is kept.

Only when the stage has no checkpoint of its own: a resumed phase 2 continues from its own checkpoints.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ptm_jax import fs
from ptm_jax.errors import ConfigError


def checkpoint_dir(init_from: str, stage: str) -> Any:
    """The checkpoints folder of ``init_from``: a stage folder (``.../pretrain``) or a run (``.../<stage>``)."""
    root = fs.path(init_from)
    for candidate in (root / "checkpoints", root / stage / "checkpoints"):
        if candidate.exists():
            return candidate
    raise ConfigError(f"train.init_from={init_from!r}: no checkpoints in {root / 'checkpoints'} or "
                      f"{root / stage / 'checkpoints'}; give a finished run (or its {stage} folder)")


def restart_counters(state: Any) -> Any:
    """``state`` with every integer scalar (steps, optimizer counts, non-finite counters) set to 0."""
    def zero(x):
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.integer) and x.ndim == 0:
            return x * 0
        return x

    return jax.tree.map(zero, state)


def warm_state(init_from: str, stage: str, abstract_state: Any) -> tuple[Any, int]:
    """(state restored from ``init_from``'s latest checkpoint with its counters restarted, the step it was at)."""
    from ptm_jax.checkpoint import Checkpointer

    ckpt = Checkpointer(checkpoint_dir(init_from, stage), async_save=False)
    try:
        if ckpt.latest_step() is None:
            raise ConfigError(f"train.init_from={init_from!r}: its checkpoints folder holds no complete checkpoint")
        state, saved = ckpt.restore(abstract_state)
    finally:
        ckpt.close()
    return restart_counters(state), int(saved["step"])
