"""Fuzzing every input reader and tokenizer of ptm_jax: each must return normally or raise PtmError.

A target turns one generated input (bytes of a file, a directory layout, a text) into a call of the real
reader. The outcome of one input is

  ok        returned, and the result passed the target's sanity checks (e.g. token ids inside the vocabulary)
  rejected  raised ptm_jax.errors.PtmError (DataError / ConfigError / CheckpointError): the contract
  wrong     returned, but the result failed a sanity check (e.g. a model config with 0 layers accepted)
  crash     raised anything else
  hang      did not finish within the per-input deadline (SIGALRM; a hang inside C code ends when it returns)

``tests/test_fuzz_readers.py`` runs 150 derandomized inputs per target; this script runs many more and
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
from hypothesis import HealthCheck, Phase, given, settings, strategies as st  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from ptm_jax.errors import PtmError  # noqa: E402

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
# Input strategies

BAD = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf", b"\r",
       b"\r\n", b"\t", b"\x1a", b"\x0b", b"\x85", "\u2028".encode()]
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64), st.floats(), st.text(max_size=12))
deep_json = st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n)  # nesting past the parser's recursion limit
json_any = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                        max_leaves=12)


def mutated(base: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """``base`` with up to 3 bad byte sequences inserted at random offsets, or cut short."""
    @st.composite
    def build(draw):
        data = bytearray(draw(base))
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(BAD))
        if draw(st.integers(0, 9)) == 0:
            data = data[: draw(st.integers(0, len(data)))]
        return bytes(data)
    return build()


def lines_to_bytes(lines: st.SearchStrategy[list[str]]) -> st.SearchStrategy[bytes]:
    return st.tuples(lines, st.sampled_from(["\n", "\r\n", "\r"]), st.booleans()).map(
        lambda t: (t[1].join(t[0]) + (t[1] if t[2] else "")).encode("utf-8"))


def maybe(s: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``s``; sometimes any JSON value of the wrong type, as a broken file would have."""
    return st.one_of(s, s, s, json_any)


word = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=10)
prose = st.lists(word, max_size=12).map(" ".join)
corpus_line = st.one_of(prose, prose.map(lambda s: s + "."), st.just(""), st.text(max_size=30),
                        st.just("*** START OF THE PROJECT GUTENBERG EBOOK X ***"),
                        st.just("*** END OF THE PROJECT GUTENBERG EBOOK X ***"),
                        st.integers(1, 3000).map(lambda n: "long " * n))
corpus_bytes = st.one_of(st.binary(max_size=600), mutated(lines_to_bytes(st.lists(corpus_line, max_size=30))),
                         lines_to_bytes(st.lists(corpus_line, max_size=30)))
corpus_case = st.tuples(corpus_bytes, st.sampled_from(["auto", "lines", "paragraphs", "bogus"]),
                        st.integers(1, 300), st.one_of(st.just(1_000_000), st.integers(1, 700)))


def _glue_pairs() -> list[tuple[str, str]]:
    from ptm_jax.data.tasks.glue import GLUE_TASKS

    return [(t, s) for t, spec in GLUE_TASKS.items() for s in spec.splits]


glue_field = st.one_of(prose, st.sampled_from(["0", "1", "entailment", "not_entailment", "neutral",
                                               "contradiction", "3.5", "nan", "-1", "", '"', "'quoted'"]),
                       st.text(max_size=20), st.integers(0, 140_000).map(lambda n: "x" * n))
glue_row = st.lists(glue_field, max_size=12).map("\t".join)
glue_case = st.tuples(st.sampled_from(_glue_pairs()), st.one_of(
    lines_to_bytes(st.lists(glue_row, max_size=12)), mutated(lines_to_bytes(st.lists(glue_row, max_size=12))),
    st.binary(max_size=300))).map(lambda t: (t[0][0], t[0][1], t[1]))


@st.composite
def squad_paragraph(draw):
    context = draw(st.text(max_size=120))
    qas = []
    for q in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(context)))
        j = draw(st.integers(i, len(context)))
        answers = draw(maybe(st.just([{"text": context[i:j], "answer_start": i}]) |
                             st.lists(st.fixed_dictionaries({"text": maybe(st.text(max_size=8)),
                                                             "answer_start": maybe(st.integers(-3, 200))}),
                                      max_size=2)))
        qa = {"id": draw(maybe(st.sampled_from(["a", "b", "c", f"q{q}"]))), "question": draw(maybe(prose)),
              "answers": answers}
        if draw(st.booleans()):
            qa["is_impossible"] = draw(maybe(st.booleans()))
        qas.append(qa)
    return {"context": draw(maybe(st.just(context))), "qas": draw(maybe(st.just(qas)))}


