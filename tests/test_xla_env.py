"""tests/xla_env.py: the flags the test processes compile with, and a value a run started with passed on to the
``ptm`` processes its tests start (benchmarks/suite_flags.py relies on it)."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def _flags_in_a_fresh_process(xla_flags: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    out = subprocess.run([sys.executable, "-c", "import xla_env; print(xla_env.xla_flags(4))"], cwd=TESTS, env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


SPLIT_XNN = ("--xla_cpu_parallel_codegen_split_count=1 --xla_cpu_use_xnnpack=false "
             "--xla_cpu_enable_concurrency_optimized_scheduler=false")


def test_without_xla_flags_the_tests_compile_at_llvm_level_0_with_the_elemental_emitter_and_the_other_test_flags():
    assert _flags_in_a_fresh_process(None) == ("--xla_force_host_platform_device_count=4 "
                                               "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                                               + SPLIT_XNN)


def test_a_level_already_in_xla_flags_is_the_one_passed_to_subprocesses():
    flags = _flags_in_a_fresh_process("--xla_dump_to=/nowhere --xla_backend_optimization_level=2")
    assert flags == ("--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=2 "
                     "--xla_cpu_use_fusion_emitters=false " + SPLIT_XNN)


def test_an_emitter_choice_already_in_xla_flags_is_the_one_passed_to_subprocesses():
    flags = _flags_in_a_fresh_process("--xla_cpu_use_fusion_emitters=true")
    assert flags == ("--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
                     "--xla_cpu_use_fusion_emitters=true " + SPLIT_XNN)


def test_a_split_count_or_xnnpack_choice_already_in_xla_flags_is_the_one_passed_to_subprocesses():
    flags = _flags_in_a_fresh_process("--xla_cpu_use_xnnpack=true --xla_cpu_parallel_codegen_split_count=32")
    assert flags == ("--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
                     "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=32 "
                     "--xla_cpu_use_xnnpack=true --xla_cpu_enable_concurrency_optimized_scheduler=false")


def test_a_process_asked_for_the_default_fusion_emitters_gets_them_and_keeps_the_other_test_flags():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", "import xla_env; print(xla_env.xla_flags(2, fusion_emitters=True))"],
                         cwd=TESTS, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0 "
                                  + SPLIT_XNN + " --xla_cpu_use_fusion_emitters=true")
