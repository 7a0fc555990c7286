"""Chinese text for the multilingual and Chinese-ERNIE benchmarks, from SophonPlus/ChineseNlpCorpus (provenance and
licence: docs/usage.md, "Multilingual corpora and Chinese"), fetched into a folder outside the repository.

Writes into ``--out``:

* ``zh_shopping.txt``: unlabelled Chinese pretraining text in the ``lines`` format, from online_shopping_10_cats.csv
  (62,774 product reviews in 10 categories) without its hotel category (酒店), whose reviews overlap the evaluation
  set's domain: each review one document, cut into sentences after 。！？!? and ……; the labels are not used.
* ``chnsenticorp/SST-2/dev.tsv``: ChnSentiCorp_htl_all.csv (7,765 hotel reviews, label 1 positive / 0 negative) in
  GLUE SST-2's layout (header ``sentence<TAB>label``), so ``ptm eval --task sst2 --glue-dir .../chnsenticorp``
  scores a model finetuned on English SST-2 on it. Tabs and line breaks inside a review become spaces.

    python benchmarks/chinese_text.py --source data/fetched/chinese_nlp_corpus --out data/fetched/zh
"""
from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

_SENTENCE_END = re.compile(r"(?<=[。！？!?])(?![。！？!?”’」』）)])|(?<=……)(?![。！？!?”’」』）)])")


def sentences(review: str) -> list[str]:
    text = " ".join(review.replace("\ufeff", "").split())
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, required=True, help="folder with the SophonPlus CSV files")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    docs = skipped = 0
    with open(args.source / "online_shopping_10_cats.csv", encoding="utf-8", newline="") as f, \
            open(args.out / "zh_shopping.txt", "w", encoding="utf-8") as out:
        for row in csv.DictReader(f):
            if row["cat"] == "酒店" or not row["review"].strip():
                skipped += 1
                continue
            out.write("\n".join(sentences(row["review"])) + "\n\n")
            docs += 1
    print(f"zh_shopping.txt: {docs} reviews ({skipped} hotel or empty reviews left out), "
          f"{(args.out / 'zh_shopping.txt').stat().st_size} bytes")
    sst = args.out / "chnsenticorp" / "SST-2"
    sst.mkdir(parents=True, exist_ok=True)
    labels = []
    with open(args.source / "ChnSentiCorp_htl_all.csv", encoding="utf-8", newline="") as f, \
            open(sst / "dev.tsv", "w", encoding="utf-8") as out:
        out.write("sentence\tlabel\n")
        for row in csv.DictReader(f):
            text = " ".join(row["review"].replace("\ufeff", "").split())
            if text:
                out.write(f"{text}\t{int(row['label'])}\n")
                labels.append(int(row["label"]))
    print(f"chnsenticorp/SST-2/dev.tsv: {len(labels)} reviews, {sum(labels)} positive "
          f"(majority baseline {max(sum(labels), len(labels) - sum(labels)) / len(labels):.4f})")


if __name__ == "__main__":
    main()
