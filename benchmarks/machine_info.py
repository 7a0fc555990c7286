"""The machine a CPU figure was measured on: CPU model, cores, the ISA flags that XLA:CPU and PyTorch dispatch on,
and the library versions. Every peer benchmark prints this beside its figures (CPU ratios
against PyTorch move between machines, so a figure without its machine is not comparable).

What each side dispatches on (checked on jax/jaxlib 0.10.2 and torch 2.13 CPU):

- XLA:CPU compiles elementwise and fused code with LLVM for the host CPU, and sends dots to YNNPACK
  (``__ynn_fusion`` fusions in the optimised HLO, ``XLA_FLAGS=--xla_dump_to=DIR``), which picks its
  microkernels at run time from the CPU's features. ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` (or SSE4_2, AVX,
  AVX512) caps what XLA's code generation may use; ``xla_isa_cap()`` reports it.
- PyTorch's ATen kernels dispatch on ``torch.backends.cpu.get_cpu_capability()`` (capped by
  ``ATEN_CPU_CAPABILITY``); its matmuls go to oneDNN/MKL, which dispatch on their own (``ONEDNN_MAX_CPU_ISA``).

    python benchmarks/machine_info.py          # print it
"""
from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

# CPU flags that decide which vector kernels XLA (LLVM, YNNPACK) and PyTorch (ATen, oneDNN) can use.
ISA_PREFIXES = ("avx", "amx", "fma", "f16c")


def cpu_model() -> tuple[str, list[str]]:
    """``/proc/cpuinfo``'s model name and the flags of ``ISA_PREFIXES`` (Linux; else platform's word)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return platform.processor() or platform.machine(), []
    model, flags = "", []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = [f for f in value.split() if f.startswith(ISA_PREFIXES)]
    return model, flags


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def xla_isa_cap() -> str:
    """``--xla_cpu_max_isa`` from XLA_FLAGS, or 'host' (XLA then uses every feature the CPU reports)."""
    for flag in os.environ.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_cpu_max_isa="):
            return flag.split("=", 1)[1]
    return "host"


def describe(torch_too: bool = True) -> dict[str, Any]:
    """Everything above as one dict (imports jax, and torch when ``torch_too``)."""
    import jax
    import jaxlib

    model, flags = cpu_model()
    info: dict[str, Any] = {
        "cpu_model": model, "cores": usable_cores(), "cpu_count": os.cpu_count(), "isa_flags": flags,
        "python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "jax_device_kind": jax.devices()[0].device_kind, "xla_max_isa": xla_isa_cap(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""), "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if torch_too:
        import torch

        info.update(torch=torch.__version__, torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
                    torch_threads=torch.get_num_threads(),
                    onednn_max_cpu_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", "unset"))
    return info


def one_line(info: dict[str, Any]) -> str:
    parts = [f"CPU {info['cpu_model'] or '?'} ({info['cores']} cores usable of {info['cpu_count']})",
             "flags " + (" ".join(info["isa_flags"]) or "none of avx/amx/fma"),
             f"jax/jaxlib {info['jax']}/{info['jaxlib']} (XLA max ISA: {info['xla_max_isa']})"]
    if "torch" in info:
        parts.append(f"torch {info['torch']} (ATen capability {info['torch_cpu_capability']}, "
                     f"{info['torch_threads']} threads)")
    parts.append(f"load average {' '.join(str(x) for x in info['load_average'])}")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    d = describe()
    print(one_line(d))
    print(json.dumps(d, indent=2))