squad_doc = st.fixed_dictionaries({"version": maybe(st.sampled_from(["1.1", "v2.0"])), "data": maybe(st.lists(
    st.fixed_dictionaries({"title": maybe(st.text(max_size=8)), "paragraphs": maybe(st.lists(
        squad_paragraph(), max_size=3))}), max_size=3))})
squad_json = st.one_of(squad_doc, json_any).map(lambda d: json.dumps(d).encode())
squad_case = st.one_of(squad_json, squad_json, mutated(squad_json), st.binary(max_size=200), deep_json)

ner_tag = st.one_of(st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-MISC", "B-ORG", "I-", "B-",
                                     "X", "E-PER", "S-LOC"]), word)
conll_line = st.one_of(st.just(""), st.just("-DOCSTART- -X- -X- O"),
                       st.tuples(st.lists(word, min_size=0, max_size=4), ner_tag).map(
                           lambda t: " ".join([*t[0], t[1]])))
conll_case = st.tuples(st.one_of(lines_to_bytes(st.lists(conll_line, max_size=25)),
                                 mutated(lines_to_bytes(st.lists(conll_line, max_size=25))),
                                 st.binary(max_size=200)),
                       st.sampled_from(["auto", "iob1", "iob2", "bogus"]))

vocab_line = st.one_of(st.sampled_from(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "", " ", "##", "hello"]),
                       word, word.map(lambda w: "##" + w), st.text(max_size=6))
vocab_case = st.tuples(st.one_of(
    st.lists(vocab_line, max_size=40).map(lambda v: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *v]).map(
        lambda v: ("\n".join(v) + "\n").encode()), mutated(lines_to_bytes(st.lists(vocab_line, max_size=40))),
    st.binary(max_size=200)), st.booleans())

any_text = st.one_of(st.text(max_size=300), st.text(st.characters(codec="utf-8"), max_size=300),
                     st.integers(150, 260).map(lambda n: "a" * n), st.lists(word, max_size=60).map(" ".join),
                     st.sampled_from(["", " ", "\x00", "\ufffd", "[MASK]", "##", "\u200b" * 5, "\U0001F600" * 3]))

BERT_KEYS = {"vocab_size": st.integers(-2, 70_000), "hidden_size": st.integers(-1, 96),
             "num_hidden_layers": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15, 2.5e16])),
             "num_attention_heads": st.integers(-1, 8),
             "intermediate_size": st.integers(-1, 128), "max_position_embeddings": st.integers(-1, 600),
             "type_vocab_size": st.integers(-1, 3), "hidden_act": st.sampled_from(["gelu", "relu", "tanh", "x"]),
             "hidden_dropout_prob": st.floats(-1, 2), "attention_probs_dropout_prob": st.floats(),
             "layer_norm_eps": st.floats(), "initializer_range": st.floats(),
             "model_type": st.sampled_from(["bert", "gpt2", ""]),
             "position_embedding_type": st.sampled_from(["absolute", "relative_key"]),
             "is_decoder": st.booleans(), "pad_token_id": st.integers(-1, 5)}
SMALL_BERT = {"vocab_size": 12, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 8, "max_position_embeddings": 8, "type_vocab_size": 2}
hf_config = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in BERT_KEYS.items()})
hf_config_case = st.one_of(hf_config.map(lambda c: {**SMALL_BERT, **c}), hf_config, st.sampled_from(
    sorted(BERT_KEYS)).flatmap(lambda k: BERT_KEYS[k].map(lambda v: {**SMALL_BERT, k: v})),
                           st.dictionaries(st.text(max_size=6), json_any, max_size=5))


# byte-level BPE: a valid tiny vocab.json + merges.txt (the 256 byte symbols, a few merges), then mutated
def _byte_bpe_files() -> tuple[bytes, bytes]:
    from ptm_jax.data.byte_bpe import byte_alphabet

    tokens = ["<|endoftext|>", *byte_alphabet(), "Ġt", "he", "Ġthe"]
    vocab = json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False).encode("utf-8")
    return vocab, "#version: 0.2\nĠ t\nh e\nĠt he\n".encode("utf-8")


merge_line = st.one_of(st.sampled_from(["Ġ t", "h e", "Ġt he", "a", "a b c", "#x", "", "zz zz"]),
                       st.tuples(word, word).map(" ".join))
