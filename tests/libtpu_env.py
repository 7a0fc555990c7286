"""Where the TPU compiler (libtpu) is, for the tests that compile for a TPU slice in a process of their own.

libtpu stays out of the test environment (installed beside the CPU tests, JAX would look for TPU chips at every
start): the README's test command puts it in ``.venv/libtpu`` with ``pip install --target``; ``PTM_LIBTPU_DIR``
names another folder. The compile processes get it on PYTHONPATH (``compile_env``)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MISSING = ("libtpu is not installed: `pip install --target .venv/libtpu libtpu==0.0.42.1` (the README's test "
           "command does) or set PTM_LIBTPU_DIR")


def libtpu_dir() -> str | None:
    """The folder to put on PYTHONPATH ('' when libtpu imports here already), or None."""
    explicit = os.environ.get("PTM_LIBTPU_DIR")
    for folder in ([explicit] if explicit else []) + [str(REPO / ".venv" / "libtpu")]:
        if (Path(folder) / "libtpu").is_dir():
            return folder
    return "" if importlib.util.find_spec("libtpu") is not None else None


def compile_env() -> dict[str, str]:
    """The environment of a compile process: libtpu and the repo on PYTHONPATH, JAX on the CPU (no TPU here),
    none of the CPU tests' XLA flags."""
    site = libtpu_dir()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # 8 virtual CPUs and -O1 are the CPU tests'
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(p for p in (site, str(REPO), os.environ.get("PYTHONPATH", "")) if p),
               # no TPU host here: without these libtpu prints that it cannot find the VM's metadata
               TPU_ACCELERATOR_TYPE="v5litepod-4", TPU_WORKER_HOSTNAMES="localhost",
               ALLOW_MULTIPLE_LIBTPU_LOAD="1")  # several compile processes at once (libtpu's lock file is per host)
    return env
