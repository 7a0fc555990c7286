"""Fuzzing every input reader and tokenizer of ptm_jax: each must return normally or raise PtmError.

A target turns one generated input (bytes of a file, a directory layout, a text) into a call of the real
reader. The outcome of one input is

  ok        returned, and the result passed the target's sanity checks (e.g. token ids inside the vocabulary)
  rejected  raised ptm_jax.errors.PtmError (DataError / ConfigError / CheckpointError): the contract
  wrong     returned, but the result failed a sanity check (e.g. a model config with 0 layers accepted)
  crash     raised anything else
  hang      did not finish within the per-input deadline (SIGALRM; a hang inside C code ends when it returns)

Inputs are built by the Hypothesis strategies in ``fuzz_strategies.py``. ``tests/test_fuzz_readers.py`` runs 150 derandomized inputs per target; this script runs many more and
prints a table. Inputs come from Hypothesis strategies (random bytes, NUL bytes, invalid UTF-8, BOMs, CR line
ends, huge lines and fields, wrong JSON types, duplicate ids...). Run from the repository root:

    python benchmarks/fuzz_readers.py --inputs 10000 --seed 0
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("USE_TF", "0")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from ptm_jax.errors import PtmError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_strategies import STRATEGIES  # noqa: E402

SHARED_TEXT = REPO.parent / "shared" / "data" / "corpus" / "tinyshakespeare" / "input.txt"


class Hang(BaseException):
    """Raised by the deadline alarm; a BaseException so a reader's ``except Exception`` cannot swallow it."""


class Violation(Exception):
    """A reader returned, but its result breaks an invariant the target checks."""


