"""`ptm perplexity`: held-out perplexity of a causal LM (a family with Inspection.perplexity) on a text file.

The scoring is the family's ``Inspection.perplexity`` (``evaluate/perplexity.py`` for the causal LMs); here are the
handler, its arguments and the printing of the figures.
"""
from __future__ import annotations

import argparse
import json


def cmd_perplexity(args: argparse.Namespace) -> int:
    from ptm_jax.errors import ConfigError
    from ptm_jax.export.params import load_params, load_tokenizer
    from ptm_jax.families import registry

    params, cfg, info, tok_dir = load_params(args.model)
    perplexity = registry.get(cfg.family).inspection.perplexity
    if perplexity is None:
        able = [n for n, f in registry.families().items() if f.inspection.perplexity is not None]
        raise ConfigError(f"{args.model}: model.family={cfg.family!r}; `ptm perplexity` needs a causal LM of a "
                          f"family that scores text ({', '.join(able)})")
    result = perplexity(params, cfg, load_tokenizer(info, tok_dir), args.file, seq_len=args.seq_len,
                        stride=args.stride, batch_size=args.batch_size, max_tokens=args.max_tokens,
                        collapse_whitespace=args.collapse_whitespace)
    result = {"model": str(args.model), "file": str(args.file), **result}
    print(json.dumps(result, indent=2))
    if args.json:
        from ptm_jax import fs

        fs.write_text_atomic(args.json, json.dumps(result, indent=2))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("perplexity", help="held-out perplexity of a causal-LM checkpoint on a text file",
                              description="Tokenizes FILE as one stream, scores every token once (rows of "
                              "--seq-len, each predicting its last --stride tokens) and prints token and word "
                              "perplexity as JSON.")
    p.add_argument("model", help="params directory, run directory or Hugging Face folder of a causal LM")
    p.add_argument("file", help="UTF-8 text file, e.g. ../shared/data/corpus/wikitext-2-tokenized/test.txt")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per row (default: the model's context)")
    p.add_argument("--stride", type=int, default=None, help="new tokens scored per row (default: --seq-len)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=0, help="score only the first N tokens (0 = all)")
    p.add_argument("--collapse-whitespace", action="store_true",
                   help="score ' '.join(text.split()): newlines and runs of spaces become one space")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.set_defaults(handler=cmd_perplexity)
