"""ptm_jax/fs.py on local disk and on gs:// (a local GCS emulator, tests/gcs_emulator.py): atomic writes, the
marker rule, local copies and uploads, and orbax writing its arrays to the bucket itself."""
from __future__ import annotations

import pytest

from tests.gcs_emulator import GcsEmulator, apply_env


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    import os

    saved = dict(os.environ)
    emu = GcsEmulator(tmp_path_factory.mktemp("gcs")).start()
    apply_env(emu.env)
    emu.bucket = emu.create_bucket("ptm-test")
    yield emu
    emu.stop()
    os.environ.clear()
    os.environ.update(saved)
    apply_env({})


@pytest.fixture(params=["local", "gs"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    gcs = request.getfixturevalue("gcs")
    return f"{gcs.bucket}/{request.node.name.replace('[', '-').rstrip(']')}"


def test_atomic_write_then_read_back_and_overwrite(root):
    from ptm_jax import fs

    f = f"{root}/a/b/config.json"
    assert not fs.exists(f)
    fs.write_text_atomic(f, '{"x": 1}')
    assert fs.read_text(f) == '{"x": 1}'
    fs.write_bytes_atomic(f, b"\x00\x01" * 1000)
    assert fs.read_bytes(f) == b"\x00\x01" * 1000
    # the scheme survives: a gs:// path never turns into a local folder gs:/...
    assert fs.to_str(fs.path(f)) == f
    assert fs.is_remote(f) == f.startswith("gs://")
    leftovers = [p.name for p in fs.path(f).parent.iterdir()]
    assert leftovers == ["config.json"]  # no temporary sibling left behind


def test_marker_commits_a_directory_and_rmtree_removes_it(root):
    from ptm_jax import fs

    d = f"{root}/params"
    fs.write_text_atomic(f"{d}/weights.bin", "w")
    assert fs.exists(d) and not fs.is_complete(d)
    fs.mark_complete(d)
    assert fs.is_complete(d)
    fs.rmtree(d)
    assert not fs.exists(f"{d}/weights.bin") and not fs.is_complete(d)


def test_upload_tree_then_local_copy_round_trip_and_refresh(root, tmp_path, monkeypatch):
    from ptm_jax import fs

    monkeypatch.setenv("PTM_LOCAL_SCRATCH", str(tmp_path / "scratch"))
    src = tmp_path / "built"
    (src / "sub").mkdir(parents=True)
    (src / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (src / "sub" / "shard-0.bin").write_bytes(bytes(range(256)))
    remote = f"{root}/tokenizer"
    if fs.is_remote(remote):
        fs.write_text_atomic(f"{remote}/half-written", "x")
        with pytest.raises(FileNotFoundError, match="not complete"):
            fs.local_copy(remote)  # no marker yet: treated as absent
    fs.upload_tree(src, remote)
    assert fs.is_complete(remote)
    copy = fs.local_copy(remote)
    assert (copy / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"
    assert (copy / "sub" / "shard-0.bin").read_bytes() == bytes(range(256))
    if fs.is_remote(remote):
        assert str(copy).startswith(str(tmp_path / "scratch"))
        assert fs.local_copy(remote) == copy  # made once
        (src / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n")
        fs.upload_tree(src, remote)  # published again: a new marker token
        assert (fs.local_copy(remote) / "vocab.txt").read_text().count("\n") == 3
        assert (fs.local_copy(remote) / "half-written").read_text() == "x"
    else:
        assert str(copy) == remote  # a local directory is used in place


def test_orbax_writes_arrays_into_the_bucket(gcs):
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp

    target = f"{gcs.bucket}/orbax/1"
    tree = {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(5, jnp.int32)}
    ck = ocp.StandardCheckpointer()
    ck.save(target, tree)
    ck.wait_until_finished()
    names = gcs.objects("ptm-test", "orbax/1/")
    assert "orbax/1/commit_success.txt" in names and any("/d/" in n for n in names), names
    back = ck.restore(target)
    np.testing.assert_array_equal(back["w"], np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(back["b"], np.ones(5, np.int32))