@contextlib.contextmanager
def deadline(seconds: float):
    def on_alarm(signum, frame):
        raise Hang(f"no result within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    # re-fires every 0.5 s: an exception raised inside a gc callback or __del__ is swallowed by Python
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    kind: str  # ok | rejected | wrong | crash | hang
    detail: str = ""


def attempt(fn: Callable[[], Any], seconds: float) -> Outcome:
    try:
        with deadline(seconds):
            fn()
    except Hang as e:
        return Outcome("hang", str(e))
    except PtmError as e:
        return Outcome("rejected", f"{type(e).__name__}: {e}")
    except Violation as e:
        return Outcome("wrong", f"{e}\n{traceback.format_exc(limit=12)}")
    except Exception:  # noqa: BLE001 - classifying every other exception is the point
        return Outcome("crash", traceback.format_exc(limit=12))
    return Outcome("ok")


def need(cond: bool, what: str) -> None:
    if not cond:
        raise Violation(what)


# ----------------------------------------------------------------------------------------------------
# Targets: (value, work dir, tools) -> call the reader, check its result


@dataclass
class Tools:
    """Built once: tokenizers to fuzz and a valid token cache to corrupt."""

    wordpiece: Any
    sentencepiece: Any
    cache_dir: Path
    byte_bpe: Any = None


def make_tools(work: Path, text_file: Path = SHARED_TEXT) -> Tools:
    from ptm_jax.data.cache import build_cache
    from ptm_jax.data.tokenizers import train_sentencepiece, train_wordpiece

    lines = [x for x in text_file.read_text(encoding="utf-8").splitlines()[:4000] if x.strip()]
    wp = train_wordpiece(lines, 400, work / "wp")
    sp = train_sentencepiece(lines, 300, work / "sp", "unigram")
    docs = [lines[i:i + 7] for i in range(0, 70, 7)]
    build_cache(docs, wp, work / "cache", fingerprint="fuzz", background=False)
    from ptm_jax.data.byte_bpe import train_byte_bpe

    return Tools(wp, sp, work / "cache", train_byte_bpe(lines, 400, work / "bpe"))


def t_corpus(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.corpus import read_documents

    data, fmt, doc_max_sentences, max_line_bytes = value
    path = work / "corpus.txt"
    path.write_bytes(data)
    for doc in read_documents(path, fmt, doc_max_sentences, max_line_bytes):
        need(isinstance(doc, list) and len(doc) > 0, "a document is a non-empty list")
        need(all(isinstance(s, str) and s.strip() for s in doc), "sentences are non-blank strings")


def t_glue(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.tasks.glue import get_task, read_glue

    task, split, data = value
    spec = get_task(task)
    path = work / "glue" / spec.dirname / spec.splits[split][0]
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    examples, report = read_glue(work / "glue", task, split)
    need(report.examples == len(examples), "report counts the examples")
    for ex in examples:
        need(isinstance(ex.text_a, str) and ex.line >= 1, "text_a is a string with a 1-based line")
        if spec.splits[split][1].label is None:
            need(ex.label is None, "test splits carry no label")
        elif spec.labels is None:
            need(isinstance(ex.label, float), "STS-B scores are floats")
        else:
            need(isinstance(ex.label, int) and 0 <= ex.label < len(spec.labels), "label index in range")


def t_squad(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.tasks.squad import read_squad

    path = work / "dev.json"
    path.write_bytes(value)
    examples, report = read_squad(path)
    need(report.questions == len(examples), "report counts the questions")
    for ex in examples:
        need(len(ex.char_to_word_offset) == len(ex.context_text), "one word offset per context character")
        if ex.trainable and not ex.is_impossible:
            need(0 <= ex.start_position <= ex.end_position < len(ex.doc_tokens), "answer span inside the doc")


def t_conll(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.tasks.conll import read_conll

    data, scheme = value
    path = work / "eng.train"
    path.write_bytes(data)
    sentences, report = read_conll(path, scheme)
    need(report.sentences == len(sentences), "report counts the sentences")
    for s in sentences:
        need(len(s.words) == len(s.tags) > 0, "one tag per word")


def t_vocab(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.tokenizers import WordPieceTokenizer

    data, lower = value
    path = work / "vocab.txt"
    path.write_bytes(data)
    tok = WordPieceTokenizer(path, lower_case=lower)
    ids = tok.encode("Hello, world! [MASK] naïve ##x 東京")
    need(all(0 <= i < tok.vocab_size for i in ids), "ids inside the vocabulary")


def _encode_checks(tok, text: str) -> None:
    ids = tok.encode(text)
    need(all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids), "ids inside the vocabulary")
    need(len(tok.tokenize(text)) == len(ids), "one piece per id")
    need(tok.encode_batch([text, text]) == [ids, ids], "batch encoding equals single encoding")
    flat, lengths = tok.encode_batch_flat([text])
    need(flat.tolist() == ids and lengths.tolist() == [len(ids)], "flat encoding equals single encoding")
    need(isinstance(tok.decode(ids), str), "decode returns text")


def t_wordpiece_encode(value, work: Path, tools: Tools) -> None:
    _encode_checks(tools.wordpiece, value)


def t_sentencepiece_encode(value, work: Path, tools: Tools) -> None:
    _encode_checks(tools.sentencepiece, value)


def t_hf_config(value, work: Path, tools: Tools) -> None:
    from ptm_jax.families.bert.hf import model_config_from_hf

    cfg = model_config_from_hf(value, work / "config.json")
    need(cfg.hidden_size > 0 and cfg.num_heads > 0 and cfg.num_layers > 0, "positive sizes")
    need(cfg.hidden_size % cfg.num_heads == 0 and 0.0 <= cfg.hidden_dropout < 1.0, "usable sizes and rates")


def t_hf_dir(value, work: Path, tools: Tools) -> None:
    from ptm_jax.families.bert.hf import import_hf

    files = value
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    params, cfg, info, _ = import_hf(work)
    need(isinstance(params, dict) and "head" in info, "params and head")


def t_config_toml(value, work: Path, tools: Tools) -> None:
    from ptm_jax.config_loading import load_config

    text, overrides = value
    path = work / "preset.toml"
    path.write_bytes(text)
    load_config(str(path), overrides)


def t_token_cache(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.cache import TokenCache

    target = work / "cache"
    shutil.copytree(tools.cache_dir, target)
    for name, op, arg in value:
        path = target / name
        if op == "delete":
            path.unlink(missing_ok=True)
        elif op == "truncate" and path.exists():
            data = path.read_bytes()
            path.write_bytes(data[: arg % (len(data) + 1)])
        elif op == "append":
            with open(path, "ab") as f:
                f.write(arg)
        elif op == "meta":
            try:
                meta = json.loads(path.read_text())
                meta[arg[0]] = arg[1]
            except (OSError, ValueError, TypeError):  # an earlier edit removed or broke it
                continue
            path.write_text(json.dumps(meta))
        elif op == "replace":
            path.write_bytes(arg)
    cache = TokenCache.open(target)
    for d in range(cache.num_docs):
        lengths = cache.doc_sentence_lengths(d)
        tokens = cache.doc_tokens(d)
        need(int(np.sum(lengths)) == len(tokens), "sentence lengths add up to the document's tokens")


def t_byte_bpe(value, work: Path, tools: Tools) -> None:
    from ptm_jax.data.byte_bpe import ByteBPETokenizer

    vocab, merges = value
    (work / "vocab.json").write_bytes(vocab)
    (work / "merges.txt").write_bytes(merges)
    tok = ByteBPETokenizer(work / "vocab.json", work / "merges.txt")
    _encode_checks(tok, "Hello the world! naïve 東京 <|endoftext|>")


def t_byte_bpe_encode(value, work: Path, tools: Tools) -> None:
    _encode_checks(tools.byte_bpe, value)
    need(tools.byte_bpe.decode(tools.byte_bpe.encode(value)) == value, "byte-level BPE round trip is lossless")


def _check_family_config(cfg) -> None:
    need(cfg.hidden_size > 0 and cfg.num_heads > 0 and cfg.num_layers > 0 and cfg.vocab_size > 0, "positive sizes")
    need(cfg.num_layers <= 1024 and cfg.hidden_size % cfg.num_heads == 0, "usable sizes")


def t_gpt2_config(value, work: Path, tools: Tools) -> None:
    from ptm_jax.families.gpt.hf import model_config_from_hf_gpt2

    _check_family_config(model_config_from_hf_gpt2(value, work / "config.json"))


def t_xlnet_config(value, work: Path, tools: Tools) -> None:
    from ptm_jax.families.xlnet.hf import model_config_from_hf

    _check_family_config(model_config_from_hf(value, work / "config.json"))


TARGETS: dict[str, Callable] = {
    "corpus.read_documents": t_corpus, "glue.read_glue": t_glue, "squad.read_squad": t_squad,
    "conll.read_conll": t_conll, "tokenizers.read_vocab+WordPiece": t_vocab,
    "WordPiece.encode": t_wordpiece_encode, "SentencePiece.encode": t_sentencepiece_encode,
    "hf_bert.model_config_from_hf": t_hf_config, "hf_bert.import_hf(dir)": t_hf_dir,
    "config.load_config(toml)": t_config_toml, "cache.TokenCache.open": t_token_cache,
    "byte_bpe.vocab.json+merges.txt": t_byte_bpe, "ByteBPE.encode": t_byte_bpe_encode,
    "hf_gpt2.model_config_from_hf_gpt2": t_gpt2_config, "hf_xlnet.model_config_from_hf": t_xlnet_config,
}
assert set(TARGETS) == set(STRATEGIES), set(TARGETS) ^ set(STRATEGIES)


def check(name: str, value: Any, tools: Tools, scratch: Path, seconds: float = 10.0) -> Outcome:
    """Runs target ``name`` on ``value`` in a fresh directory under ``scratch``."""
    work = Path(tempfile.mkdtemp(dir=scratch))
    try:
        out = attempt(lambda: TARGETS[name](value, work, tools), seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


# ----------------------------------------------------------------------------------------------------
# Benchmark driver


@dataclass
class Tally:
    inputs: int = 0
    ok: int = 0
    rejected: int = 0
    crashes: list[tuple[str, str]] = field(default_factory=list)
    wrong: list[tuple[str, str]] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    seconds: float = 0.0


def fuzz_target(name: str, n: int, seed: int, tools: Tools, scratch: Path, seconds: float) -> Tally:
    tally = Tally()
    start = time.time()

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate], derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(STRATEGIES[name])
    def body(value):
        out = check(name, value, tools, scratch, seconds)
        tally.inputs += 1
        if out.kind == "ok":
            tally.ok += 1
        elif out.kind == "rejected":
            tally.rejected += 1
        elif out.kind in ("crash", "wrong"):
            (tally.crashes if out.kind == "crash" else tally.wrong).append((repr(value)[:400], out.detail))
        else:
            tally.hangs.append(repr(value)[:400])

    body()
    tally.seconds = time.time() - start
    return tally


def crash_site(tb: str) -> tuple[str, str]:
    """(innermost ptm_jax frame, exception type): one entry per distinct bug."""
    lines = tb.strip().splitlines()
    frames = [x.strip() for x in lines if x.strip().startswith("File ") and "/ptm_jax/" in x]
    return (frames[-1] if frames else "?"), lines[-1].split(":")[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", type=int, default=10_000, help="total inputs, split evenly over the targets")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=10.0, help="seconds per input before it counts as a hang")
    p.add_argument("--targets", default="", help="comma-separated subset of target names")
    p.add_argument("--json", default=None, help="also write the figures (and crash tracebacks) here")
    args = p.parse_args(argv)
    names = [t for t in args.targets.split(",") if t] or list(TARGETS)
    per = -(-args.inputs // len(names))
    with tempfile.TemporaryDirectory(prefix="ptm-fuzz-") as tmp:
        tools = make_tools(Path(tmp) / "tools")
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        results = {name: fuzz_target(name, per, args.seed, tools, scratch, args.deadline) for name in names}
    print(f"\n{'target':34} {'inputs':>7} {'ok':>6} {'rejected':>9} {'wrong':>6} {'crashes':>8} {'hangs':>6} "
          f"{'s':>6}")
    for name, t in results.items():
        print(f"{name:34} {t.inputs:7d} {t.ok:6d} {t.rejected:9d} {len(t.wrong):6d} {len(t.crashes):8d} "
              f"{len(t.hangs):6d} {t.seconds:6.1f}")
    total = sum(t.inputs for t in results.values())
    crashes = sum(len(t.crashes) for t in results.values())
    wrong = sum(len(t.wrong) for t in results.values())
    hangs = sum(len(t.hangs) for t in results.values())
    print(f"{'total':34} {total:7d} {'':6} {'':9} {wrong:6d} {crashes:8d} {hangs:6d}")
    for name, t in results.items():
        seen: set[tuple[str, str]] = set()
        for value, tb in t.crashes + t.wrong:
            key = crash_site(tb)
            if key not in seen:
                seen.add(key)
                count = sum(crash_site(x) == key for _, x in t.crashes + t.wrong)
                print(f"\n--- {name}: {key[1]} at {key[0]} ({count} inputs)\ninput: {value}\n{tb}")
        for value in t.hangs:
            print(f"\n--- {name}: hang\ninput: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps({n: {"inputs": t.inputs, "ok": t.ok, "rejected": t.rejected,
                                                   "crashes": t.crashes, "wrong": t.wrong, "hangs": t.hangs,
                                                   "seconds": round(t.seconds, 1)}
                                               for n, t in results.items()}, indent=1))
    return 1 if crashes or hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
