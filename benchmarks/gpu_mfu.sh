#!/usr/bin/env bash
# The GPU targets in one run of about 5 minutes: train-step MFU in bf16 of GPT-2 124M s1024, BERT-base s128 and
# BERT-large s512 (in this order, each with its own time budget, PTM_MFU_TARGET_BUDGET_S, default 90 s), the
# training configuration (dropout on, the attention path it runs) beside the upper bound (no dropout, cuDNN /
# XLA fused attention), one line each (benchmarks/gpu_mfu.py). No TensorFlow
# needed: the batches are made in memory. From the repository root, on an H100 or H200 with jax[cuda]:
#   bash benchmarks/gpu_mfu.sh [OUT_DIR]        # prints the table, writes OUT_DIR/gpu_mfu.json
#   bash benchmarks/gpu_mfu.sh --smoke [OUT_DIR] # tiny models, two steps: checks the script on a CPU
set -euo pipefail
smoke=()
if [[ "${1:-}" == "--smoke" ]]; then
  smoke=(--smoke)
  shift
fi
out="${1:-runs/gpu_mfu}"
mkdir -p "$out"
# the launch scripts' performance flags (XLA's latency-hiding scheduler), unless the caller set XLA_FLAGS
source "$(dirname "${BASH_SOURCE[0]}")/../launch/perf_env.sh"
export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-true}"
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
python "$(dirname "${BASH_SOURCE[0]}")/gpu_mfu.py" "${smoke[@]}" --budget-s "${PTM_MFU_TARGET_BUDGET_S:-90}" \
  --json "$out/gpu_mfu.json"
