"""Where the LAMB that the optimizer parity test compares with is: torch-optimizer's ``Lamb`` (jettify/
pytorch-optimizer 0.3.0, after cybertronai/pytorch-lamb: the paper's v3 update, no bias correction), pure PyTorch
on the test environment's torch. It is kept out of the test environment's packages: the README's test command puts
it in ``.venv/lamb_reference`` with ``pip install --target ... --no-deps -r requirements/lamb_reference.lock``;
``PTM_LAMB_REFERENCE_DIR`` names another folder."""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MISSING = ("torch-optimizer is not installed: `pip install --no-deps --target .venv/lamb_reference -r "
           "requirements/lamb_reference.lock` (the README's test command does) or set PTM_LAMB_REFERENCE_DIR")


def reference_dir() -> str | None:
    for folder in [os.environ.get("PTM_LAMB_REFERENCE_DIR", ""), str(REPO / ".venv" / "lamb_reference")]:
        if folder and (Path(folder) / "torch_optimizer").is_dir():
            return folder
    return None


def lamb_class():
    """torch_optimizer.Lamb (its folder appended to sys.path; nothing else there shadows the test environment)."""
    folder = reference_dir()
    if folder is None:
        return None
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module("torch_optimizer").Lamb
