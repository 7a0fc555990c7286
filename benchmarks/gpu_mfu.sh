#!/usr/bin/env bash
# Issue #8's GPU targets: train-step MFU in bf16 on in-memory batches (no TensorFlow needed; `ptm bench`
# makes the batches on the device). Run on an H100 or H200 from the repository root with jax[cuda] installed:
#   bash benchmarks/gpu_mfu.sh [OUT_DIR]
# Writes one JSON per target and prints ptm bench's table (MFU against the device's dense bf16 peak).
set -euo pipefail
out="${1:-runs/gpu_mfu}"
mkdir -p "$out"
bench() { python -m ptm_jax.cli bench "$@"; }
fast="model.dtype=bfloat16 model.attention_dropout=0.0 model.attention_impl=cudnn"
# BERT-base, seq 128 (goal >= 45%)
bench -c bert_base $fast train.batch_size=256 --mesh 1,1,1 --steps 20 --warmup 3 --json "$out/bert_base_s128.json"
# BERT-large, seq 512 (goal >= 55%)
bench -c bert_large $fast data.max_seq_length=512 data.max_predictions_per_seq=76 train.batch_size=32 \
  --mesh 1,1,1 --steps 20 --warmup 3 --json "$out/bert_large_s512.json"
# GPT-2 124M, seq 1024 (goal >= 45%)
bench -c gpt2_124m $fast train.batch_size=16 --mesh 1,1,1 --steps 20 --warmup 3 --json "$out/gpt2_124m_s1024.json"
