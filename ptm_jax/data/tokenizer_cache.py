"""Trained tokenizers kept per machine, named by the sample and settings they were trained from (docs/usage.md,
"Tokenizers").

Every trainer of ``data/tokenizer_loading.py`` is deterministic: the same sample text and settings give byte-identical
files in any run and process (tests/test_tokenizer_determinism.py). So the files a run trains are also kept in a
folder under ``fs.user_cache_dir("tokenizers")`` (``$PTM_TOKENIZER_CACHE`` to move it, ``off`` to neither read nor
write it), named by a digest of

- the sample's text (every sentence the trainer would read, in order),
- the settings (kind, vocab_size, lower_case, min_count, limit_alphabet, train_sample_bytes),
- the source of the trainer modules and the versions of the ``tokenizers`` and ``sentencepiece`` libraries.

Another run on the same sample (another ``output_dir``, a rerun from scratch, the next stage of a sweep) copies the
files instead of training again, a saving that grows with the sample (100 MB by default). Any change to the corpus
sample, a setting or a trainer makes a new name, so a stale entry is never read; an entry missing a file is not a
hit. Writing is best effort: a read-only or full disk only means the next run trains again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ptm_jax import digest, fs

OFF = "off"
TRAINER_MODULES = ("tokenizers", "wordpiece_training", "byte_bpe", "word_vocab", "char_vocab", "tokenizer_loading",
                   "tokenizer_cache")
"""The modules under ptm_jax/data whose source decides what a trainer writes (and how this cache names it)."""


def root() -> Path | None:
    """The cache folder, or None when ``$PTM_TOKENIZER_CACHE`` is ``off``."""
    where = os.environ.get("PTM_TOKENIZER_CACHE", "")
    if where.strip().lower() == OFF:
        return None
    return Path(where) if where else fs.user_cache_dir("tokenizers")


def _library(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def sample_key(settings: dict, texts: Iterable[str]) -> str:
    """The entry's name: a digest of the sample's sentences (each preceded by its length in bytes, so no way of
    splitting the same characters into sentences gives another sample's digest), the settings and the trainers."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in TRAINER_MODULES:
        h.update((here / f"{name}.py").read_bytes())
    libraries = {name: _library(name) for name in ("tokenizers", "sentencepiece")}
    h.update(json.dumps({"settings": settings, "libraries": libraries}, sort_keys=True).encode())
    digest.update(h, texts)
    return h.hexdigest()[:40]


def lookup(key: str, names: list[str]) -> Path | None:
    """The entry's folder when it holds every one of ``names``, else None."""
    where = root()
    if where is None:
        return None
    entry = where / key
    return entry if all((entry / n).is_file() for n in names) else None


def store(key: str, src: Path, names: list[str]) -> None:
    """Copies ``names`` from ``src`` into the entry (a folder renamed into place, so a reader never sees part of
    one); an OSError (read-only or full disk) is ignored: the run has its tokenizer either way."""
    where = root()
    if where is None or lookup(key, names) is not None:
        return
    tmp = where / f".{key}-tmp-{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for n in names:
            shutil.copyfile(src / n, tmp / n)
        shutil.rmtree(where / key, ignore_errors=True)  # an entry missing a file (cut short, or edited) is replaced
        os.replace(tmp, where / key)
    except OSError:  # includes another process having put the same entry in place first
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
