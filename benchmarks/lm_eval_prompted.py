"""A prompted task scored through EleutherAI's lm-evaluation-harness (``ptm lm-eval``): a GPT pretrained by ptm on
WikiText-2 next to the same network from a random initialisation (chance level), and the harness's scores of the
ptm model class against its own Hugging Face class on the ``ptm export`` of the same model (parity).

Data: ``../shared/data/corpus/wikitext-2-tokenized`` (WikiText-2, Merity et al. 2016, CC BY-SA 3.0; tokenized
form). The model pretrains on ``valid.txt`` only (``gpt_small`` narrowed to 2 layers of 128, byte-level BPE 4,000,
400 steps of 16 x 128 tokens); both tasks are built from
``test.txt``, which neither training nor any setting saw:

* ``wt2_lastword`` (multiple choice, LAMBADA-style, Paperno et al. 2016): a paragraph cut before the last word
  of one of its sentences (at most 60 words of context); the choices are that word and 3 last words of other
  test sentences, drawn with a fixed seed as often as they occur and of the same length within one letter (so
  neither word frequency nor length alone picks the answer); metric acc (chance 0.25) and acc_norm.
* ``wt2_nextword``: the same with any word of a paragraph (3+ letters, 20+ words in) as the answer and any
  such word as distractor: local syntax helps here, the topic of the paragraph more for the last word.
* ``wt2_ppl`` (loglikelihood_rolling): word perplexity of test paragraphs.

    python benchmarks/lm_eval_prompted.py --out data/fetched/lm_eval_bench
    # pretrains into OUT/gpt_wt2 unless it holds a run; --steps, --items, --paragraphs

Needs lm_eval (``pip install --no-deps --target .venv/lm_eval -r requirements/lm_eval.lock``) and, for the parity
half, torch and transformers (the test environment).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WT2 = ROOT.parent / "shared/data/corpus/wikitext-2-tokenized"
TASKS = ["wt2_lastword", "wt2_nextword", "wt2_ppl"]


def paragraphs(path: Path) -> list[str]:
    """The text lines of a WikiText file (headings ``= ... =`` and blank lines left out)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("="):
            out.append(line)
    return out


def cloze_items(paras: list[str], n: int, seed: int, last_word: bool) -> list[dict]:
    """Up to ``n`` cloze items: the context before a word (``last_word``: the last word of a sentence, the word
    before ' .'; else any word), the choices and the index of the right one. Only alphabetic words of 3+ letters,
    at least 20 words of context; distractors are the same kind of word from elsewhere in the file."""
    rng = random.Random(seed)
    candidates = []
    for p in paras:
        words = p.split()
        for i, w in enumerate(words):
            ends = i + 1 < len(words) and words[i + 1] == "."
            if i >= 20 and (ends or not last_word) and re.fullmatch(r"[A-Za-z]{3,}", w):
                candidates.append((" ".join(words[max(0, i - 60):i]), w))
    rng.shuffle(candidates)
    by_length: dict[int, list[str]] = {}
    for _, w in sorted(candidates, key=lambda c: c[1]):  # every occurrence: distractors as frequent as answers
        by_length.setdefault(len(w), []).append(w)
    items = []
    for context, word in candidates:
        pool = [w for k in (len(word) - 1, len(word), len(word) + 1) for w in by_length.get(k, [])
                if w.lower() != word.lower()]
        others: list[str] = []
        if len(set(pool)) < 3:
            continue
        while len(others) < 3:
            pick = rng.choice(pool)
            if pick not in others:
                others.append(pick)
        choices = others + [word]
        rng.shuffle(choices)
        # the harness joins context and choice with its target_delimiter, " "
        items.append({"context": context, "choices": choices, "label": choices.index(word)})
        if len(items) == n:
            break
    return items


