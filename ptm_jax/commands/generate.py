"""`ptm generate MODEL --prompt TEXT ...`: text completions from a causal-LM params directory, run or HF folder.

The sampling filters are ``generate/sampling.py`` and the decode loop the family's ``Inspection.generate``; the
parser gets ``handler=``, which returns an exit code and raises ``PtmError`` subclasses for bad input. Prompts
are generated in fixed-size batches (the last one is filled with copies of its first prompt), so a file of
prompts compiles the decode loop once; batch i samples with seed ``seed + i``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ptm_jax.errors import ConfigError, DataError

END_OF_TEXT = "<|endoftext|>"


class _Codec:
    """encode(text) -> ids, decode(ids) -> text and the end-of-text id, from ``params.load_tokenizer`` (GPT-2
    byte-level BPE, WordPiece or SentencePiece); the eos id is the model's (config) else the tokenizer's."""

    def __init__(self, info: dict[str, Any], tok_dir: Path | None) -> None:
        from ptm_jax.export.params import load_tokenizer

        self._tok = load_tokenizer(info, tok_dir)
        eos = info.get("eos_token_id")
        if eos is None:
            eos = getattr(self._tok, "eos_id", None)
        if eos is None:
            eos = self._tok.token_to_id(END_OF_TEXT)
        self.eos_id: int | None = eos if isinstance(eos, int) and eos >= 0 else None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


def _prompts(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(where, text) for each prompt: '--prompt N' or 'FILE:LINE'."""
    out = [(f"--prompt {i + 1}", p) for i, p in enumerate(args.prompt or [])]
    if args.prompts_file:
        from ptm_jax import fs

        f = fs.path(args.prompts_file)
        if not f.is_file():
            raise DataError(f"{f}: prompts file not found; pass a UTF-8 text file with one prompt per line")
        try:
            lines = fs.read_bytes(f).decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise DataError(f"{f}: not UTF-8 ({e.reason} at byte {e.start}); save the prompts as UTF-8") from None
        out += [(f"{f}:{n}", line) for n, line in enumerate(lines, 1)]
    if not out:
        raise ConfigError("no prompt: pass --prompt TEXT (repeatable) or --prompts-file FILE")
    for where, text in out:
        if not text.strip():
            raise DataError(f"{where}: the prompt is empty; give every prompt some text")
    return out


def cmd_generate(args: argparse.Namespace) -> int:
    from ptm_jax import fs
    from ptm_jax.export.params import load_params
    from ptm_jax.families import registry

    if not fs.exists(args.model):
        raise ConfigError(f"{args.model}: model not found; pass a causal-LM params directory, run directory or "
                          "Hugging Face folder")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size={args.batch_size} must be >= 1")
    prompts = _prompts(args)
    params, cfg, info, tok_dir = load_params(args.model)
    fam = registry.get(cfg.family)
    if fam.inspection.generate is None or fam.layout.trunk not in params:
        able = [n for n, f in registry.families().items() if f.inspection.generate is not None]
        raise ConfigError(f"{args.model}: is a {cfg.family!r} model; `ptm generate` needs a causal LM of a family "
                          f"that decodes ({', '.join(able)})")
    generate = fam.inspection.generate
    codec = _Codec(info, tok_dir)
    eos = codec.eos_id if codec.eos_id is not None and 0 <= codec.eos_id < cfg.vocab_size else None
    max_length = args.max_length or cfg.max_position_embeddings
    encoded = []
    for where, text in prompts:
        ids = codec.encode(text)
        if not ids:
            raise DataError(f"{where}: the prompt encodes to no tokens")
        if len(ids) + args.max_new_tokens > max_length:
            raise DataError(f"{where}: the prompt has {len(ids)} tokens; with --max-new-tokens {args.max_new_tokens} "
                            f"it needs {len(ids) + args.max_new_tokens} positions but the context is {max_length}; "
                            "shorten the prompt or ask for fewer tokens")
        encoded.append(ids)
    b = min(args.batch_size, len(encoded))
    for i in range(0, len(encoded), b):
        batch = encoded[i:i + b]
        filled = batch + [batch[0]] * (b - len(batch))
        outs = generate(params, cfg, filled, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, greedy=args.greedy, seed=args.seed + i // b, eos_id=eos,
                        max_length=max_length)
        for (where, text), ids in zip(prompts[i:i + b], outs):
            body = [t for t in ids if t != eos]
            completion = codec.decode(body)
            if args.format == "jsonl":
                print(json.dumps({"prompt": text, "completion": completion, "tokens": ids}, ensure_ascii=False))
            else:
                print(f"{text}{completion}\n")
    sys.stdout.flush()
    return 0


def register(subparsers) -> None:
    """Adds `generate` with ``handler=cmd_generate``."""
    text = "complete text prompts with a causal LM (greedy, temperature, top-k, top-p sampling)"
    p = subparsers.add_parser("generate", help=text, description=text)
    p.add_argument("model", help="causal-LM params directory, run directory or Hugging Face folder")
    p.add_argument("--prompt", action="append", default=[], help="prompt text (repeatable)")
    p.add_argument("--prompts-file", default=None, help="UTF-8 file, one prompt per line")
    p.add_argument("--max-new-tokens", type=int, default=50)
    p.add_argument("--greedy", action="store_true", help="argmax decoding (ignores the sampling options)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-length", type=int, default=None, help="KV-cache size (default: the model's context)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--format", choices=("text", "jsonl"), default="text",
                   help="text: prompt + completion, blank line between; jsonl: prompt, completion, token ids")
    p.set_defaults(handler=cmd_generate)
