"""ERNIE 1.0's Chinese knowledge masking against BERT's character masking, on real Chinese text.

Corpus: the first ``--bytes`` of a Chinese text file in the ``lines`` format (default: zh_shopping.txt of
benchmarks/chinese_text.py, product reviews), tokenized with a WordPiece vocabulary trained on it (every CJK
character its own token, as in BERT's Chinese models; ``--alphabet`` characters kept, the rest [UNK]). Units:
jieba's dictionary segmentation (``data.unit_sources = "jieba"``, families/ernie/chinese_units.py): words of two or more characters, entities where
jieba's dictionary tags a person, place, organisation or other proper noun (nr/ns/nt/nz), phrases otherwise.

The masked examples come from the training stream itself (``families/ernie/data.py``) at the entity level; BERT's
masking is the same stream with every token its own unit (the unit codes zeroed), so both mask the same rows with
the same token budget. For each seed (``data.seed``), over ``--steps`` batches of ``--batch`` rows:

* whole-word share: of the masked tokens, the share that lie in a multi-character word masked whole;
* in-word share: of the masked tokens, the share inside any multi-character word;
* words masked partly: of the multi-character words with a masked token, the share not masked whole;
* masked run length: the mean length of the runs of consecutive masked positions (tokens = characters here);
* ERNIE only: the masked units by kind (basic character, phrase, entity) and their mean length in characters.

    python benchmarks/ernie_chinese_masking.py --corpus data/fetched/zh/zh_shopping.txt --out runs/zh_mask

jieba is imported from ``.venv/jieba`` when it is not installed (the README's test command puts it there).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if (ROOT / ".venv" / "jieba" / "jieba").is_dir():
    sys.path.append(str(ROOT / ".venv" / "jieba"))

from ptm_jax.config import RunConfig, TokenizerConfig, TrainConfig  # noqa: E402
from ptm_jax.families import registry  # noqa: E402
from ptm_jax.families.ernie import units as U  # noqa: E402
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig  # noqa: E402
from ptm_jax.train.stages import prepare_corpus  # noqa: E402


def config(out: Path, corpus: Path, seed: int, batch: int, alphabet: int) -> RunConfig:
    return RunConfig(output_dir=str(out), objective="ernie_mlm",
                     model=ErnieConfig(vocab_size=8000, hidden_size=32, num_layers=1, num_heads=2,
                                       intermediate_size=64, max_position_embeddings=128),
                     tokenizer=TokenizerConfig(kind="wordpiece", vocab_size=8000, limit_alphabet=alphabet),
                     data=ErnieDataConfig(corpus=str(corpus), format="lines", max_seq_length=128,
                                          max_predictions_per_seq=20, eval_documents=2, unit_sources="jieba",
                                          seed=seed),
                     train=TrainConfig(batch_size=batch, steps=1, progress_bar=False))


def runs(mask: np.ndarray) -> list[int]:
    out, n = [], 0
    for m in mask.tolist() + [False]:
        if m:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


def stats(batches, words, special) -> dict:
    masked = whole = in_word = touched = partly = 0
    run_lengths: list[int] = []
    kinds = np.zeros(3)
    unit_lengths: list[int] = []
    for b, w in zip(batches, words):
        for r in range(b["input_ids"].shape[0]):
            pos = b["masked_lm_positions"][r][b["masked_lm_weights"][r] > 0]
            sel = np.zeros(b["input_ids"].shape[1], bool)
            sel[pos] = True
            word_id = np.cumsum(w[r] == 0)
            for u in np.unique(word_id[pos]):
                members = word_id == u
                if members.sum() > 1:
                    touched += 1
                    partly += not sel[members].all()
            for p in pos:
                members = word_id == word_id[p]
                in_word += members.sum() > 1
                whole += members.sum() > 1 and sel[members].all()
            masked += len(pos)
            run_lengths += runs(sel)
            if "unit_continuation" in b:
                unit = np.cumsum(b["unit_continuation"][r] == 0)
                for u in np.unique(unit[pos]):
                    members = np.flatnonzero(unit == u)
                    kinds[int(b["unit_kind"][r][members[0]])] += 1
                    unit_lengths.append(len(members))
    out = {"masked_tokens": masked, "whole_word_share": whole / masked, "in_word_share": in_word / masked,
           "words_masked_partly": partly / max(touched, 1), "mean_masked_run": float(np.mean(run_lengths))}
    if kinds.sum() and kinds[1:].sum():
        out |= {"units_basic": kinds[0] / kinds.sum(), "units_phrase": kinds[1] / kinds.sum(),
                "units_entity": kinds[2] / kinds.sum(), "mean_unit_length": float(np.mean(unit_lengths))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True, help="Chinese text, lines format")
    ap.add_argument("--bytes", type=int, default=2_000_000)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--alphabet", type=int, default=4000, help="tokenizer.limit_alphabet: characters kept")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    text = args.corpus.read_bytes()[: args.bytes]
    text = text[: text.rfind(b"\n\n") + 2]  # whole documents only
    (args.out / "zh.txt").write_bytes(text)
    results = {}
    t0 = time.perf_counter()
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = config(args.out / "run", args.out / "zh.txt", seed, args.batch, args.alphabet)
        corpus = prepare_corpus(cfg)
        units = corpus.artifacts["units"]
        meta = json.loads(next((args.out / "run").rglob("units.json")).read_text())
        cjk = sum(1 for i in range(corpus.tokenizer.vocab_size) if len(corpus.tokenizer.id_to_token(i)) == 1)
        unk = sum(int((np.asarray(units.cache.doc_tokens(d)) == corpus.tokenizer.unk_id).sum())
                  for d in range(units.cache.num_docs)) / max(1, len(units.codes))
        objective = registry.get("ernie").pretraining.objectives[cfg.objective]
        it = objective(cfg, corpus).train_batches(0, args.batch, 0, 1)
        ernie = [next(it) for _ in range(args.steps)]
        words = [e["unit_continuation"] for e in ernie]
        basic = dataclasses.replace(corpus, artifacts={**corpus.artifacts, "units": U.UnitSource(
            np.zeros_like(units.codes), units.offsets, units.cache)})
        it = objective(cfg, basic).train_batches(0, args.batch, 0, 1)
        bert = [next(it) for _ in range(args.steps)]
        bert = [{k: v for k, v in b.items() if k not in ("unit_continuation", "unit_kind")} for b in bert]
        codes = units.codes
        results[seed] = {"ernie": stats(ernie, words, corpus.special), "bert": stats(bert, words, corpus.special),
                         "corpus": {"tokens": int(len(codes)), "jieba_units": meta["units"]["jieba"],
                                    "tokens_in_phrases": float(((codes & 3) == U.PHRASE).mean()),
                                    "tokens_in_entities": float(((codes & 3) == U.ENTITY).mean()),
                                    "single_char_vocab_entries": cjk, "unk_share": unk}}
        print(seed, json.dumps(results[seed]), flush=True)
    keys = ["whole_word_share", "in_word_share", "words_masked_partly", "mean_masked_run"]
    print(f"\n{platform.processor() or platform.machine()}, {time.perf_counter() - t0:.0f} s; "
          f"mean (min-max) over seeds {args.seeds}")
    for name in ("bert", "ernie"):
        cells = []
        for k in keys + ["units_basic", "units_phrase", "units_entity", "mean_unit_length"]:
            vals = [results[s][name][k] for s in results if k in results[s][name]]
            if vals:
                cells.append(f"{k} {np.mean(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})")
        print(f"{name}: " + "; ".join(cells))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
