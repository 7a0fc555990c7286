"""Held-out perplexity (`ptm perplexity`): every token scored exactly once; a uniform model scores the
vocabulary size; the figure equals a direct full-sequence computation."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config_loading import load_config
from ptm_jax.evaluate.perplexity import perplexity, stream_rows
from ptm_jax.families.gpt.model import GPTLMHeadModel


@pytest.mark.parametrize("n,seq_len,stride", [(10, 4, 4), (11, 4, 2), (100, 16, 5), (3, 8, 8), (17, 16, 16)])
def test_stream_rows_score_every_target_exactly_once(n, seq_len, stride):
    ids = np.arange(n, dtype=np.int32) + 100
    x, y, w = stream_rows(ids, seq_len, stride)
    scored = np.sort(y[w > 0])
    np.testing.assert_array_equal(scored, ids[1:])
    # each target's input is the token right before it
    np.testing.assert_array_equal(x[w > 0] + 1, y[w > 0])


class ByteTokenizer:
    """Bytes as ids (a real, trivial tokenizer: no vocabulary file needed)."""

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        return bytes(ids).decode("utf-8")


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config("gpt_tiny", ["model.vocab_size=256"]).model
    params = GPTLMHeadModel(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    return cfg, jax.tree.map(np.asarray, nn.meta.unbox(params))


def test_uniform_model_has_perplexity_equal_to_the_vocabulary_size(tiny, tmp_path):
    cfg, params = tiny
    zeroed = jax.tree.map(lambda x: x, params)
    zeroed["gpt"]["wte"]["embedding"] = np.zeros_like(params["gpt"]["wte"]["embedding"])
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog\n" * 5)
    r = perplexity(zeroed, cfg, ByteTokenizer(), f, seq_len=32, stride=16, batch_size=4)
    assert r["tokens"] == len(f.read_bytes()) - 1
    assert abs(r["token_perplexity"] - 256.0) < 1e-3
    assert r["words"] == 45


def test_perplexity_with_full_context_equals_a_direct_forward_pass(tiny, tmp_path):
    cfg, params = tiny
    text = "a short text that fits in one row."
    f = tmp_path / "t.txt"
    f.write_text(text)
    ids = np.asarray(list(text.encode()), np.int32)
    logits, _ = GPTLMHeadModel(cfg).apply({"params": params}, ids[None, :-1])
    logp = jax.nn.log_softmax(logits[0], -1)
    direct = -float(jnp.mean(logp[jnp.arange(len(ids) - 1), ids[1:]]))
    r = perplexity(params, cfg, ByteTokenizer(), f, seq_len=64, batch_size=2)
    assert abs(r["nll_per_token"] - direct) < 1e-5
