"""What a run runs with: the versions of JAX, its accelerator plugin and the libraries that shape a step, and the
ptm_jax commit, logged once at start-up by every process (``ptm run | pretrain | finetune | eval | data |
compile``), so that a log says which software produced it. The versions every machine should have are pinned in
``requirements/*.lock`` (``launch/install_env.sh`` installs them); this line is how a log shows that they did.

The commit comes from git when the checkout has its ``.git``, else from the ``.ptm_commit`` file that
``launch/tpu_pod.sh setup`` writes into the copy it sends to the workers (which has no ``.git``).
"""
from __future__ import annotations

import importlib.metadata
import logging
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent
# distribution names, in the order they are printed; the accelerator plugins only when installed
DISTRIBUTIONS = ("jax", "jaxlib", "libtpu", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
                 "flax", "optax", "orbax-checkpoint", "tensorflow-cpu", "tensorflow", "numpy")
SHOWN_AS = {"tensorflow-cpu": "tf-cpu", "tensorflow": "tf"}  # the start-up log hides lines naming TensorFlow


def commit() -> str | None:
    """The checkout's commit (``git describe --always --dirty``), or the one recorded in ``.ptm_commit``."""
    if (REPO / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
                                 capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    recorded = REPO / ".ptm_commit"
    if recorded.is_file():
        return recorded.read_text(encoding="utf-8").strip() or None
    return None


def versions() -> dict[str, str]:
    """``{name: version}`` of Python, the installed distributions of ``DISTRIBUTIONS`` and ptm_jax."""
    found = {"python": sys.version.split()[0]}
    for name in DISTRIBUTIONS:
        try:
            found[SHOWN_AS.get(name, name)] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        found["ptm_jax"] = importlib.metadata.version("ptm_jax")
    except importlib.metadata.PackageNotFoundError:
        found["ptm_jax"] = "uninstalled"
    found["commit"] = commit() or "unknown"
    return found


def line() -> str:
    return "versions: " + ", ".join(f"{k} {v}" for k, v in versions().items())


def log_versions() -> None:
    log.info(line())