def write_tasks(folder: Path, wt2: Path, items: int, n_paragraphs: int, seed: int) -> Path:
    paras = paragraphs(wt2 / "test.txt")
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    head = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {}\ntest_split: test\n"
    for name, last in (("lastword", True), ("nextword", False)):
        cloze = cloze_items(paras, items, seed, last)
        (data / f"{name}.jsonl").write_text("\n".join(json.dumps(x) for x in cloze) + "\n")
        (folder / f"{name}.yaml").write_text(
            f"task: wt2_{name}\n" + head.format(data / f"{name}.jsonl")
            + 'output_type: multiple_choice\ndoc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\n'
            "doc_to_target: label\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    (data / "ppl.jsonl").write_text("\n".join(json.dumps({"text": p}) for p in paras[:n_paragraphs]) + "\n")
    (folder / "ppl.yaml").write_text(
        "task: wt2_ppl\n" + head.format(data / "ppl.jsonl")
        + 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
        "metric_list:\n  - metric: word_perplexity\n")
    return folder


def pretrain(run: Path, wt2: Path, steps: int) -> list[str]:
    cmd = [sys.executable, "-m", "ptm_jax.cli", "pretrain", "-c", "gpt_small", f"data.corpus={wt2 / 'valid.txt'}",
           f"output_dir={run}", f"train.steps={steps}", "train.batch_size=16", "train.warmup_steps=30",
           "train.eval_every=100", "train.checkpoint_every=100", "tokenizer.vocab_size=4000", "model.vocab_size=4000",
           "model.hidden_size=128", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=512"]
    if not (run / "pretrain" / "summary.json").exists():
        subprocess.run(cmd, check=True, cwd=ROOT)
    return cmd


def scratch_copy(run: Path, out: Path, seed: int) -> Path:
    """The pretrained model's network (config, tokenizer) with fresh random weights, as a params directory."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from ptm_jax.export.params import load_params, save_params
    from ptm_jax.families.gpt.model import GPTLMHeadModel

    if out.exists():
        return out
    _, cfg, info, tok_dir = load_params(run)
    init = GPTLMHeadModel(cfg).init(jax.random.PRNGKey(seed), jnp.zeros((1, 8), jnp.int32))
    files = [tok_dir / f for f in info["tokenizer"]["files"]]
    keep = {k: v for k, v in info.items() if k in ("tokenizer", "eos_token_id", "bos_token_id")}
    save_params(out, nn.meta.unbox(init["params"]), cfg, "causal_lm", keep, files)
    return out


def metrics(result: dict) -> dict:
    return {task: {k.split(",")[0]: v for k, v in m.items() if "stderr" not in k and isinstance(v, (int, float))}
            for task, m in result["results"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the run, the tasks and results.json")
    ap.add_argument("--wikitext", default=str(WT2))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--paragraphs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("USE_TF", "0")
    sys.path.insert(0, str(ROOT))
    from machine_info import describe, one_line

    out, wt2 = Path(args.out), Path(args.wikitext)
    run = out / "gpt_wt2"
    command = pretrain(run, wt2, args.steps)
    tasks = write_tasks(out / "tasks", wt2, args.items, args.paragraphs, args.seed)
    from ptm_jax.evaluate.lm_eval_model import run_tasks

    scores, seconds = {}, {}
    for name, model in (("pretrained", run / "pretrain"), ("scratch", scratch_copy(run, out / "scratch", args.seed))):
        t = time.time()
        scores[name] = run_tasks(str(model), TASKS, include_path=str(tasks), builtin_tasks=False,
                                 batch_size=32, log_samples=True)
        seconds[name] = round(time.time() - t, 1)
    # parity: the same model exported to a transformers folder, scored by the harness's own "hf" class
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    from ptm_jax.families.gpt.hf import export_hf

    hf_dir = out / "gpt_wt2_hf"
    if not hf_dir.exists():
        export_hf(run / "pretrain", hf_dir)
    t = time.time()
    ref = evaluator.simple_evaluate(model="hf", model_args={"pretrained": str(hf_dir), "device": "cpu",
                                                             "device_map": "cpu", "dtype": "float32"}, tasks=TASKS,
                                    task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                                    batch_size=32, log_samples=True, bootstrap_iters=0)
    seconds["hf"] = round(time.time() - t, 1)
    ours = [x for t in TASKS[:2] for x in scores["pretrained"]["samples"][t]]
    theirs = [x for t in TASKS[:2] for x in ref["samples"][t]]
    diffs = [abs(a[0][0] - b[0][0]) for x, y in zip(ours, theirs) for a, b in zip(x["resps"], y["resps"])]
    same_pick = sum(x["acc"] == y["acc"] for x, y in zip(ours, theirs))
    report = {
        "pretrain_command": " ".join(command), "tasks": str(tasks), "items": args.items,
        "paragraphs": args.paragraphs, "seed": args.seed,
        "ptm_pretrained": metrics(scores["pretrained"]), "ptm_scratch": metrics(scores["scratch"]),
        "hf_export_pretrained": metrics(ref),
        "parity": {"loglikelihoods": len(diffs), "max_abs_diff": max(diffs),
                   "items_with_same_correctness": f"{same_pick}/{len(ours)}"},
        "seconds": seconds, "machine": one_line(describe()),
    }
    (out / "results.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
