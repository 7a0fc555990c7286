"""The lm-evaluation-harness model class "ptm" (ptm_jax/evaluate/lm_eval_model.py) and `ptm lm-eval`: on local task
files (JSON-lines data, no hub download) a random ptm GPT gets the same scores as its `ptm export` folder run
through the harness's own Hugging Face class ("hf", torch on CPU): multiple-choice accuracy (loglikelihood), word
and byte perplexity of documents longer than the context (loglikelihood_rolling), and greedy generate_until
strings. lm_eval is installed beside the test environment (tests/reference_libs.py)."""
from __future__ import annotations

import json
import math

import pytest

import reference_libs

TEXT = ["The cat sat on the mat. The dog sat on the log.", "Paris is the capital of France. Rome is the capital of "
        "Italy.", "One two three four five six seven eight nine ten."] * 20
TASKS = ["tiny_mc", "tiny_lm", "tiny_gen"]


def _task(name: str, data, body: str) -> str:
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
            f"test_split: test\n{body}")


def _write_tasks(root):
    data, tasks = root / "data", root / "tasks"
    data.mkdir()
    tasks.mkdir()
    mc = [{"q": f"Question {i}: what is {w}?", "choices": ["a cat", "a dog", "the capital", "seven"],
           "label": i % 4} for i, w in enumerate(["this", "that", "it", "the mat", "Paris", "Rome", "one", "ten"])]
    docs = [{"text": " ".join(TEXT[i:i + 3]) * (1 + i % 3)} for i in range(4)]  # up to 3 windows of 64 tokens
    gen = [{"prompt": f"Q: {w} is the capital of\nA:", "answer": " France"} for w in ["Paris", "Rome", "Madrid"]]
    for name, rows in (("mc", mc), ("lm", docs), ("gen", gen)):
        (data / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tasks / "mc.yaml").write_text(_task("tiny_mc", data / "mc.jsonl", (
        'output_type: multiple_choice\ndoc_to_text: "{{q}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")))
    (tasks / "lm.yaml").write_text(_task("tiny_lm", data / "lm.jsonl", (
        'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
        "  - metric: word_perplexity\n  - metric: byte_perplexity\n  - metric: bits_per_byte\n")))
    (tasks / "gen.yaml").write_text(_task("tiny_gen", data / "gen.jsonl", (
        'output_type: generate_until\ndoc_to_text: "{{prompt}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n", "."]\n  do_sample: false\n  max_gen_toks: 12\n'
        "metric_list:\n  - metric: exact_match\n")))
    return tasks


def _metrics(result, task):
    return {k.split(",")[0]: v for k, v in result["results"][task].items()
            if "stderr" not in k and isinstance(v, (int, float))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A random ptm GPT (initializer_range 0.2: peaked next-token distributions, so choices do not tie) with a
    byte-level BPE trained on TEXT, its params directory and `ptm export` folder, both scored on the three tasks."""
    if not reference_libs.use("lm_eval"):
        pytest.skip(reference_libs.missing("lm_eval"))
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    from ptm_jax.data.byte_bpe import train_byte_bpe
    from ptm_jax.evaluate.lm_eval_model import run_tasks
    from ptm_jax.export.params import save_params
    from ptm_jax.families.gpt.config import GptConfig
    from ptm_jax.families.gpt.hf import export_hf
    from ptm_jax.families.gpt.model import GPTLMHeadModel

    root = tmp_path_factory.mktemp("lm_eval")
    tok = train_byte_bpe(TEXT, 300, root / "tok")
    cfg = GptConfig(family="gpt", vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                    intermediate_size=64, max_position_embeddings=64, hidden_act="gelu_tanh", layer_norm_eps=1e-5,
                    layer_norm_position="pre", hidden_dropout=0.0, attention_dropout=0.0, initializer_range=0.2)
    params = nn.meta.unbox(GPTLMHeadModel(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"])
    save_params(root / "params", params, cfg, "causal_lm", {}, [root / "tok/vocab.json", root / "tok/merges.txt"])
    export_hf(root / "params", root / "hf")
    tasks = _write_tasks(root)
    ours = run_tasks(str(root / "params"), TASKS, include_path=str(tasks), log_samples=True, batch_size=4,
                     builtin_tasks=False)
    # device_map given: the harness moves the model itself (.to(device)); without one it asks transformers for a
    # device map, which needs accelerate to be importable when transformers was first imported in the process
    hf_args = {"pretrained": str(root / "hf"), "device": "cpu", "device_map": "cpu", "dtype": "float32"}
    ref = evaluator.simple_evaluate(
        model="hf", model_args=hf_args, tasks=TASKS,
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False), log_samples=True, batch_size=4,
        bootstrap_iters=0)
    return root, tasks, ours, ref


def test_multiple_choice_loglikelihoods_and_accuracy_equal_the_harness_on_the_exported_model(runs):
    root, _, ours, ref = runs
    hf_config = json.loads((root / "hf/config.json").read_text())
    vocab = json.loads((root / "hf/vocab.json").read_text())
    # the export names the tokenizer's <|endoftext|> as eos/bos (the harness's empty context and stop token)
    assert hf_config["eos_token_id"] == hf_config["bos_token_id"] == vocab["<|endoftext|>"] == 0
    assert _metrics(ours, "tiny_mc") == _metrics(ref, "tiny_mc")
    assert _metrics(ours, "tiny_mc")["acc"] in {k / 8 for k in range(9)}
    pairs = [(a["resps"], b["resps"]) for a, b in zip(ours["samples"]["tiny_mc"], ref["samples"]["tiny_mc"])]
    assert len(pairs) == 8
    for mine, theirs in pairs:  # 4 choices, each [(summed log-probability, is_greedy)]
        assert len(mine) == len(theirs) == 4
        for (lp, greedy), (ref_lp, ref_greedy) in ((m[0], t[0]) for m, t in zip(mine, theirs)):
            assert lp == pytest.approx(ref_lp, abs=2e-4) and lp < -1.0
            assert greedy == ref_greedy
        gaps = sorted(m[0][0] for m in mine)
        assert min(b - a for a, b in zip(gaps, gaps[1:])) > 1e-3  # no near-ties that float noise could flip


def test_rolling_word_and_byte_perplexity_equal_the_harness_over_several_windows(runs):
    _, _, ours, ref = runs
    mine, theirs = _metrics(ours, "tiny_lm"), _metrics(ref, "tiny_lm")
    for key in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert mine[key] == pytest.approx(theirs[key], rel=1e-5), key
    assert mine["bits_per_byte"] == pytest.approx(math.log2(mine["byte_perplexity"]), rel=1e-9)
    assert 2.0 < mine["byte_perplexity"] < 300  # a random 300-token model: far from a trained one, below uniform


def test_greedy_generate_until_strings_equal_the_harness_on_the_exported_model(runs):
    _, _, ours, ref = runs
    mine = [s["filtered_resps"][0] for s in ours["samples"]["tiny_gen"]]
    theirs = [s["filtered_resps"][0] for s in ref["samples"]["tiny_gen"]]
    assert mine == theirs
    assert len(mine) == 3 and all("\n" not in s and "." not in s for s in mine)
    assert _metrics(ours, "tiny_gen") == _metrics(ref, "tiny_gen")


def test_ptm_lm_eval_command_prints_the_scores_and_writes_them_with_limit(runs, tmp_path, capsys):
    from ptm_jax.cli import main

    root, tasks, ours, _ = runs
    out = tmp_path / "scores.json"
    assert main(["lm-eval", str(root / "params"), "--tasks", "tiny_mc", "--include-path", str(tasks),
                 "--only-include-path", "--limit", "4", "--batch-size", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["n-samples"]["tiny_mc"] == {"original": 8, "effective": 4}
    first4 = [s["acc"] for s in ours["samples"]["tiny_mc"][:4]]
    assert saved["results"]["tiny_mc"]["acc,none"] == pytest.approx(sum(first4) / 4)
    assert f"tiny_mc\tacc\t{saved['results']['tiny_mc']['acc,none']:.6g}" in printed


def test_the_harness_finds_the_ptm_class_by_name_once_its_module_is_imported(runs):
    """``simple_evaluate(model="ptm", model_args=...)``, as a Python user of the harness writes it (docs/usage.md):
    the registered name builds the class from ``pretrained`` and scores as ``run_tasks`` does."""
    from lm_eval import evaluator
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    from ptm_jax.evaluate.lm_eval_model import PtmLM

    root, tasks, ours, _ = runs
    assert get_model("ptm") is PtmLM
    got = evaluator.simple_evaluate(model="ptm", model_args={"pretrained": str(root / "params")},
                                    tasks=["tiny_mc"], batch_size=4, bootstrap_iters=0,
                                    task_manager=TaskManager(include_path=str(tasks), include_defaults=False))
    assert _metrics(got, "tiny_mc") == _metrics(ours, "tiny_mc")


def test_unknown_task_missing_include_path_and_missing_model_are_one_line_errors(runs, tmp_path):
    from ptm_jax.errors import ConfigError
    from ptm_jax.evaluate.lm_eval_model import PtmLM, run_tasks

    root, tasks, _, _ = runs
    with pytest.raises(ConfigError, match=r"unknown task\(s\) tiny_nope: .* nor under"):
        run_tasks(str(root / "params"), ["tiny_nope"], include_path=str(tasks), builtin_tasks=False)
    with pytest.raises(ConfigError, match="no_such_dir: --include-path not found"):
        run_tasks(str(root / "params"), ["tiny_mc"], include_path=str(tmp_path / "no_such_dir"))
    with pytest.raises(ConfigError, match="nowhere: model not found"):
        PtmLM(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="max_length=65 exceeds the model's context"):
        PtmLM(str(root / "params"), max_length=65)
    from ptm_jax.export.params import load_params
    from ptm_jax.families.gpt.decode import generate

    params, cfg, _, _ = load_params(root / "params")
    with pytest.raises(ConfigError, match=r"prompt_width=2 must hold the longest prompt \(3 tokens\)"):
        generate(params, cfg, [[5, 6, 7]], 4, greedy=True, prompt_width=2)
    with pytest.raises(ConfigError, match=r"prompt_width=62 must hold .* leave max_new_tokens=4 of the 64"):
        generate(params, cfg, [[5, 6, 7]], 4, greedy=True, prompt_width=62)
