"""`ptm compare` and `ptm report`: several objectives side by side, and one HTML page of a run or comparison.

The comparison is ``evaluate/compare.py`` and the page ``evaluate/report.py``; here are the handlers (each returns
an exit code and raises ``PtmError`` subclasses for user errors) and their arguments.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def cmd_compare(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.compare import compare

    compare(args.config, stop_after=args.stop_after, steps_from=args.steps_from, output_dir=args.output_dir)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.report import build_report

    out = Path(args.out or Path(args.directory) / "report.html")
    page = build_report(args.directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} ({len(page.encode()) / 1024:.0f} KiB, self-contained)")
    return 0


def register(subparsers) -> None:
    """Adds ``compare`` and ``report``, each with ``handler=``."""
    p = subparsers.add_parser(
        "compare", help="pretrain several objectives on one corpus and budget, evaluate each, one table",
        description="Pretrains each [[entries]] preset of the compare config on its corpus under the same budget "
        "(budget_s wall seconds of training, or train.steps; the steps reached, wall seconds and FLOPs are "
        "recorded), probes each as a frozen feature extractor on CoNLL-2003 (POS, NER), evaluates it on the "
        "[glue] tasks and [conll] CoNLL-2003 NER on frozen features and, where its family has a classifier or a "
        "tagger, finetuned, and writes OUTPUT_DIR/compare.json, compare.md (the table in the seeds' terms) and "
        "compare.png. Finished stages are skipped and stopped ones resume, so rerunning continues a stopped "
        "comparison.")
    p.add_argument("-c", "--config", required=True, help="compare TOML (path, or a name in configs/compare/)")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop the first unfinished pretraining after N steps (checkpoint saved) and exit")
    p.add_argument("--steps-from", default=None, metavar="COMPARE_JSON",
                   help="train every entry to the steps this earlier compare.json (or its folder) records, in "
                   "place of the wall budget: the comparison reproduced")
    p.add_argument("--output-dir", default=None, help="write here instead of the config's output_dir")
    p.set_defaults(handler=cmd_compare)

    p = subparsers.add_parser(
        "report", help="one self-contained HTML page of a run or a ptm compare folder",
        description="Writes one HTML page (images inlined as data URIs, no network): the config, every training "
        "stage's curves (from metrics.jsonl) and final figures (summary.json), a comparison's table and plot, and "
        "attention pictures found under the folder.")
    p.add_argument("directory", help="a run's output_dir or a ptm compare folder")
    p.add_argument("-o", "--out", default=None, help="output HTML file (default DIRECTORY/report.html)")
    p.set_defaults(handler=cmd_report)
