"""Generation: greedy parity with transformers, seeded sampling, top-k / top-p filters, `ptm generate`."""
from __future__ import annotations

import argparse

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.errors import ConfigError, DataError  # noqa: E402
from ptm_jax.families.gpt.decode import generate  # noqa: E402
from ptm_jax.families.gpt.hf import import_hf  # noqa: E402
from ptm_jax.generate import top_k_filter, top_p_filter  # noqa: E402
from ptm_jax.commands.generate import register  # noqa: E402

torch.set_num_threads(1)
PROMPTS = [[7], [3, 14, 15, 92, 65], [2, 71, 82, 81, 82, 84, 59, 4, 52, 35, 36], list(range(40, 70))]


def _save_random_gpt2(path, vocab: int) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=vocab, n_positions=64,
                                     initializer_range=0.2, bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen") / "gpt2"
    _save_random_gpt2(d, 100)
    params, cfg, _ = import_hf(d)
    return d, params, cfg


def test_greedy_matches_transformers_generate_for_batched_prompts_of_different_lengths(model):
    d, params, cfg = model
    hf = transformers.GPT2LMHeadModel.from_pretrained(d).eval()
    ours = generate(params, cfg, PROMPTS, 20, greedy=True)
    for prompt, got in zip(PROMPTS, ours):
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=20, pad_token_id=0,
                              eos_token_id=None, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        assert got == ref[0, len(prompt):].tolist()
    assert len({tuple(r) for r in ours}) == len(PROMPTS)  # rows differ: each row used its own prompt


def test_seeded_sampling_is_reproducible_and_seed_dependent(model):
    _, params, cfg = model
    a = generate(params, cfg, PROMPTS, 20, temperature=1.0, seed=1)
    b = generate(params, cfg, PROMPTS, 20, temperature=1.0, seed=1)
    c = generate(params, cfg, PROMPTS, 20, temperature=1.0, seed=2)
    assert a == b
    assert a != c
    assert all(len(r) == 20 for r in a + c)
    same = sum(x == y for ra, rc in zip(a, c) for x, y in zip(ra, rc))
    assert same < 40  # of 80 draws: different seeds give mostly different tokens


def test_top_k_1_equals_greedy_and_eos_stops_a_row(model):
    _, params, cfg = model
    greedy = generate(params, cfg, PROMPTS, 20, greedy=True)
    assert generate(params, cfg, PROMPTS, 20, top_k=1, temperature=0.7, seed=5) == greedy
    eos = greedy[2][4]
    stopped = generate(params, cfg, PROMPTS, 20, greedy=True, eos_id=eos)
    for full, row in zip(greedy, stopped):
        cut = full.index(eos) + 1 if eos in full else len(full)
        assert row == full[:cut]
    assert len(stopped[2]) <= 5 and stopped[2][-1] == eos


def test_top_p_keeps_the_minimal_nucleus_and_top_k_the_k_largest():
    probs = np.array([0.05, 0.5, 0.15, 0.3], np.float32)  # sorted: 0.5, 0.3, 0.15, 0.05
    logits = jnp.log(jnp.asarray(probs))[None]
    kept = lambda out: np.flatnonzero(np.isfinite(np.asarray(out)[0])).tolist()  # noqa: E731
    assert kept(top_p_filter(logits, 0.3)) == [1]
    assert kept(top_p_filter(logits, 0.75)) == [1, 3]
    assert kept(top_p_filter(logits, 0.85)) == [1, 2, 3]
    assert kept(top_p_filter(logits, 0.96)) == [0, 1, 2, 3]
    assert kept(top_p_filter(logits, 1.0)) == [0, 1, 2, 3]
    assert np.array_equal(np.asarray(top_p_filter(logits, 0.75))[0, [1, 3]], np.asarray(logits)[0, [1, 3]])
    assert kept(top_k_filter(logits, 2)) == [1, 3]
    assert kept(top_k_filter(logits, 0)) == [0, 1, 2, 3]


def test_bad_generation_input_raises_clear_errors(model):
    _, params, cfg = model
    with pytest.raises(DataError, match="prompt 2 is empty"):
        generate(params, cfg, [[1], []], 5)
    with pytest.raises(DataError, match=r"prompt 1 has 60 tokens; with max_new_tokens=10 it needs 70 positions but "
                       r"the context is 64"):
        generate(params, cfg, [list(range(60))], 10)
    with pytest.raises(DataError, match=r"token id 100 outside the vocabulary \[0, 100\)"):
        generate(params, cfg, [[1, 100]], 5)
    with pytest.raises(ConfigError, match="top_p=0.0"):
        generate(params, cfg, [[1]], 5, top_p=0.0)


def _cli(argv):
    parser = argparse.ArgumentParser(prog="ptm")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_generate_command_prints_completions_and_rejects_bad_input(tmp_path, capsys, shared_data):
    import json

    from tokenizers import ByteLevelBPETokenizer

    from ptm_jax.data.byte_bpe import ByteBPETokenizer

    d = tmp_path / "gpt2"
    _save_random_gpt2(d, 300)  # eos_token_id 299 in config.json
    text = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8")[:20000]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text.splitlines(), vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(d))
    assert bpe.get_vocab_size() == 300
    assert _cli(["generate", str(d), "--prompt", "the cat", "--prompt", "First Citizen: we are",
                 "--greedy", "--max-new-tokens", "6", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    params, cfg, _ = import_hf(d)
    ids = [bpe.encode(r["prompt"]).ids for r in rows]
    expected = generate(params, cfg, ids, 6, greedy=True, eos_id=299)
    assert [r["tokens"] for r in rows] == expected
    tok = ByteBPETokenizer(d / "vocab.json", d / "merges.txt")
    assert [r["completion"] for r in rows] == [tok.decode([t for t in e if t != 299]) for e in expected]
    f = tmp_path / "prompts.txt"
    f.write_text("the cat\n\nsat\n")
    with pytest.raises(DataError, match=r"prompts\.txt:2: the prompt is empty"):
        _cli(["generate", str(d), "--prompts-file", str(f)])
    with pytest.raises(ConfigError, match="model not found"):
        _cli(["generate", str(tmp_path / "nope"), "--prompt", "x"])
    with pytest.raises(DataError, match=r"--prompt 1: the prompt has \d+ tokens; with --max-new-tokens 60"):
        _cli(["generate", str(d), "--prompt", "the cat sat on the mat " * 3, "--max-new-tokens", "60"])
