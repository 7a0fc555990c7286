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


def test_metrics_writer_on_gs_rewrites_the_log_and_a_resumed_writer_keeps_the_records(gcs):
    from ptm_jax import fs
    from ptm_jax.train.metrics import MetricsWriter, read_metrics

    stage = f"{gcs.bucket}/metrics/pretrain"
    w = MetricsWriter(stage, total_steps=3, progress_bar=False)
    w.write(1, "train", {"loss": 2.0})  # the first record is uploaded at once
    w.write(2, "train", {"loss": 1.5})  # train records are then paced (REMOTE_FLUSH_SECS)
    assert [r["step"] for r in read_metrics(f"{stage}/metrics.jsonl")] == [1]
    w.flush()  # what the loop calls before each checkpoint
    assert [r["step"] for r in read_metrics(f"{stage}/metrics.jsonl")] == [1, 2]
    w.write(2, "eval", {"loss": 1.25})  # eval records are uploaded at once
    assert read_metrics(f"{stage}/metrics.jsonl")[-1] == {**read_metrics(f"{stage}/metrics.jsonl")[-1],
                                                         "step": 2, "split": "eval", "loss": 1.25}
    w.close()
    w = MetricsWriter(stage, total_steps=3, progress_bar=False, initial_step=2)  # a resumed run
    w.write(3, "train", {"loss": 1.0})
    w.close()
    rows = read_metrics(f"{stage}/metrics.jsonl")
    assert [(r["step"], r["split"], r["loss"]) for r in rows] == [
        (1, "train", 2.0), (2, "train", 1.5), (2, "eval", 1.25), (3, "train", 1.0)]
    assert fs.read_bytes(f"{stage}/curves.png")[:8] == b"\x89PNG\r\n\x1a\n"
    events = [o for o in gcs.objects("ptm-test", "metrics/pretrain/tb/") if "tfevents" in o]
    assert len(events) == 2, events  # one TensorBoard event file per writer, in the bucket


def test_load_params_refuses_a_gs_params_directory_without_its_marker(gcs):
    import json

    from ptm_jax import fs
    from ptm_jax.errors import CheckpointError
    from ptm_jax.export.params import load_params

    d = f"{gcs.bucket}/half-written-params"
    fs.write_text_atomic(f"{d}/ptm.json", json.dumps({"format": "ptm_jax.params", "version": 1}))
    with pytest.raises(CheckpointError, match="COMPLETE"):
        load_params(d)


def test_local_copy_by_several_readers_of_one_host_at_once_never_shows_a_missing_file(gcs, tmp_path, monkeypatch):
    """Two processes of one host share PTM_LOCAL_SCRATCH: a reader must never find the copy half-replaced."""
    import threading

    from ptm_jax import fs

    monkeypatch.setenv("PTM_LOCAL_SCRATCH", str(tmp_path / "scratch"))
    src = tmp_path / "tok"
    src.mkdir()
    remote = f"{gcs.bucket}/race/tokenizer"
    errors, reads = [], []

    def reader():
        try:
            for _ in range(3):
                reads.append((fs.local_copy(remote) / "vocab.txt").read_text())
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(e))

    for version in ("a\n", "a\nb\n"):  # first copy, then a stale copy refreshed by all readers at once
        (src / "vocab.txt").write_text(version)
        fs.upload_tree(src, remote)
        threads = [threading.Thread(target=reader) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        assert reads[-12:] == [version] * 12


def test_cache_chunks_on_gs_are_copied_to_scratch_several_at_once_byte_identical(gcs, shared_data, tmp_path,
                                                                                   monkeypatch):
    """A gs:// token cache of several chunks: ``build_or_load_cache`` copies them to the host's scratch disk with
    PTM_CACHE_DOWNLOAD_THREADS downloads at once (the first two copies must be in flight together, or the barrier
    in the wrapper below breaks), every copied file equals its object byte for byte, each copy carries the bucket's
    COMPLETE token, and the corpus read from the copies equals the one built on local disk."""
    import dataclasses
    import threading

    from ptm_jax import fs
    from ptm_jax.config import DataConfig
    from ptm_jax.data import cache as cache_mod
    from ptm_jax.data.tokenizers import train_wordpiece
    from ptm_jax.errors import ConfigError

    text = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8")[:60_000]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus/play.txt").write_text(text, encoding="utf-8")
    tok = train_wordpiece([ln for ln in text.splitlines() if ln.strip()], 500, tmp_path / "tok")
    cfg = dataclasses.replace(DataConfig(corpus=str(tmp_path / "corpus"), doc_max_sentences=32),
                              cache_chunk_bytes=12_000)
    local = cache_mod.build_or_load_cache(cfg, tok, tmp_path / "local-cache")
    n = len(local.meta["shards"])
    assert n >= 4

    monkeypatch.setenv("PTM_LOCAL_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("PTM_CACHE_DOWNLOAD_THREADS", "2")
    meet = threading.Barrier(2, timeout=60)
    real_copy, threads, calls, lock = fs.local_copy, set(), [], threading.Lock()

    def copy_in_pairs(target, *args, **kwargs):
        if "/chunk-" in str(target):
            with lock:
                threads.add(threading.current_thread().name)
                first_two = len(calls) < 2
                calls.append(str(target))
            if first_two:
                meet.wait()  # the first two copies meet here: one at a time, the first would wait alone
        return real_copy(target, *args, **kwargs)

    monkeypatch.setattr(fs, "local_copy", copy_in_pairs)
    root = f"{gcs.bucket}/parallel-copy/cache"
    remote = cache_mod.build_or_load_cache(cfg, tok, root)
    assert len(calls) == n and len(threads) == 2 and all(t.startswith("token-cache-copy") for t in threads), threads
    assert [[s.tolist() for s in remote.document(d)] for d in range(remote.num_docs)] == \
        [[s.tolist() for s in local.document(d)] for d in range(local.num_docs)]

    objects = [o for o in gcs.objects(gcs.bucket[len("gs://"):], "parallel-copy/cache/") if "/chunk-" in o]
    chunks = sorted({o.split("/")[3] for o in objects})
    assert len(chunks) == n
    copies = {p.name.rsplit("-", 1)[0]: p for p in (tmp_path / "scratch").iterdir() if p.name.startswith("chunk-")}
    assert sorted(copies) == chunks
    for name in objects:
        chunk, file = name.split("/")[3], name.split("/", 4)[4]
        copied = copies[chunk] / file
        assert copied.read_bytes() == gcs.read(gcs.bucket[len("gs://"):], name), name
    assert sum(len(list(p.iterdir())) for p in copies.values()) == len(objects)

    monkeypatch.setenv("PTM_CACHE_DOWNLOAD_THREADS", "0")
    with pytest.raises(ConfigError, match="PTM_CACHE_DOWNLOAD_THREADS='0'"):
        cache_mod.build_or_load_cache(cfg, tok, root)
