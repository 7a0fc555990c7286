"""ERNIE 1.0 knowledge-masking statistics on real text.

Corpus: a Project Gutenberg book from ../shared/data/corpus/gutenberg (default Pride and Prejudice, 1342-0.txt),
tokenized with a WordPiece vocabulary trained on it. Units:

* entities: a lexicon of every distinct named-entity string of CoNLL-2003 English train
  (../shared/data/conll2003/eng.train, IOB1 PER/ORG/LOC/MISC spans), written as ``entity<TAB>text``; the
  vocabulary is cased, so "US" does not match "us";
* phrases: word2phrase PMI phrases found in the book itself (min_count 5, threshold 100: word2phrase's defaults).

The masked examples are streamed through ``families/ernie/data.py`` (the training stream itself) at each of
the three levels (basic, phrase, entity) until at least ``--tokens`` real tokens were seen, and for each level
the script reports: the token rate (masked / maskable tokens), the unit rate by kind (masked units / units
present), units masked partly (must be 0), and the [MASK] / kept / random split over the masked tokens, all of
them and those inside multi-token units.

    python benchmarks/ernie_masking_stats.py --out /tmp/ernie_stats
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ptm_jax.config import RunConfig, TokenizerConfig, TrainConfig  # noqa: E402
from ptm_jax.families import registry  # noqa: E402
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig  # noqa: E402
from ptm_jax.train.stages import prepare_corpus  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
KIND = {0: "basic", 1: "phrase", 2: "entity"}
NEVER = 10 ** 9


def conll_entities(path: Path) -> dict[str, str]:
    """Distinct entity strings of a CoNLL-2003 IOB1 file -> their type (PER/ORG/LOC/MISC). A one-word entity
    that the file tags O more often than as an entity ("The", "An", "House") is left out."""
    out: dict[str, str] = {}
    as_entity: collections.Counter = collections.Counter()
    as_other: collections.Counter = collections.Counter()
    words: list[str] = []
    typ = None

    def close():
        nonlocal words, typ
        if words:
            out.setdefault(" ".join(words), typ)
            as_entity[" ".join(words)] += 1
        words, typ = [], None

    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] == "-DOCSTART-":
            close()
            continue
        tag = parts[-1]
        if tag == "O":
            close()
            as_other[parts[0]] += 1
            continue
        prefix, t = tag.split("-", 1)
        if prefix == "B" or t != typ:
            close()
        words.append(parts[0])
        typ = t
    close()
    return {e: t for e, t in out.items() if " " in e or as_entity[e] >= as_other[e]}


def level_stats(batches: list[dict], mask_id: int) -> dict:
    seen = {k: 0 for k in KIND.values()}
    masked = {k: 0 for k in KIND.values()}
    partial = multi_masked = tokens = maskable = masked_tokens = 0
    split_all, split_units = np.zeros(3, np.int64), np.zeros(3, np.int64)
    for b in batches:
        for r in range(len(b["input_ids"])):
            n = int(b["input_mask"][r].sum())
            tokens += n
            cand = np.zeros(len(b["input_ids"][r]), bool)
            cand[1:n - 1] = True
            sep = np.flatnonzero(b["segment_ids"][r][:n] == 1)
            first_sep = (sep[0] - 1) if sep.size else n - 1
            cand[first_sep] = False
            maskable += int(cand.sum())
            cont = b["unit_continuation"][r]
            unit = np.cumsum(cont == 0)
            kind = b["unit_kind"][r]
            w = b["masked_lm_weights"][r] > 0
            pos = b["masked_lm_positions"][r][w]
            sel = np.zeros(len(unit), bool)
            sel[pos] = True
            masked_tokens += len(pos)
            starts = np.flatnonzero(cand & (cont == 0))
            for s in starts:
                members = unit == unit[s]
                k = KIND[int(kind[s])]
                seen[k] += 1
                if sel[members].any():
                    masked[k] += 1
                    partial += not sel[members].all()
                    multi_masked += members.sum() > 1
            orig, now = b["masked_lm_ids"][r][w], b["input_ids"][r][pos]
            split = np.array([(now == mask_id).sum(), ((now == orig) & (now != mask_id)).sum(),
                              ((now != orig) & (now != mask_id)).sum()])
            split_all += split
            in_unit = kind[pos] > 0
            split_units += np.array([(now[in_unit] == mask_id).sum(),
                                     ((now == orig) & (now != mask_id))[in_unit].sum(),
                                     ((now != orig) & (now != mask_id))[in_unit].sum()])
    return {"tokens": tokens, "maskable_tokens": maskable, "masked_tokens": masked_tokens,
            "token_rate": masked_tokens / maskable,
            "units_present": seen, "units_masked": masked,
            "unit_rate": {k: (masked[k] / seen[k] if seen[k] else None) for k in seen},
            "unit_rate_all": sum(masked.values()) / sum(seen.values()),
            "units_partly_masked": partial, "multi_token_units_masked": int(multi_masked),
            "split_all": (split_all / split_all.sum()).round(4).tolist(), "split_all_counts": split_all.tolist(),
            "split_in_units": (split_units / max(split_units.sum(), 1)).round(4).tolist(),
            "split_in_units_counts": split_units.tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--book", default=str(DATA / "corpus/gutenberg/1342-0.txt"))
    ap.add_argument("--conll", default=str(DATA / "conll2003/eng.train"))
    ap.add_argument("--out", default="/tmp/ernie_masking_stats")
    ap.add_argument("--tokens", type=int, default=100_000, help="real tokens to stream at each level")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ents = conll_entities(Path(args.conll))
    lexicon = out / "conll2003_entities.tsv"
    lexicon.write_text("".join(f"entity\t{e}\n" for e in sorted(ents)), encoding="utf-8")
    t0 = time.time()

    def config(phrase_from: int, entity_from: int) -> RunConfig:
        return RunConfig(
            output_dir=str(out / "run"), objective="ernie_mlm",
            model=ErnieConfig(vocab_size=args.vocab),
            tokenizer=TokenizerConfig(kind="wordpiece", vocab_size=args.vocab, lower_case=False),
            data=ErnieDataConfig(corpus=args.book, max_seq_length=128, max_predictions_per_seq=20, eval_documents=0,
                                 unit_sources="lexicon,pmi", lexicon_file=str(lexicon), phrase_min_count=5,
                                 phrase_threshold=100.0, phrase_from_step=phrase_from, entity_from_step=entity_from),
            train=TrainConfig(batch_size=args.batch))

    corpus = prepare_corpus(config(0, 0))
    meta = json.loads((out / "run/cache/artifacts/units/units.json").read_text())
    codes = corpus.artifacts["units"].codes
    flat = np.concatenate([corpus.cache.doc_tokens(d) for d in range(corpus.cache.num_docs)])
    top = {}
    for kind, name in ((1, "phrase"), (2, "entity")):
        starts = np.flatnonzero(codes == (kind | 4))
        ends = np.append(starts[1:], len(codes))
        texts = [corpus.tokenizer.decode(flat[s:s + 1 + int(np.argmax(np.append(codes[s + 1:e] != kind, True)))])
                 for s, e in zip(starts, ends)]
        top[name] = collections.Counter(texts).most_common(15)
    report = {"book": args.book, "corpus_tokens": int(corpus.cache.num_tokens), "documents": corpus.cache.num_docs,
              "lexicon_entries": len(ents), "lexicon_types": {t: sum(v == t for v in ents.values())
                                                              for t in sorted(set(ents.values()))},
              "units_in_corpus": meta["units"],
              "corpus_tokens_in_units": {"phrase": int(((codes & 3) == 1).sum()),
                                         "entity": int(((codes & 3) == 2).sum())},
              "most_frequent_units": top, "prepare_s": round(time.time() - t0, 1), "levels": {}}
    for level, (pf, ef) in (("basic", (NEVER, NEVER)), ("phrase", (0, NEVER)), ("entity", (0, 0))):
        cfg = config(pf, ef)
        obj = registry.get("ernie").pretraining.objectives["ernie_mlm"](cfg, corpus)
        it = obj.train_batches(0, args.batch, 0, 1)
        batches, seen = [], 0
        while seen < args.tokens:
            b = next(it)
            batches.append(b)
            seen += int(b["input_mask"].sum())
        report["levels"][level] = level_stats(batches, corpus.special.mask)
    report["total_s"] = round(time.time() - t0, 1)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    print("\n| level | tokens streamed | token rate | unit rate basic / phrase / entity | multi-token units "
          "masked | units masked partly | [MASK] / kept / random (all) | same, inside phrase/entity units |")
    print("|---|---|---|---|---|---|---|---|")
    for level, s in report["levels"].items():
        ur = " / ".join("-" if s["unit_rate"][k] is None else f"{s['unit_rate'][k]:.3f}" for k in KIND.values())
        print(f"| {level} | {s['tokens']:,} | {s['token_rate']:.4f} | {ur} | {s['multi_token_units_masked']:,} | "
              f"{s['units_partly_masked']} | {' / '.join(f'{x:.3f}' for x in s['split_all'])} | "
              f"{' / '.join(f'{x:.3f}' for x in s['split_in_units'])} ({sum(s['split_in_units_counts']):,} tokens) |")


if __name__ == "__main__":
    main()
