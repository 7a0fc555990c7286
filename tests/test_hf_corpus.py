"""Hugging Face datasets as pretraining corpora (``data.corpus = hf:NAME[:CONFIG][:SPLIT]``, data/hf_datasets.py) on
local files only: a ``save_to_disk`` folder (Arrow stream files + state.json, as ``datasets`` writes them), a hub-style
folder of Parquet shards per split, and JSON lines; the same rows give the same documents in every format, split
between processes by chunk independently of their number; bad specs name the field, split or config; and a `ptm
pretrain` on one stops and resumes to the parameters of an uninterrupted run, bit for bit."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data import hf_datasets
from ptm_jax.data.chunks import ChunkLayout
from ptm_jax.data.chunks import iter_keyed_documents
from ptm_jax.data.corpus import record_to_document
from ptm_jax.errors import DataError


@pytest.fixture(scope="module")
def rows(shared_data) -> list[str]:
    """300 texts of about ten lines of Shakespeare each (paragraphs kept), one row each."""
    lines = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()[:3000]
    return ["\n".join(lines[i:i + 10]) for i in range(0, 3000, 10)]


def _table(texts: list[str]) -> pa.Table:
    return pa.table({"id": pa.array(range(len(texts)), pa.int64()), "content": pa.array(texts, pa.string())})


@pytest.fixture(scope="module")
def datasets_dir(rows, tmp_path_factory):
    """The same rows as (1) a save_to_disk DatasetDict folder of Arrow stream files, (2) Parquet shards in the hub's
    data/SPLIT-0000i-of-0000n layout, (3) one JSON-lines file; a 'test' split of 20 other rows beside each."""
    root = tmp_path_factory.mktemp("hf_datasets")
    test_rows = [f"Held out row {i}. It is not training text." for i in range(20)]
    arrow = root / "arrow"
    for split, texts in (("train", rows), ("test", test_rows)):
        d = arrow / split
        d.mkdir(parents=True)
        files = []
        for k, part in enumerate((texts[: len(texts) // 2], texts[len(texts) // 2:])):
            name = f"data-{k:05d}-of-00002.arrow"
            table = _table(part)
            with pa.ipc.new_stream(str(d / name), table.schema) as w:
                for batch in table.to_batches(max_chunksize=64):
                    w.write_batch(batch)
            files.append({"filename": name})
        (d / "state.json").write_text(json.dumps({"_data_files": files, "_split": split}))
        (d / "dataset_info.json").write_text(json.dumps({"features": {"id": {"dtype": "int64"},
                                                                      "content": {"dtype": "string"}}}))
    (arrow / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    parquet = root / "parquet" / "data"
    parquet.mkdir(parents=True)
    pq.write_table(_table(rows[:120]), parquet / "train-00000-of-00002.parquet", row_group_size=50)
    pq.write_table(_table(rows[120:]), parquet / "train-00001-of-00002.parquet", row_group_size=50)
    pq.write_table(_table(test_rows), parquet / "test-00000-of-00001.parquet")
    jsonl = root / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "content": t}) + "\n" for i, t in enumerate(rows)))
    return root


def _docs(spec: str, pi: int = 0, pc: int = 1, field: str = "content") -> list:
    return list(iter_keyed_documents(DataConfig(corpus=spec, text_field=field), pi, pc))


def test_every_format_gives_the_rows_as_documents_in_order(datasets_dir, rows):
    want = [record_to_document(t) for t in rows]
    for spec in (f"hf:{datasets_dir / 'arrow'}", f"hf:{datasets_dir / 'arrow'}:train", f"hf:{datasets_dir / 'parquet'}",
                 f"hf:{datasets_dir / 'parquet'}:train", f"hf:{datasets_dir / 'train.jsonl'}"):
        got = _docs(spec)
        assert [d for _, d in got] == want, spec
        keys = [k for k, _ in got]
        assert keys == sorted(keys) and len(set(keys)) == len(rows)
    layout = ChunkLayout(DataConfig(corpus=f"hf:{datasets_dir / 'parquet'}", text_field="content"))
    assert layout.num_chunks == hf_datasets.HF_CHUNKS and layout.hf_starts[-1] == 300
    test = _docs(f"hf:{datasets_dir / 'parquet'}:test")
    assert len(test) == 20 and test[0][1] == ["Held out row 0.", "It is not training text."]


def test_processes_split_the_chunks_and_together_read_the_corpus_once(datasets_dir):
    spec = f"hf:{datasets_dir / 'arrow'}:train"
    whole = _docs(spec)
    parts = [_docs(spec, p, 3) for p in range(3)]
    assert all(parts) and sorted(x for part in parts for x in part) == whole
    assert _docs(spec, 1, 3) == parts[1]  # deterministic


def test_missing_field_split_and_config_are_clear_errors_naming_them(datasets_dir):
    with pytest.raises(DataError, match=r"has no field 'body' \(data.text_field\); its fields: id, content"):
        _docs(f"hf:{datasets_dir / 'parquet'}", field="body")
    with pytest.raises(DataError, match=r"train.jsonl:1: .*no field 'body'"):
        _docs(f"hf:{datasets_dir / 'train.jsonl'}", field="body")
    with pytest.raises(DataError, match=r"no split 'validation' \(splits: train, test\)"):
        _docs(f"hf:{datasets_dir / 'arrow'}:validation")
    with pytest.raises(DataError, match=r"no split 'validation' \(no sub-folder or file name starting with it; "
                       r"found: test, train\)"):
        _docs(f"hf:{datasets_dir / 'parquet'}:validation")
    with pytest.raises(DataError, match=r"no config 'en' \(sub-folders: data\)"):
        _docs(f"hf:{datasets_dir / 'parquet'}:en:train")
    with pytest.raises(DataError, match=r"field 'id' holds int64, not text"):
        _docs(f"hf:{datasets_dir / 'arrow'}", field="id")
    with pytest.raises(DataError, match=r"cannot tell which field holds the text"):
        pq.write_table(pa.table({"a": ["x"], "b": ["y"]}), datasets_dir / "two.parquet")
        _docs(f"hf:{datasets_dir / 'two.parquet'}", field="")
    with pytest.raises(DataError, match=r"not a local path and the hub dataset is not prepared"):
        _docs("hf:no_such_org/no_such_dataset:train")


def test_pretrain_on_a_local_dataset_stops_and_resumes_to_the_uninterrupted_run(datasets_dir, tmp_path):
    import jax

    from ptm_jax.export import params as params_lib
    from test_hf_cli import ptm

    common = ["-c", "gpt_tiny", f"data.corpus='hf:{datasets_dir / 'parquet'}:train'", "data.text_field=content",
              "train.steps=4", "train.checkpoint_every=2", "train.eval_every=0", "train.log_every=1",
              "train.batch_size=8", "data.max_seq_length=32", "tokenizer.vocab_size=400"]
    r = ptm("pretrain", *common, f"output_dir={str(tmp_path / 'whole')!r}")
    assert r.rc == 0 and "pretrain: step 4" in r.out, r.err[-3000:]
    r = ptm("pretrain", *common, f"output_dir={str(tmp_path / 'resumed')!r}", "--stop-after", "2")
    assert r.rc == 0 and "pretrain: step 2" in r.out, r.err[-3000:]
    r = ptm("pretrain", *common, f"output_dir={str(tmp_path / 'resumed')!r}")
    assert r.rc == 0 and "pretrain: step 4" in r.out, r.err[-3000:]
    flat = [{jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(
        params_lib.plain_tree(params_lib.load_params(tmp_path / run)[0]))[0]} for run in ("whole", "resumed")]
    assert sorted(flat[0]) == sorted(flat[1]) and len(flat[0]) > 10
    for k in flat[0]:
        np.testing.assert_array_equal(flat[1][k], flat[0][k], err_msg=k)
    losses = [json.loads(line) for line in (tmp_path / "whole/pretrain/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in losses if m.get("split") == "train"] == [1, 2, 3, 4]
