"""launch/perf_env.sh's flags parse with the pinned compilers: XLA aborts a start on a flag it does not know, so each
LIBTPU_INIT_ARGS flag is given to libtpu 0.0.42.1 (the libtpu jax[tpu]==0.10.2 pins; requirements/tpu.lock), which
compiles a small program for a v5e 2x2 slice with them, and XLA_FLAGS's to jaxlib 0.10.2; a made-up flag is refused
(so the check can fail)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from libtpu_env import MISSING, REPO, compile_env, libtpu_dir

PROGRAM = """
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
dev = topologies.get_topology_desc("v5e:2x2", "tpu").devices[0]
x = jax.ShapeDtypeStruct((128, 128), jnp.float32, sharding=SingleDeviceSharding(dev))
jax.jit(lambda a: a @ a).lower(x).compile()
print("compiled with", len(__import__("os").environ.get("LIBTPU_INIT_ARGS", "").split()), "flags")
"""


def perf_flags() -> dict[str, str]:
    out = subprocess.run(["bash", "-c", f"unset XLA_FLAGS LIBTPU_INIT_ARGS; source {REPO}/launch/perf_env.sh; "
                                        "printf '%s\\n%s\\n' \"$XLA_FLAGS\" \"$LIBTPU_INIT_ARGS\""],
                         capture_output=True, text=True, check=True)
    xla, libtpu = out.stdout.splitlines()
    return {"XLA_FLAGS": xla, "LIBTPU_INIT_ARGS": libtpu}


@pytest.mark.skipif(libtpu_dir() is None, reason=MISSING)
def test_every_libtpu_flag_of_perf_env_parses_with_the_pinned_libtpu_and_a_made_up_one_is_refused():
    flags = perf_flags()["LIBTPU_INIT_ARGS"]
    assert len(flags.split()) == 9 and "--xla_tpu_enable_async_collective_fusion=true" in flags
    ok = subprocess.run([sys.executable, "-c", PROGRAM], env={**compile_env(), "LIBTPU_INIT_ARGS": flags},
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "compiled with 9 flags" in ok.stdout, ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", PROGRAM],
                         env={**compile_env(), "LIBTPU_INIT_ARGS": flags + " --xla_tpu_no_such_flag=true"},
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "Unknown command line flag 'xla_tpu_no_such_flag'" in bad.stderr


def test_the_xla_flag_of_perf_env_parses_with_the_pinned_jaxlib():
    flags = perf_flags()["XLA_FLAGS"]
    assert flags == "--xla_gpu_enable_latency_hiding_scheduler=true"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    ok = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()[0].platform)"],
                        env={**env, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip() == "cpu", ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                         env={**env, "XLA_FLAGS": flags + " --xla_no_such_flag=1", "JAX_PLATFORMS": "cpu"},
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "xla_no_such_flag" in bad.stderr
