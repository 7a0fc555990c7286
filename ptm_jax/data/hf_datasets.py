"""Hugging Face datasets as pretraining corpora: ``data.corpus = "hf:NAME[:CONFIG][:SPLIT]"``.

NAME is a local folder or file, or a dataset on the Hugging Face hub:

* a folder written by ``datasets``' ``save_to_disk``: ``state.json`` lists its Arrow files (a ``DatasetDict``
  folder, ``dataset_dict.json``, has one sub-folder per split);
* a folder of data files as the hub lays them out (Parquet ``*.parquet``, JSON lines ``*.jsonl`` / ``*.json``,
  Arrow ``*.arrow``): CONFIG is a sub-folder, SPLIT the files of the sub-folder SPLIT or whose names start with
  SPLIT followed by ``-``, ``_`` or ``.`` (``train-00000-of-00002.parquet``, ``data/train.jsonl``); with no SPLIT
  named and no ``train`` files, every data file is the corpus;
* one such file;
* anything else is a hub name: process 0 downloads it with the ``datasets`` package (``load_dataset``) and saves it
  with ``save_to_disk`` under ``$HF_DATASETS_CACHE/ptm_jax`` while the other processes wait at a barrier, as for
  TFDS; then every process reads that folder. Reading never downloads.

With two parts, ``hf:NAME:X`` names a config when NAME has a sub-folder X (or NAME is on the hub), else a split;
SPLIT defaults to ``train``. The text is the column ``data.text_field`` (empty: ``text``, or the only string
column); each row's text is one document (paragraphs split at blank lines, then sentences, as TFDS records).

Rows are read straight from the files with pyarrow (memory-mapped Arrow, Parquet row groups, JSON lines one line
at a time), never loaded whole. They are numbered in file order (files sorted by name) and cut into
``HF_CHUNKS`` even row ranges that do not depend on the number of processes (``data/chunks.py``): the token cache
is built and split between hosts per chunk, so a stopped run resumes exactly like one on files or TFDS.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ptm_jax.errors import ConfigError, DataError

PREFIX = "hf:"
HF_CHUNKS = 64
SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".arrow": "arrow"}
BATCH_ROWS = 1024


@dataclasses.dataclass(frozen=True)
class HfSpec:
    name: str
    config: str
    split: str
    split_named: bool

    def __str__(self) -> str:
        return PREFIX + ":".join(x for x in (self.name, self.config, self.split) if x)


def parse_spec(spec: str) -> HfSpec:
    """'hf:NAME[:CONFIG][:SPLIT]' (see the module docstring for two parts)."""
    if not spec.startswith(PREFIX):
        raise ConfigError(f"data.corpus={spec!r} is not of the form hf:NAME[:CONFIG][:SPLIT]")
    parts = [p.strip() for p in spec[len(PREFIX):].split(":")]
    if not parts[0] or len(parts) > 3 or not all(parts):
        raise ConfigError(f"data.corpus={spec!r}: expected hf:NAME, hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT with no "
                          "empty part, e.g. hf:/data/my_corpus:train or hf:wikitext:wikitext-103-raw-v1:train")
    name = parts[0]
    if len(parts) == 3:
        return HfSpec(name, parts[1], parts[2], True)
    if len(parts) == 2:
        local = Path(name).expanduser()
        if local.exists() and (_is_split(local, parts[1]) or not (local / parts[1]).is_dir()):
            return HfSpec(name, "", parts[1], True)
        return HfSpec(name, parts[1], "train", False)
    return HfSpec(name, "", "train", False)


def _is_split(folder: Path, split: str) -> bool:
    if (folder / "dataset_dict.json").is_file():
        return split in (_read_json(folder / "dataset_dict.json").get("splits") or [])
    return folder.is_dir() and any(_split_match(p, folder, split) for p in _data_files(folder))


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _split_match(path: Path, folder: Path, split: str) -> bool:
    rel = path.relative_to(folder)
    return split in rel.parts[:-1] or re.match(rf"{re.escape(split)}[-_.]", rel.name) is not None


def prepared_dir(spec: HfSpec) -> Path:
    """Where a hub dataset is saved by ``prepare`` (``save_to_disk``)."""
    root = Path(os.environ.get("HF_DATASETS_CACHE") or Path.home() / ".cache" / "huggingface" / "datasets")
    return root / "ptm_jax" / re.sub(r"[^A-Za-z0-9._-]+", "_", f"{spec.name}--{spec.config or 'default'}--{spec.split}")


def _is_local(spec: HfSpec) -> bool:
    return Path(spec.name).expanduser().exists()


def resolve(spec: HfSpec) -> list[Path]:
    """The data files of the corpus, in row order; errors name the missing split or config."""
    where = str(spec)
    if not _is_local(spec):
        folder = prepared_dir(spec)
        if not (folder / "state.json").is_file():
            raise DataError(f"data.corpus={where}: {spec.name!r} is not a local path and the hub dataset is not "
                            f"prepared in {folder}; `ptm data` / `ptm pretrain` prepare it first (with the "
                            "`datasets` package), or save it locally and give its folder")
        return _state_files(folder)
    root = Path(spec.name).expanduser()
    if root.is_file():
        if root.suffix not in SUFFIXES:
            raise DataError(f"{root}: not a dataset file; hf: reads {', '.join(SUFFIXES)} files and dataset folders")
        return [root]
    if spec.config:
        if not (root / spec.config).is_dir():
            configs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
            raise DataError(f"data.corpus={where}: {root} has no config {spec.config!r} (sub-folders: "
                            f"{', '.join(configs) or 'none'})")
        root = root / spec.config
    if (root / "dataset_dict.json").is_file():
        splits = _read_json(root / "dataset_dict.json").get("splits") or []
        if spec.split not in splits:
            raise DataError(f"data.corpus={where}: {root} has no split {spec.split!r} (splits: {', '.join(splits)})")
        return _state_files(root / spec.split)
    if (root / "state.json").is_file():
        if spec.split_named and spec.split != _read_json(root / "state.json").get("_split", spec.split):
            raise DataError(f"data.corpus={where}: {root} holds split {_read_json(root / 'state.json')['_split']!r}, "
                            f"not {spec.split!r}")
        return _state_files(root)
    files = _data_files(root)
    if not files:
        raise DataError(f"data.corpus={where}: {root} holds no dataset files ({', '.join(SUFFIXES)}) and no "
                        "state.json (a save_to_disk folder)")
    chosen = [p for p in files if _split_match(p, root, spec.split)]
    if chosen or spec.split_named:
        if not chosen:
            found = sorted({re.split(r"[-_.]", p.name)[0] for p in files})
            raise DataError(f"data.corpus={where}: {root} has no split {spec.split!r} (no sub-folder or file name "
                            f"starting with it; found: {', '.join(found)})")
        return chosen
    return files


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: not readable JSON ({e}); re-save the dataset") from None
    if not isinstance(value, dict):
        raise DataError(f"{path}: expected a JSON object; re-save the dataset")
    return value


def _state_files(folder: Path) -> list[Path]:
    files = _read_json(folder / "state.json").get("_data_files") or []
    out = [folder / f["filename"] for f in files if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    if not out or len(out) != len(files):
        raise DataError(f"{folder / 'state.json'}: '_data_files' does not list the Arrow files; re-save the dataset")
    for p in out:
        if not p.is_file():
            raise DataError(f"{p}: listed in {folder / 'state.json'} but missing; re-save the dataset")
    return out


# ----------------------------------------------------------------------------------------------------
# Rows


def _arrow_batches(path: Path):
    import pyarrow as pa

    source = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_stream(source)  # what datasets writes
    except pa.ArrowInvalid:
        reader = pa.ipc.open_file(source)
        return (reader.get_batch(i) for i in range(reader.num_record_batches)), reader.schema
    return iter(reader), reader.schema


def _column(path: Path | str, names: list[str], types: dict[str, str], field: str) -> str:
    """The text column: ``field``, else 'text', else the only string column; errors name the file and columns."""
    if field:
        if field not in names:
            raise DataError(f"{path}: has no field {field!r} (data.text_field); its fields: {', '.join(names)}")
        return field
    strings = [n for n in names if types[n] in ("string", "large_string")]
    if "text" in names:
        return "text"
    if len(strings) == 1:
        return strings[0]
    raise DataError(f"{path}: cannot tell which field holds the text (fields: {', '.join(names)}); set "
                    "data.text_field")


def _check_string(path: Path, field: str, kind: str) -> None:
    if kind not in ("string", "large_string", "null"):
        raise DataError(f"{path}: field {field!r} holds {kind}, not text; set data.text_field to a string field")


def count_rows(path: Path) -> int:
    fmt = SUFFIXES[path.suffix]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(str(path)).metadata.num_rows
    if fmt == "arrow":
        batches, _ = _arrow_batches(path)
        return sum(b.num_rows for b in batches)
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def iter_texts(path: Path, field: str, start: int = 0, stop: int | None = None) -> Iterator[str | None]:
    """The text of rows [start, stop) of one file, streamed (None for a null)."""
    fmt = SUFFIXES[path.suffix]
    if fmt == "json":
        with open(path, "rb") as f:
            row = 0
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                if stop is not None and row >= stop:
                    return
                if row >= start:
                    try:
                        rec = json.loads(raw)
                    except ValueError as e:
                        raise DataError(f"{path}:{lineno}: not a JSON object ({e})") from None
                    if not isinstance(rec, dict):
                        raise DataError(f"{path}:{lineno}: a JSON {type(rec).__name__}, expected an object per line")
                    kinds = {k: "string" if isinstance(v, str) else type(v).__name__ for k, v in rec.items()}
                    key = _column(f"{path}:{lineno}", list(rec), kinds, field)
                    value = rec[key]
                    if value is not None and not isinstance(value, str):
                        raise DataError(f"{path}:{lineno}: field {key!r} holds a {type(value).__name__}, not text")
                    yield value
                row += 1
        return
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(str(path))
        schema = pf.schema_arrow
        names = list(schema.names)
        key = _column(path, names, {n: str(schema.field(n).type) for n in names}, field)
        _check_string(path, key, str(schema.field(key).type))
        batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=[key])
    else:
        batches, schema = _arrow_batches(path)
        names = list(schema.names)
        key = _column(path, names, {n: str(schema.field(n).type) for n in names}, field)
        _check_string(path, key, str(schema.field(key).type))
    row = 0
    for batch in batches:
        n = batch.num_rows
        if stop is not None and row >= stop:
            return
        if row + n > start:
            lo, hi = max(start - row, 0), n if stop is None else min(n, stop - row)
            yield from batch.column(batch.schema.get_field_index(key)).slice(lo, hi - lo).to_pylist()
        row += n


# ----------------------------------------------------------------------------------------------------
# Preparing a hub dataset


def prepare(spec_text: str, process_index: int, barrier, timeout_s: float) -> None:
    """A hub dataset: process 0 downloads it (``datasets.load_dataset``) and saves it with ``save_to_disk`` in
    ``prepared_dir`` while the others wait; then each process that does not see that folder (no shared
    filesystem) prepares its own copy. Local folders and files need nothing."""
    spec = parse_spec(spec_text)
    if _is_local(spec):
        return

    def run() -> None:
        out = prepared_dir(spec)
        if (out / "state.json").is_file():
            return
        try:
            import datasets
        except ImportError:
            raise DataError(f"data.corpus={spec}: reading a dataset from the Hugging Face hub needs the `datasets` "
                            "package (pip install datasets); or save it with save_to_disk / to Parquet and give "
                            "the folder") from None
        try:
            ds = datasets.load_dataset(spec.name, spec.config or None, split=spec.split)
        except ValueError as e:  # datasets: unknown split / config
            raise DataError(f"data.corpus={spec}: {str(e).splitlines()[0][:300]}") from None
        ds.save_to_disk(str(out))

    if process_index == 0:
        run()
    barrier("hf_dataset_prepare", timeout_s=timeout_s)
    if process_index != 0:
        run()


def sources(spec_text: str, field: str) -> list[dict]:
    """What the token cache key depends on: the spec, the text field, each file's path, size and mtime."""
    out: list[dict] = [{"hf": spec_text, "text_field": field}]
    for p in resolve(parse_spec(spec_text)):
        st = p.stat()
        out.append({"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out
