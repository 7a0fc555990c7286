"""Quiet start-up: a default `ptm` run prints only the toolkit's own lines; ``ptm -v`` or ``PTM_VERBOSE=1``
shows the libraries' start-up and INFO logs again.

The noise comes from native code that reads its settings from the environment once, when the library is
first imported, so ``quiet_startup`` must run before TensorFlow or JAX are imported (the first thing
``ptm_jax.cli.main`` does). Each variable is only set when the user has not set it:

- ``TF_CPP_MIN_LOG_LEVEL=2``: TensorFlow's C++ INFO and WARNING lines (tf.data, the CPU feature notice).
- ``TF_ENABLE_ONEDNN_OPTS=0``: TensorFlow 2.21 prints "oneDNN custom operations are on ..." through absl
  logging whatever ``TF_CPP_MIN_LOG_LEVEL`` says, preceded by absl's "WARNING: All log messages before
  absl::InitializeLog() is called are written to STDERR" (once per TF shared library). Only switching the
  oneDNN custom ops off silences both. The toolkit runs no TensorFlow math (TF serves only the tf.data
  input pipelines; the models are JAX), so nothing it computes changes.
- ``GRPC_VERBOSITY=ERROR`` and ``GLOG_minloglevel=2``: gRPC (multi-host coordination) and glog-based
  native libraries.

Left over: multi-process runs on CPU (JAX's Gloo collectives) print "[Gloo] Rank r is connected to n peer
ranks ..." from native code straight to stdout, with no switch to turn it off; GPU and TPU runs do not use Gloo.

Python-side loggers (absl, orbax, jax) are set to WARNING by the CLI; ``verbose_libraries`` sets them to INFO.
References: TensorFlow's ``tensorflow/core/util/port.cc`` (the oneDNN notice), abseil's log initialisation
notice (``absl/log/internal/globals.cc``), gRPC's environment variables (doc/environment_variables.md).
"""
from __future__ import annotations

import logging
import os
from typing import Sequence

VERBOSE_FLAGS = ("-v", "--verbose")
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "GRPC_VERBOSITY": "ERROR",
             "GLOG_minloglevel": "2"}
LIBRARY_LOGGERS = ("absl", "jax._src", "orbax", "tensorflow")


def wants_verbose(argv: Sequence[str]) -> bool:
    """``PTM_VERBOSE`` set to 1/true/yes, or ``-v`` / ``--verbose`` before the subcommand."""
    if os.environ.get("PTM_VERBOSE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    for arg in argv:
        if arg in VERBOSE_FLAGS:
            return True
        if not arg.startswith("-"):
            return False  # the subcommand: what follows belongs to it
    return False


def quiet_startup(verbose: bool = False) -> None:
    """Set the environment that keeps native libraries quiet (before TensorFlow/JAX are imported)."""
    os.environ.setdefault("USE_TF", "0")  # transformers (HF import/export) must not pull TensorFlow in
    if verbose:
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def verbose_libraries() -> None:
    """``ptm -v``: the libraries' Python INFO logs too."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
