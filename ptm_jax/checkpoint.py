"""The one checkpoint path: an orbax CheckpointManager holding the train state and the run's metadata.

Each step directory holds ``state`` (sharded arrays, written by every process for its own shards; nothing is
gathered to one host) and ``meta`` (JSON: the data cursor, i.e. the next global example index, and the
config). Saves are asynchronous; orbax writes into a temporary directory and renames it on completion, so a
crash never leaves a step that ``latest_step`` would pick. Restores go into abstract targets that carry the
*current* shardings, so a checkpoint written on one mesh or process count loads on another.

The directory may be ``gs://``: orbax gets the bucket path itself (an ``epath.Path`` from ptm_jax/fs.py; a
``pathlib.Path`` would turn ``gs://b/x`` into the local folder ``gs:/b/x``). There orbax has no atomic rename
and commits a step by writing ``commit_success.txt`` into it last; steps without it are not listed.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from ptm_jax import fs
from ptm_jax.errors import CheckpointError

MIN_REPLICA_SLICE_BYTES = 1 << 20
"""Replica-parallel saving (orbax: the replicas of a replicated array each write a slice of it) only where each
slice is at least 1 MiB. Below that a split saves no write time, and each slice shape costs a compiled slicing
program on every device at the first save: 96 of them, 3.7 s, in a 2-stage bert_tiny run on 8 devices."""


def _register_array_handler() -> None:
    """orbax's jax.Array handler with ``MIN_REPLICA_SLICE_BYTES``; orbax logs every override of a registered type
    as a warning, which this deliberate one is not (tests/test_log_lines.py keeps runs free of such lines)."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        ocp.type_handlers.register_type_handler(
            jax.Array, ocp.type_handlers.ArrayHandler(min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES),
            override=True)
    finally:
        absl.setLevel(level)


_register_array_handler()


class Checkpointer:
    def __init__(self, directory: str | Path, keep: int = 3, async_save: bool = True, local: bool = False,
                 compression: bool = True):
        """``local``: this process alone reads (no barrier with the other processes, nothing created): loading
        a run's parameters outside training, e.g. ``ptm export --format hf`` on process 0 of several.
        ``compression``: zstd over the arrays (``train.checkpoint_compression``); without it the state is written
        by orbax's PyTree handler with ``use_compression=False`` (the same layout: either handler reads it). A
        ``local`` reader ignores it (reading does not depend on how a step was written)."""
        self.directory = fs.absolute(directory)
        extra = {}
        if local:
            me = jax.process_index()
            extra = {"multiprocessing_options": ocp.options.MultiprocessingOptions(primary_host=me,
                                                                                    active_processes={me})}
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save,
                                               create=not local, **extra)
        self._plain = not compression and not local
        if self._plain:
            handlers = {"state": ocp.PyTreeCheckpointHandler(use_compression=False),
                        "meta": ocp.JsonCheckpointHandler()}
            self._mngr = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)
        else:
            self._mngr = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mngr.all_steps())

    def save(self, step: int, state: Any, meta: dict[str, Any], force: bool = True) -> bool:
        fields = _fields(state)
        item = ocp.args.PyTreeSave(fields) if self._plain else ocp.args.StandardSave(fields)
        return self._mngr.save(step, args=ocp.args.Composite(state=item, meta=ocp.args.JsonSave(meta)), force=force)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Restores ``step`` (default latest) into ``abstract_state`` (ShapeDtypeStructs with shardings)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        try:
            target = _fields(abstract_state)
            item = (ocp.args.PyTreeRestore(target, restore_args=ocp.checkpoint_utils.construct_restore_args(target))
                    if self._plain else ocp.args.StandardRestore(target))
            out = self._mngr.restore(step, args=ocp.args.Composite(state=item, meta=ocp.args.JsonRestore()))
        except (ValueError, KeyError, FileNotFoundError) as e:
            first = str(e).strip().splitlines()[0].rstrip(":") if str(e).strip() else type(e).__name__
            raise CheckpointError(
                f"checkpoint {self.directory}/{step} does not match this model/config ({first[:300]}); it was "
                "written by another configuration (model shape, adapter, task head or optimizer): resume with the "
                f"config that wrote it, or start afresh with another output_dir (or remove {self.directory})"
            ) from e
        state = out.state
        if dataclasses.is_dataclass(abstract_state):
            state = abstract_state.replace(**state)
        return state, dict(out.meta)

    def restore_meta(self, step: int | None = None) -> dict[str, Any]:
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        return dict(self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta)

    def wait(self) -> None:
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()


def _fields(state: Any) -> Any:
    """A dataclass state (TrainState) as a dict of its fields, leaving out fields that are None (a carry an
    objective does not use), so checkpoints of states without a carry keep the layout they always had."""
    if not dataclasses.is_dataclass(state):
        return state
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if getattr(state, f.name) is not None}


def abstract_with_shardings(shapes: Any, shardings: Any) -> Any:
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
