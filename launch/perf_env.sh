# Performance defaults of accelerator runs (docs/scaling.md, "Pod performance profile"), sourced before python
# starts: by launch/slurm_gpu.sbatch itself; on a TPU pod give it as PTM_ENV_FILE (or source it from yours).
# A variable the user already set wins; PTM_PERF_FLAGS=0 leaves XLA_FLAGS and LIBTPU_INIT_ARGS untouched.
# XLA aborts at start on a flag it does not know: each one here parses with jaxlib 0.10.2 (XLA_FLAGS) and
# libtpu 0.0.42.1 (LIBTPU_INIT_ARGS), the pair of requirements/tpu.lock (tests/test_perf_env.py).
if [[ "${PTM_PERF_FLAGS:-1}" != 0 ]]; then
  # GPU: XLA's latency-hiding scheduler overlaps the gradient all-reduce / FSDP gathers with compute.
  if [[ " ${XLA_FLAGS:-} " != *xla_gpu_enable_latency_hiding_scheduler* ]]; then
    export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_latency_hiding_scheduler=true"
  fi
  # TPU: collectives fused and run asynchronously beside compute (all-gather, all-reduce), the data-parallel
  # all-reduce optimisation, and RngBitGenerator sharded without gathering (only used by rbg dropout bits).
  export LIBTPU_INIT_ARGS="${LIBTPU_INIT_ARGS:---xla_tpu_enable_async_collective_fusion=true \
--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true \
--xla_tpu_enable_async_collective_fusion_multiple_steps=true --xla_tpu_overlap_compute_collective_tc=true \
--xla_enable_async_all_gather=true --xla_enable_async_all_reduce=true \
--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true \
--xla_tpu_spmd_rng_bit_generator_unsafe=true}"
fi
