"""Where flairNLP/flair is, for the check of Flair embeddings against flair's own ``FlairEmbeddings``
(tests/flair_check.py). flair imports a dozen packages the project does not need (boto3, gdown, bioc, ...), so it
lives in a folder of its own that only the check process puts first on its path, on the same torch and
transformers, as transformers 5 does (tests/transformers5_env.py). Not installed by the README's test command, so
CI runs the PyTorch re-implementation in tests/test_flair.py instead; to run this check:

    pip install -q --no-deps --target .venv/flair flair==0.15.1 boto3 botocore s3transfer jmespath deprecated \\
        segtok ftfy wcwidth lxml bioc gdown beautifulsoup4 conllu transformer-smaller-training-vocab

(``PTM_FLAIR_PATH`` names another folder holding flair and those packages.)"""
from __future__ import annotations

import os
import sys
from pathlib import Path

FLAIR_DIR = Path(__file__).resolve().parent.parent / ".venv" / "flair"


def flair_python() -> tuple[str, dict[str, str]] | None:
    """(python, environment) of a process that imports flair, or None when it is not installed."""
    where = Path(os.environ.get("PTM_FLAIR_PATH") or FLAIR_DIR)
    if not (where / "flair").is_dir():
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
    return sys.executable, {**env, "PYTHONPATH": str(where)}