byte_bpe_case = st.tuples(
    st.one_of(st.just(_byte_bpe_files()[0]), mutated(st.just(_byte_bpe_files()[0])),
              st.dictionaries(st.text(max_size=4), st.integers(-2, 400), max_size=30).map(
                  lambda d: json.dumps(d).encode()), st.binary(max_size=200)),
    st.one_of(st.just(_byte_bpe_files()[1]), mutated(st.just(_byte_bpe_files()[1])),
              lines_to_bytes(st.lists(merge_line, max_size=12)), st.binary(max_size=120)))

GPT2_KEYS = {"vocab_size": st.integers(-2, 70_000), "n_embd": st.integers(-1, 96),
             "n_layer": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15, 2.5e16])),
             "n_head": st.integers(-1, 8), "n_positions": st.integers(-1, 2000), "n_inner": st.one_of(
                 st.none(), st.integers(-1, 128)), "activation_function": st.sampled_from(["gelu_new", "relu", "x"]),
             "layer_norm_epsilon": st.floats(), "initializer_range": st.floats(),
             "resid_pdrop": st.floats(-1, 2), "attn_pdrop": st.floats(), "embd_pdrop": st.floats(),
             "model_type": st.sampled_from(["gpt2", "bert", ""])}
SMALL_GPT2 = {"model_type": "gpt2", "vocab_size": 12, "n_embd": 4, "n_layer": 1, "n_head": 2, "n_positions": 8}
XLNET_KEYS = {"vocab_size": st.integers(-2, 70_000), "d_model": st.integers(-1, 96),
              "n_layer": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15])),
              "n_head": st.integers(-1, 8), "d_head": st.integers(-1, 16), "d_inner": st.integers(-1, 128),
              "ff_activation": st.sampled_from(["relu", "gelu", "x"]), "untie_r": maybe(st.booleans()),
              "attn_type": st.sampled_from(["bi", "uni", "x"]), "mem_len": st.one_of(st.none(), st.integers(-5, 64)),
              "clamp_len": st.integers(-5, 10**12), "layer_norm_eps": st.floats(), "dropout": st.floats(-1, 2),
              "bi_data": maybe(st.booleans()), "same_length": maybe(st.booleans())}
SMALL_XLNET = {"model_type": "xlnet", "vocab_size": 12, "d_model": 8, "n_layer": 1, "n_head": 2, "d_head": 4, "d_inner": 8}


def _family_config(keys: dict, small: dict) -> st.SearchStrategy:
    some = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in keys.items()})
    return st.one_of(some.map(lambda c: {**small, **c}), some, st.sampled_from(sorted(keys)).flatmap(
        lambda k: keys[k].map(lambda v: {**small, k: v})), st.dictionaries(st.text(max_size=6), json_any, max_size=5))


gpt2_config_case = _family_config(GPT2_KEYS, SMALL_GPT2)
xlnet_config_case = _family_config(XLNET_KEYS, SMALL_XLNET)


@st.composite
def hf_dir_case(draw):
    """config.json (+ modules.json) + a model.safetensors with the config's tensors, some of them broken."""
    from safetensors.numpy import save

    from ptm_jax.config import ModelConfig
    from ptm_jax.export.hf_bert import all_rules

    files: dict[str, bytes] = {}
    cfg = {**SMALL_BERT, **draw(hf_config)} if draw(st.booleans()) else dict(SMALL_BERT)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##c", "d", "e", "f", "g"]
    files["vocab.txt"] = draw(st.one_of(st.just("\n".join(vocab).encode()), st.just("\n".join(vocab).encode()),
                                        vocab_case.map(lambda v: v[0])))
    files["config.json"] = draw(st.one_of(st.just(json.dumps(cfg).encode()), deep_json,
                                          mutated(st.just(json.dumps(cfg).encode())), st.binary(max_size=60)))
    if draw(st.integers(0, 5)) == 0:
        files["modules.json"] = draw(st.one_of(json_any.map(lambda v: json.dumps(v).encode()),
                                               st.binary(max_size=40)))
    mc = ModelConfig(vocab_size=12, hidden_size=4, num_layers=1, num_heads=2, intermediate_size=8,
                     max_position_embeddings=8)
    head = draw(st.sampled_from(["encoder", "pretraining", "sequence_classification"]))
    tensors = {r.hf: np.zeros(r.hf_shape, np.float32) for r in all_rules(mc, head, 2, head != "encoder")}
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(tensors)))
        kind = draw(st.sampled_from(["drop", "reshape", "int", "f16", "extra"]))
        if kind == "drop":
            tensors.pop(name, None)
        elif kind == "reshape":
            tensors[name] = np.zeros((3,), np.float32)
        elif kind == "int":
            tensors[name] = np.zeros(tensors.get(name, np.zeros(1)).shape, np.int64)
        elif kind == "f16":
            tensors[name] = tensors.get(name, np.zeros(1)).astype(np.float16)
        else:
            tensors[draw(word)] = np.zeros((2,), np.float32)
    weights = save(tensors) if tensors else b""
    files["model.safetensors"] = draw(st.one_of(st.just(weights), st.just(weights), mutated(st.just(weights[:64])),
                                                st.binary(max_size=40)))
    return files


