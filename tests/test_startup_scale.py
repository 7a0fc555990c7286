"""Start-up at scale with real processes (launch/local_multiprocess.py, jax.distributed on 127.0.0.1):
2 processes build the token cache's chunks between them and 1 process reuses them; a tokenizer trained by
process 0 reaches a process whose output_dir is on another disk through the distributed key-value store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ptm_jax.config import DataConfig
from ptm_jax.data.chunks import ChunkLayout

REPO = Path(__file__).resolve().parent.parent
LAUNCH = [sys.executable, str(REPO / "launch/local_multiprocess.py"), "-n", "2", "--devices-per-process", "1",
          "--timeout", "300", "--"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTM_", "SLURM_"))}
    env.update(PTM_LOCAL_SCRATCH=str(tmp_path / "scratch"), JAX_PLATFORMS="cpu")
    return env


def test_two_processes_build_the_chunks_and_one_process_reuses_them(shared_data, tmp_path):
    corpus = shared_data / "corpus/tinyshakespeare/input.txt"
    args = ["data", "-c", "bert_tiny", f"data.corpus={corpus}", "data.format='lines'",
            "data.cache_chunk_bytes=200000", "tokenizer.vocab_size=1000", "tokenizer.train_sample_bytes=300000",
            f"output_dir={tmp_path / 'run'}"]
    two = subprocess.run([*LAUNCH, "ptm", *args], cwd=REPO, env=_env(tmp_path), capture_output=True, text=True,
                         timeout=600)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    (root,) = (p for p in (tmp_path / "run/cache").iterdir() if p.name != "artifacts")
    chunks = sorted(root.iterdir())
    n = ChunkLayout(DataConfig(corpus=str(corpus), cache_chunk_bytes=200000)).num_chunks
    assert [c.name for c in chunks] == [f"chunk-{c:06d}-of-{n:06d}" for c in range(n)] and n == 6
    built_by = [json.loads((c / "meta.json").read_text())["built_by_process"] for c in chunks]
    assert built_by == [0, 1, 0, 1, 0, 1]
    stamps = {c.name: (c / "tokens.int32.bin").stat().st_mtime_ns for c in chunks}
    # the NSP pairing plan of the training documents, chunks of 1,024 documents split between the two processes
    plan = sorted((tmp_path / "run/cache/artifacts/pairing_plan").glob("*/chunk-*"))
    assert len(plan) >= 7 and all((c / "COMPLETE").is_file() for c in plan)
    stamps |= {str(c): (c / "records.bin").stat().st_mtime_ns for c in plan}
    one = subprocess.run([sys.executable, "-m", "ptm_jax.cli", *args], cwd=REPO, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    figures = json.loads(one.stdout[one.stdout.index("{"):])
    assert figures["documents"] > 7000 and figures["vocab_size"] == 1000
    assert {c.name: (c / "tokens.int32.bin").stat().st_mtime_ns for c in sorted(root.iterdir())} | {
        str(c): (c / "records.bin").stat().st_mtime_ns for c in plan} == stamps
    # the sample: 300 KB of the 1.1 MB file; the tokenizer's settings record it
    settings = json.loads((tmp_path / "run/tokenizer/settings.json").read_text())
    assert settings["train_sample_bytes"] == 300000


_CHILD = """
import json, os, sys
from pathlib import Path
from ptm_jax.config import DataConfig, TokenizerConfig
from ptm_jax.data.chunks import sample_sentences
from ptm_jax.data.tokenizer_loading import load_tokenizer
from ptm_jax.parallel import distributed
distributed.initialize()
import jax
me = jax.process_index()
out = Path(sys.argv[1]) / f"host{me}"   # each process its own disk: nothing shared
data = DataConfig(corpus=sys.argv[2], format="lines")
tok = load_tokenizer(TokenizerConfig(kind="byte_bpe", vocab_size=400, train_sample_bytes=100000),
                     lambda: sample_sentences(data, 100000), out, corpus_key=data.corpus,
                     process_index=me, barrier=distributed.barrier)
