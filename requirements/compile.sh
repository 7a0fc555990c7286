#!/usr/bin/env bash
# Regenerates the lock files of exact versions from pyproject.toml and the *.in files here:
#
#   bash requirements/compile.sh             # keeps every pinned version that still fits (uv's preferences)
#   bash requirements/compile.sh --upgrade   # the newest versions that fit
#
#   runtime.lock        ptm_jax's dependencies (CPU)                       pip install -r, then -e . --no-deps
#   test.lock           runtime + the `test` extra, torch's CPU build      the README's test command and CI
#   tpu.lock            runtime + jax[tpu] (jax/jaxlib/libtpu) + py-spy   launch/tpu_pod.sh setup (install_env.sh)
#   cuda.lock           runtime + jax[cuda12] + py-spy                     launch/slurm_gpu.sbatch (PTM_VENV)
#   transformers5.lock  Transformers 5 and its dependencies                pip install --target .venv/transformers5
#   lamb_reference.lock the LAMB the optimizer parity test compares with   pip install --target .venv/lamb_reference
#   fastai.lock         fastai's AWD-LSTM (the ULMFiT parity tests)        pip install --no-deps --target .venv/fastai
#   allennlp.lock       AllenNLP's ELMo modules (the ELMo parity tests)    pip install --no-deps --target .venv/allennlp
#   lm_eval.lock        lm-evaluation-harness (`ptm lm-eval`)              pip install --no-deps --target .venv/lm_eval
#   jieba.lock          jieba, ERNIE's Chinese word segmenter              pip install --no-deps --target .venv/jieba
# All for CPython 3.11 on x86-64 Linux with glibc 2.31 or later (manylinux_2_31, libtpu's floor): the TPU VMs'
# environment (tpu_pod.sh's PYTHON_VERSION) and CI's. torch's CPU build (a +cpu local version) is not on PyPI:
# give the folder or index that serves it as TORCH_CPU_FIND_LINKS (default: pip's own find-links setting). uv
# comes from PATH, else from PyPI into a temporary folder (never into the project's environment).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.8
uv="$(command -v uv || true)"
if [[ -z "$uv" ]]; then
  tool="${TMPDIR:-/tmp}/ptm-uv-$UV_VERSION"
  [[ -x "$tool/bin/uv" ]] || python3 -m pip install -q --target "$tool" "uv==$UV_VERSION"
  uv="$tool/bin/uv"
fi
find_links="${TORCH_CPU_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
common=(pip compile --quiet --python-version 3.11 --python-platform x86_64-manylinux_2_31
        --custom-compile-command "bash requirements/compile.sh" "$@")
lock() {  # lock OUT INPUTS...
  local out="requirements/$1"
  shift
  "$uv" "${common[@]}" "$@" -o "$out"
  echo "$out: $(grep -cE '^[A-Za-z0-9].*==' "$out") packages"
}
lock runtime.lock pyproject.toml requirements/pins.in
# --upgrade-package torch: the lock's own `torch==X` (the label dropped below) would otherwise be kept as a preference
# and resolved on PyPI, whose torch is the CUDA build (with its nvidia-* wheels)
lock test.lock pyproject.toml --extra test requirements/pins.in ${find_links:+--find-links "$find_links"} \
  --upgrade-package torch
# torch==X matches X+cpu, which pip prefers where the machine's index or find-links offer it (CI's does); the
# local label would make the lock uninstallable from PyPI alone
sed -i -E 's/^(torch==[0-9.]+)\+cpu$/\1/' requirements/test.lock
lock tpu.lock pyproject.toml requirements/tpu.in
lock cuda.lock pyproject.toml requirements/cuda.in
lock transformers5.lock requirements/transformers5.in
lock lamb_reference.lock requirements/lamb_reference.in --no-deps  # on the test environment's torch
lock fastai.lock requirements/fastai.in --no-deps  # on the test environment's torch and numpy
lock allennlp.lock requirements/allennlp.in --no-deps
lock lm_eval.lock requirements/lm_eval.in --no-deps  # on the test environment's torch and transformers
lock jieba.lock requirements/jieba.in --no-deps
