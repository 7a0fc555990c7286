#!/usr/bin/env bash
# The one way a machine gets ptm_jax's environment: a virtualenv holding exactly the versions of a lock file
# (requirements/*.lock, made by requirements/compile.sh), plus this checkout installed without dependencies.
#
#   bash launch/install_env.sh LOCK VENV [PYTHON_VERSION]     # e.g. requirements/tpu.lock ~/ptm-venv 3.11
#
# Used by launch/tpu_worker.sh install (tpu_pod.sh setup: requirements/tpu.lock) and launch/slurm_gpu.sbatch
# (PTM_VENV: requirements/cuda.lock). uv makes the environment (fetching a standalone CPython build when the
# machine has no Python >= 3.11; Cloud TPU images ship 3.10) and `uv pip sync` makes it hold the lock's packages
# and nothing else; run again, it only changes what differs. uv itself comes from PATH, else from PyPI (UV_VERSION)
# through the machine's pip into ~/.local.
set -euo pipefail
UV_VERSION="${UV_VERSION:-0.13.8}"
if [[ $# -lt 2 ]]; then
  sed -n '2,12p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
lock="$1" venv="$2" python_version="${3:-3.11}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ ! -f "$lock" ]]; then
  echo "install_env.sh: $lock: no such lock file (requirements/compile.sh makes them)" >&2
  exit 2
fi
uv="$(command -v uv || true)"
if [[ -z "$uv" ]]; then
  python3 -m pip install -q --user "uv==$UV_VERSION" ||
    { echo "install_env.sh: cannot install uv==$UV_VERSION with python3 -m pip" >&2; exit 2; }
  uv="$HOME/.local/bin/uv"
fi
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  rm -rf "$venv"
  "$uv" venv --seed --python "$python_version" "$venv"
fi
"$uv" pip sync --python "$venv/bin/python" "$lock"
"$uv" pip install --python "$venv/bin/python" --no-deps -e "$repo"
echo "install_env.sh: $venv holds $(grep -c '==' "$lock") pinned packages of $(basename "$lock") and ptm_jax ($repo)"
