"""ptm_jax/checkpoint.py's saving of replicated arrays on an 8-device mesh: orbax's replica-parallel split (each
replica writes a slice) applies only where a replica's slice is at least ``MIN_REPLICA_SLICE_BYTES``, so a small
replicated array (a bias, a LayerNorm scale) is written whole by one replica and compiles no slicing program;
both kinds restore bit-equal."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ptm_jax.checkpoint import MIN_REPLICA_SLICE_BYTES, Checkpointer, abstract_with_shardings

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def _save_counting_compiles(state: dict, directory) -> int:
    compiles = []

    def listener(name, secs, **kwargs):
        if name == BACKEND_COMPILE:
            compiles.append(secs)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        ckpt = Checkpointer(directory)
        ckpt.save(1, state, {"cursor": 0})
        ckpt.wait()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    back, meta = ckpt.restore(abstract_with_shardings(state, jax.tree.map(lambda a: a.sharding, state)))
    ckpt.close()
    assert meta == {"cursor": 0}
    for k in state:
        np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(state[k]), err_msg=k)
    return len(compiles)


def test_small_replicated_arrays_save_whole_without_slicing_programs_and_large_ones_in_slices(tmp_path):
    mesh = jax.make_mesh((8,), ("data",))
    replicated = NamedSharding(mesh, P())
    rng = np.random.default_rng(0)
    small = {"bias": jax.device_put(rng.standard_normal(32).astype(np.float32), replicated),
             "scale": jax.device_put(rng.standard_normal((4, 24)).astype(np.float32), replicated),
             "kernel": jax.device_put(rng.standard_normal((64, 16)).astype(np.float32), NamedSharding(mesh, P("data")))}
    assert _save_counting_compiles(small, tmp_path / "small") == 0
    # 8 replicas x a 1 MiB slice each: replica-parallel, one slicing program per device
    rows = 8 * MIN_REPLICA_SLICE_BYTES // (4 * 64)
    large = {"table": jax.device_put(rng.standard_normal((rows, 64)).astype(np.float32), replicated)}
    assert _save_counting_compiles(large, tmp_path / "large") >= 8


def _tree_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def test_uncompressed_checkpoints_are_larger_sharded_and_load_through_either_handler(tmp_path):
    """``train.checkpoint_compression=false``: the arrays are written without zstd (a table of small integers,
    which zstd shrinks to a fraction, takes its full size on disk), sharded over the 8-device mesh, and the
    step restores bit-equal through the uncompressed Checkpointer and through the default one (as ``ptm
    export`` reads it); a compressed step restores through the uncompressed one too."""
    mesh = jax.make_mesh((8,), ("data",))
    table = np.tile(np.arange(64, dtype=np.float32), (4096, 1))  # 1 MiB, very compressible
    state = {"table": jax.device_put(table, NamedSharding(mesh, P("data")))}
    abstract = abstract_with_shardings(state, jax.tree.map(lambda a: a.sharding, state))
    sizes = {}
    for compression in (True, False):
        directory = tmp_path / f"compression_{compression}"
        ckpt = Checkpointer(directory, compression=compression)
        ckpt.save(3, state, {"cursor": 7})
        ckpt.close()
        sizes[compression] = _tree_bytes(directory)
        for reader in (Checkpointer(directory, compression=True), Checkpointer(directory, compression=False),
                       Checkpointer(directory, local=True)):
            back, meta = reader.restore(abstract)
            reader.close()
            assert meta == {"cursor": 7}
            assert back["table"].sharding == state["table"].sharding
            np.testing.assert_array_equal(np.asarray(back["table"]), table)
    assert sizes[False] > table.nbytes > 10 * sizes[True], sizes


def test_a_checkpoint_of_another_configuration_is_one_error_naming_the_folder_and_what_to_do(tmp_path):
    """Restoring a step into a state of another structure (a full-finetuning checkpoint read by a LoRA run that
    reuses its output_dir) is a CheckpointError naming the checkpoint and the ways out, in one bounded line; the
    checkpoint is left as it was."""
    import pytest

    from ptm_jax.errors import CheckpointError

    mesh = jax.make_mesh((8,), ("data",))
    rep = NamedSharding(mesh, P())
    state = {"kernel": jax.device_put(np.ones((4, 4), np.float32), rep)}
    directory = tmp_path / "checkpoints"
    ckpt = Checkpointer(directory)
    ckpt.save(2, state, {"cursor": 0})
    ckpt.close()
    other = {"kernel": state["kernel"], "lora_a": jax.device_put(np.zeros((4, 2), np.float32), rep)}
    reader = Checkpointer(directory)
    with pytest.raises(CheckpointError) as err:
        reader.restore(abstract_with_shardings(other, jax.tree.map(lambda a: a.sharding, other)))
    reader.close()
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {directory}/2 does not match this model/config (") and "\n" not in msg
    assert f"another output_dir (or remove {directory})" in msg and len(msg) < 700, msg
    back, _ = Checkpointer(directory).restore(abstract_with_shardings(state, jax.tree.map(lambda a: a.sharding,
                                                                                          state)))
    np.testing.assert_array_equal(np.asarray(back["kernel"]), np.ones((4, 4)))