print("RESULT", json.dumps({"process": me, "vocab": tok.vocab_size, "ids": tok.encode("To be, or not to be")}))
"""


def test_tokenizer_reaches_a_host_without_a_shared_disk(shared_data, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    corpus = shared_data / "corpus/tinyshakespeare/input.txt"
    done = subprocess.run([*LAUNCH, sys.executable, str(script), str(tmp_path), str(corpus)], cwd=REPO,
                          env={**_env(tmp_path), "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = sorted((json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines()
                      if "RESULT " in line), key=lambda r: r["process"])
    assert [r["process"] for r in results] == [0, 1]
    assert results[0]["vocab"] == results[1]["vocab"] == 400 and results[0]["ids"] == results[1]["ids"]
    for name in ("vocab.json", "merges.txt", "settings.json"):
        host0, host1 = (tmp_path / f"host{i}/tokenizer/{name}" for i in (0, 1))
        assert host1.read_bytes() == host0.read_bytes()


def test_tokenizer_and_cache_on_gs_are_built_once_and_read_through_local_copies(shared_data, tmp_path):
    """output_dir=gs://... on a local GCS emulator: 2 processes train/upload the tokenizer and build/upload
    the chunks (COMPLETE last); a later process on a fresh "host" (empty scratch dir) downloads, builds
    nothing, and sees the same corpus."""
    from tests.gcs_emulator import GcsEmulator

    emu = GcsEmulator(tmp_path / "gcs").start()
    try:
        bucket = emu.create_bucket("ptm-startup")
        args = ["data", "-c", "bert_tiny", f"data.corpus={shared_data / 'corpus/tinyshakespeare/input.txt'}",
                "data.format='lines'", "data.cache_chunk_bytes=300000", "tokenizer.vocab_size=1000",
                f"output_dir={bucket}/run"]
        env = {**_env(tmp_path), **emu.env}
        two = subprocess.run([*LAUNCH, "ptm", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
        objects = emu.objects("ptm-startup", "run/")
        tokens = [o for o in objects if "/cache/" in o and "/cache/artifacts/" not in o]
        chunks = sorted({o.split("/")[3] for o in tokens})
        assert chunks == [f"chunk-{c:06d}-of-000004" for c in range(4)]
        key_dir = next(o.split("/")[2] for o in tokens)
        plan = {o.rsplit("/", 1)[0] for o in objects if "/cache/artifacts/pairing_plan/" in o}
        assert plan and all(f"{p}/COMPLETE" in objects for p in plan)  # the NSP pairing plan, uploaded too
        assert all(f"run/cache/{key_dir}/{c}/COMPLETE" in objects for c in chunks)
        assert {"run/tokenizer/COMPLETE", "run/tokenizer/vocab.txt", "run/tokenizer/settings.json"} <= set(objects)
        fresh = {**env, "PTM_LOCAL_SCRATCH": str(tmp_path / "other-host")}
        one = subprocess.run([sys.executable, "-m", "ptm_jax.cli", *args], cwd=REPO, env=fresh, capture_output=True,
                             text=True, timeout=300)
        assert one.returncode == 0, one.stderr[-3000:]
        assert "token cache: chunk" not in one.stderr  # nothing built again
        assert emu.objects("ptm-startup", "run/") == objects
        figures = json.loads(one.stdout[one.stdout.index("{"):])
        p1 = [line[len("[p1] "):] for line in two.stdout.splitlines() if line.startswith("[p1] ")]
        start = p1.index("{")  # the figures `ptm data` prints, whatever else the process logged
        two_figures = json.loads("\n".join(p1[start: p1.index("}", start) + 1]))
        assert figures == two_figures and figures["documents"] == 7222
        copies = list((tmp_path / "other-host").iterdir())
        # the 4 token-cache chunks, and the pairing plan's chunks beside them
        assert len([c for c in copies if c.name.startswith("chunk-") and "-of-000004" in c.name]) == 4
        assert len([c for c in copies if c.name.startswith("chunk-")]) == 4 + len(plan)
    finally:
        emu.stop()


_TFDS_CHILD = '''
import json, sys
import tensorflow_datasets as tfds
from ptm_jax.config import DataConfig
from ptm_jax.data.byte_bpe import train_byte_bpe
from ptm_jax.data.cache import build_chunks, build_or_load_cache
from ptm_jax.data.chunks import iter_documents, sample_sentences
from ptm_jax.data.corpus import prepare_tfds


class PtmTinyCorpus(tfds.core.GeneratorBasedBuilder):
    """130 records generated in memory: a real TFDS dataset, prepared locally, nothing downloaded."""
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"text": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(130):
            yield i, {"text": f"Record {i} opens here. It says {i * 7} twice.\\n\\nA new paragraph of record {i}."}


cfg = DataConfig(corpus="tfds:ptm_tiny_corpus")
calls = []
prepare_tfds(cfg, 0, lambda *a, **k: calls.append(a[0]))
docs = list(iter_documents(cfg))
tok = train_byte_bpe((s for d in docs for s in d), 300, sys.argv[1] + "/tok")
for p in (0, 1):
    build_chunks(cfg, tok, sys.argv[1] + "/cache", p, 2)
two = build_or_load_cache(cfg, tok, sys.argv[1] + "/cache", 0, 2)
one = build_or_load_cache(cfg, tok, sys.argv[1] + "/cache", 0, 1)
print("RESULT", json.dumps({
    "barriers": calls, "docs": [len(d) for d in docs], "sample": list(sample_sentences(cfg, 200)),
    "chunks": len(two.meta["shards"]), "built_by": sorted({s["built_by_process"] for s in two.meta["shards"]}),
    "two": [tok.decode(two.doc_tokens(d).tolist()) for d in range(two.num_docs)],
    "one": [tok.decode(one.doc_tokens(d).tolist()) for d in range(one.num_docs)]}))
'''


def test_tfds_corpus_prepared_by_process_0_and_cut_into_host_independent_chunks(tmp_path):
    """A local TFDS dataset (generated in memory, no hub): prepare_tfds prepares it on process 0 before the
    barrier; reading never downloads; 64 sub-split chunks give the same documents to 1 and 2 processes."""
    script = tmp_path / "tfds_child.py"
    script.write_text(_TFDS_CHILD)
    env = {**_env(tmp_path), "TFDS_DATA_DIR": str(tmp_path / "tfds"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert r["barriers"] == ["tfds_prepare"] and (tmp_path / "tfds/ptm_tiny_corpus/1.0.0").is_dir()
    assert r["docs"] == [3] * 130 and r["chunks"] == 64 and r["built_by"] == [0, 1]
    assert r["two"] == r["one"] and len(r["two"]) == 130
    assert 200 <= sum(len(s) for s in r["sample"]) < 300  # records in order until the 200-byte budget