toml_value = st.one_of(st.integers(-5, 10**6).map(str), st.floats(allow_nan=False).map(repr),
                       st.sampled_from(["true", "false", '"x"', "'bert_tiny'", "[1, 2]", "{a = 1}", "nan",
                                        '"embedded"', "1e400", "0x10"]), st.text(max_size=8).map(json.dumps))
toml_key = st.sampled_from(["vocab_size", "hidden_size", "num_heads", "steps", "batch_size", "kind", "corpus",
                            "max_seq_length", "learning_rate", "data", "extends", "name", "bogus"])
toml_line = st.one_of(st.sampled_from(["[model]", "[train]", "[data]", "[tokenizer]", "[mesh]", "[bogus]",
                                       "[[model]]", "", "extends = 'bert_tiny'", "extends = 'nope'", "extends = 5",
                                       "extends = ['bert_tiny']", "a = " + "[" * 3000 + "]" * 3000]),
                      st.tuples(toml_key, toml_value).map(lambda t: f"{t[0]} = {t[1]}"), st.text(max_size=20))
override = st.one_of(st.tuples(st.sampled_from(["train.steps", "model.hidden_size", "data.masked_lm_prob",
                                                "mesh.data", "objective", "train", "x.y.z", "model..a"]),
                               st.one_of(toml_value, st.text(max_size=10))).map("=".join), st.text(max_size=12))
config_case = st.tuples(st.one_of(mutated(lines_to_bytes(st.lists(toml_line, max_size=15))),
                                  lines_to_bytes(st.lists(toml_line, max_size=15)), st.binary(max_size=100)),
                        st.lists(override, max_size=3))

CACHE_FILES = ["meta.json", "tokens.int32.bin", "sentence_offsets.int64.bin", "doc_offsets.int64.bin",
               "doc_keys.int64.bin", "COMPLETE"]
cache_edit = st.one_of(
    st.tuples(st.sampled_from(CACHE_FILES), st.just("delete"), st.none()),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("append"), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("meta.json"), st.just("meta"), st.tuples(st.sampled_from(
        ["num_docs", "num_sentences", "num_tokens", "format_version", "fingerprint"]), json_any)),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("replace"), st.binary(max_size=40)))
cache_case = st.lists(cache_edit, max_size=3)

STRATEGIES: dict[str, st.SearchStrategy] = {
    "corpus.read_documents": corpus_case, "glue.read_glue": glue_case, "squad.read_squad": squad_case,
    "conll.read_conll": conll_case, "tokenizers.read_vocab+WordPiece": vocab_case,
    "WordPiece.encode": any_text, "SentencePiece.encode": any_text,
    "hf_bert.model_config_from_hf": hf_config_case, "hf_bert.import_hf(dir)": hf_dir_case(),
    "config.load_config(toml)": config_case, "cache.TokenCache.open": cache_case,
    "byte_bpe.vocab.json+merges.txt": byte_bpe_case, "ByteBPE.encode": any_text,
    "hf_gpt2.model_config_from_hf_gpt2": gpt2_config_case, "hf_xlnet.model_config_from_hf": xlnet_config_case,
}


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
    from ptm_jax.export.hf_bert import model_config_from_hf

    cfg = model_config_from_hf(value, work / "config.json")
    need(cfg.hidden_size > 0 and cfg.num_heads > 0 and cfg.num_layers > 0, "positive sizes")
    need(cfg.hidden_size % cfg.num_heads == 0 and 0.0 <= cfg.hidden_dropout < 1.0, "usable sizes and rates")


def t_hf_dir(value, work: Path, tools: Tools) -> None:
    from ptm_jax.export.hf_bert import import_hf

    files = value
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    params, cfg, info, _ = import_hf(work)
    need(isinstance(params, dict) and "head" in info, "params and head")


def t_config_toml(value, work: Path, tools: Tools) -> None:
    from ptm_jax.config import load_config

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
    from ptm_jax.export.hf_gpt2 import model_config_from_hf_gpt2

    _check_family_config(model_config_from_hf_gpt2(value, work / "config.json"))


def t_xlnet_config(value, work: Path, tools: Tools) -> None:
    from ptm_jax.export.hf_xlnet import model_config_from_hf

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
