"""Where the reference libraries of the recurrent parity tests are: fastai (ULMFiT's AWD-LSTM) and AllenNLP (ELMo's
biLM modules); EleutherAI's lm-evaluation-harness (``lm_eval``, tests/test_lm_eval.py; ``requirements/lm_eval.in``
says which of its dependencies go with it); and jieba, the Chinese word segmenter of ERNIE's Chinese units
(tests/test_ernie_chinese.py; requirements/jieba.in says why), each installed the same way.

Neither goes into the test environment itself: fastai's own requirements (torchvision, spacy) would let pip replace
the pinned torch, and AllenNLP 2.10 pins torch < 1.13. The README's test command installs each from its lock file
(``requirements/fastai.lock``, ``requirements/allennlp.lock``, made by requirements/compile.sh) with ``--no-deps``
into a folder of its own (``.venv/fastai``: fastai and the few pure-Python packages it imports; ``.venv/allennlp``:
AllenNLP alone, whose ELMo modules tests/test_elmo.py imports without the package's framework), and :func:`use`
appends that folder to ``sys.path``: appended, so a package the test environment has always wins over a copy
there. ``PTM_FASTAI_DIR`` / ``PTM_ALLENNLP_DIR`` / ``PTM_JIEBA_DIR`` name other folders."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

INSTALL = {name: f"pip install -q --no-deps --target .venv/{name} -r requirements/{name}.lock"
           for name in ("fastai", "allennlp", "lm_eval", "jieba")}
"""The README test command's install step of each folder (tests/test_readme.py checks that it carries them)."""


def folder(name: str) -> Path:
    explicit = os.environ.get(f"PTM_{name.upper()}_DIR")
    return Path(explicit) if explicit else REPO / ".venv" / name


def missing(name: str) -> str:
    return (f"{name} is not installed: `{INSTALL[name]}` (the README's test command does), or set "
            f"PTM_{name.upper()}_DIR to a folder that holds it")


def use(name: str) -> bool:
    """Makes ``name`` importable from its folder (appended to ``sys.path``); False when it is nowhere."""
    if name in sys.modules:
        return True
    path = folder(name)
    if (path / name).is_dir() and str(path) not in sys.path:
        sys.path.append(str(path))
    return importlib.util.find_spec(name) is not None
