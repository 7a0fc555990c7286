"""GPT-2 byte-level BPE: ids equal transformers' GPT2TokenizerFast on real text, special-token layout, lossless
decoding, training/loading through load_tokenizer, and errors that name the file and line."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from ptm_jax.config import TokenizerConfig
from ptm_jax.data.byte_bpe import SPECIAL_TOKENS, ByteBPETokenizer, train_byte_bpe
from ptm_jax.data.tokenizer_loading import load_tokenizer
from ptm_jax.errors import ConfigError, DataError

SYNTHETIC = [
    "日本語のテキスト、そして中文。", "emoji 🙂👍🏽 and flags 🇫🇷", "Ελληνικά: καλημέρα κόσμε",
    "naïve café — “quoted”", "tabs\tand   runs of  spaces ", "windows\r\nline\rends\n\n",
    "combining e\u0301 and \u200b zero width", "  leading spaces", "trailing spaces   ",
    "123,456.78 numbers 3rd 1990s", "it's I'm we'll they're DON'T",
    "a<|endoftext|>b <|start|> x <|delim|> y <|extract|>", "", " ", "\x00\x01 control \x7f bytes",
]


def _lines(path: Path, encoding: str = "utf-8-sig") -> list[str]:
    return path.read_text(encoding=encoding).splitlines()


@pytest.fixture(scope="module")
def corpus(shared_data) -> dict[str, list[str]]:
    shakespeare = _lines(shared_data / "corpus/tinyshakespeare/input.txt")
    monte_cristo = _lines(shared_data / "corpus/gutenberg/1184-0.txt")
    copperfield = _lines(shared_data / "corpus/gutenberg/766-0.txt")
    return {"train": shakespeare[:20000] + monte_cristo[:15000],
            "check": monte_cristo[30000:31500] + copperfield[5000:6000] + shakespeare[30000:30500] + SYNTHETIC}


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> ByteBPETokenizer:
    return train_byte_bpe(corpus["train"], 3000, tmp_path_factory.mktemp("bbpe"))


@pytest.fixture(scope="module")
def gpt2_layout(trained, tmp_path_factory) -> Path:
    """The trained vocabulary laid out like GPT-2's: no start/delim/extract, <|endoftext|> last."""
    d = tmp_path_factory.mktemp("gpt2_layout")
    tokens = [trained.id_to_token(i) for i in range(trained.vocab_size) if trained.id_to_token(i)
              not in SPECIAL_TOKENS] + ["<|endoftext|>"]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False))
    (d / "merges.txt").write_bytes(trained.merges_file.read_bytes())
    return d


def _hf(directory: Path, **kw):
    """transformers' GPT2TokenizerFast over the same files, with the three GPT-1 finetuning tokens registered
    as additional special tokens (as HF's GPT finetuning examples do); <|endoftext|> is special already."""
    from transformers import GPT2TokenizerFast

    ref = GPT2TokenizerFast(vocab_file=str(directory / "vocab.json"), merges_file=str(directory / "merges.txt"),
                            **kw)
    ref.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[1:])})
    return ref


def test_ids_equal_gpt2_tokenizer_fast_on_real_unicode_text(trained, corpus):
    lines = corpus["check"]
    non_ascii = sum(any(ord(c) > 127 for c in s) for s in lines)
    assert len(lines) >= 3000 and non_ascii >= 500
    ref = _hf(trained.vocab_file.parent)
    ours = trained.encode_batch(lines)
    theirs = ref(lines)["input_ids"]
    mismatches = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert not mismatches, (mismatches[:5], [lines[i] for i in mismatches[:3]])
    assert sum(map(len, ours)) > 30_000
    document = "\n".join(lines[:400])  # newlines and runs of blank lines inside one text
    assert trained.encode(document) == ref(document)["input_ids"]
    start = time.perf_counter()
    flat, _ = trained.encode_batch_flat(corpus["train"])
    seconds = time.perf_counter() - start
    print(f"\nbyte_bpe encode_batch_flat: {flat.size:,} tokens from {len(corpus['train']):,} lines in "
          f"{seconds:.2f} s = {flat.size / seconds:,.0f} tokens/s")


def test_trained_vocab_puts_the_four_specials_first(trained):
    assert trained.kind == "byte_bpe"
    assert trained.vocab_size == trained.base_vocab_size == 3000 and trained.appended == ()
    assert (trained.eos_id, trained.start_id, trained.delim_id, trained.extract_id) == (0, 1, 2, 3)
    assert (trained.pad_id, trained.cls_id, trained.sep_id, trained.mask_id, trained.unk_id) == (0, 1, 2, 3, -1)
    assert trained.special_ids() == [0, 1, 2, 3]
    vocab = json.loads(trained.vocab_file.read_text(encoding="utf-8"))
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3] and len(vocab) == 3000
    header, *merges = trained.merges_file.read_text(encoding="utf-8").splitlines()
    assert header.startswith("#version") and len(merges) == 3000 - 4 - 256


def test_gpt2_layout_appends_start_delim_extract_after_the_base_vocab(gpt2_layout, corpus):
    tok = ByteBPETokenizer(gpt2_layout / "vocab.json")
    base = tok.base_vocab_size
    assert base == 2997 and tok.vocab_size == base + 3
    assert tok.eos_id == tok.pad_id == base - 1
    assert (tok.start_id, tok.delim_id, tok.extract_id) == (base, base + 1, base + 2)
    assert (tok.cls_id, tok.sep_id, tok.mask_id) == (tok.start_id, tok.delim_id, tok.extract_id)
    assert tok.appended == ("<|start|>", "<|delim|>", "<|extract|>")
    assert [tok.id_to_token(i) for i in range(base - 1, base + 3)] == list(SPECIAL_TOKENS)
    ref = _hf(gpt2_layout)
    assert ref.eos_token_id == tok.eos_id
    lines = corpus["check"][:2000]
    assert tok.encode_batch(lines) == ref(lines)["input_ids"]
    text = "end.<|endoftext|>Next doc"
    assert tok.encode(text) == ref(text)["input_ids"] and tok.encode(text).count(tok.eos_id) == 1
    ids = tok.encode("<|start|>premise<|delim|>hypothesis<|extract|>")
    assert ids[0] == tok.start_id and ids[-1] == tok.extract_id and ids.count(tok.delim_id) == 1
    assert tok.token_to_id("<|delim|>") == base + 1 and tok.token_to_id("not a token") == -1


def test_decode_inverts_encode(trained, corpus):
    texts = corpus["check"][:500] + SYNTHETIC + ["\n".join(corpus["check"][:50])]
    for text in texts:
        assert trained.decode(trained.encode(text)) == text
    assert trained.decode([trained.eos_id, trained.start_id]) == "<|endoftext|><|start|>"


def test_add_prefix_space_matches_hf_option(trained, corpus):
    tok = ByteBPETokenizer(trained.vocab_file, add_prefix_space=True)
    ref = _hf(trained.vocab_file.parent, add_prefix_space=True)
    lines = corpus["check"][:1000]
    assert tok.encode_batch(lines) == ref(lines)["input_ids"]
    assert tok.tokenize("Hello")[0].startswith("\u0120") and not trained.tokenize("Hello")[0].startswith("\u0120")
    assert tok.fingerprint() != trained.fingerprint()


def test_continuation_mask_flags_pieces_without_the_space_marker(trained):
    cont = trained.continuation_mask()
    assert cont.shape == (trained.vocab_size,) and cont.dtype == bool
    assert not cont[trained.special_ids()].any()
    assert not cont[trained.token_to_id("\u0120the")] and cont[trained.token_to_id("e")]
    pieces = trained.tokenize(" understandingly unbelievable")
    flags = cont[[trained.token_to_id(p) for p in pieces]]
    assert flags.tolist() == [not p.startswith("\u0120") for p in pieces] and flags.sum() >= 1


def test_tf_encode_equals_encode_batch(trained, corpus):
    lines = corpus["check"][:64] + SYNTHETIC
    ragged = trained.tf_encode(tf.constant(lines))
    assert ragged.to_list() == trained.encode_batch(lines)
    flat, lengths = trained.encode_batch_flat(lines)
    assert flat.dtype == np.int32 and int(lengths.sum()) == flat.size == int(tf.size(ragged.flat_values))


def test_save_reloads_same_ids_and_fingerprint(gpt2_layout, tmp_path, corpus):
    tok = ByteBPETokenizer(gpt2_layout)  # a directory holding vocab.json
    files = tok.save(tmp_path / "saved")
    assert [f.name for f in files] == ["vocab.json", "merges.txt"]
    again = ByteBPETokenizer(files[0])
    assert again.fingerprint() == tok.fingerprint() and again.vocab_size == tok.vocab_size
    assert again.encode_batch(corpus["check"][:200]) == tok.encode_batch(corpus["check"][:200])
    assert len(json.loads(files[0].read_text(encoding="utf-8"))) == tok.base_vocab_size


def test_load_tokenizer_trains_reuses_and_loads_byte_bpe(corpus, tmp_path, monkeypatch):
    # off: with the machine's tokenizer cache the first load reads the sample twice (its digest, then the training);
    # the cache has tests of its own (tests/test_tokenizer_cache.py)
    monkeypatch.setenv("PTM_TOKENIZER_CACHE", "off")
    cfg = TokenizerConfig(kind="byte_bpe", vocab_size=600)
    calls = []

    def texts():
        calls.append(1)
        return iter(corpus["train"][:3000])

    tok = load_tokenizer(cfg, texts, tmp_path)
    assert isinstance(tok, ByteBPETokenizer) and tok.vocab_size == 600
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == ["merges.txt", "settings.json",
                                                                          "vocab.json"]
    again = load_tokenizer(cfg, texts, tmp_path)
    assert len(calls) == 1 and again.fingerprint() == tok.fingerprint()
    loaded = load_tokenizer(TokenizerConfig(kind="byte_bpe", vocab_file=str(tmp_path / "tokenizer/vocab.json")),
                            None, tmp_path / "unused")
    assert loaded.fingerprint() == tok.fingerprint()


def test_training_rejects_tiny_vocab_and_empty_corpus(tmp_path):
    with pytest.raises(ConfigError, match="vocab_size=260 is too small"):
        train_byte_bpe(["some text"], 260, tmp_path)
    with pytest.raises(DataError, match="learned no merges"):
        train_byte_bpe(["", "  "], 1000, tmp_path)


def _pair(tmp_path: Path, trained: ByteBPETokenizer, vocab: str | None = None, merges: str | None = None) -> Path:
    d = tmp_path / "bad"
    d.mkdir(exist_ok=True)
    (d / "vocab.json").write_text(vocab if vocab is not None else trained.vocab_file.read_text("utf-8"), "utf-8")
    (d / "merges.txt").write_text(merges if merges is not None else trained.merges_file.read_text("utf-8"),
                                  "utf-8")
    return d / "vocab.json"


def test_malformed_vocab_json_errors_name_file_and_line(trained, tmp_path):
    with pytest.raises(DataError, match=r"missing/vocab\.json: vocab\.json not found"):
        ByteBPETokenizer(tmp_path / "missing/vocab.json")
    good = trained.vocab_file.read_text("utf-8")
    pretty = json.dumps(json.loads(good), ensure_ascii=False, indent=0)
    broken = pretty.replace('"<|delim|>": 2,', '"<|delim|>": 2', 1)  # missing comma -> error on the next line
    with pytest.raises(DataError, match=r"bad/vocab\.json:5: not valid JSON"):
        ByteBPETokenizer(_pair(tmp_path, trained, vocab=broken))
    with pytest.raises(DataError, match=r"vocab\.json:4: token '<\|delim\|>' has id 'x'"):
        ByteBPETokenizer(_pair(tmp_path, trained, vocab=pretty.replace('"<|delim|>": 2', '"<|delim|>": "x"', 1)))
    with pytest.raises(DataError, match=r"vocab\.json:4: tokens '<\|start\|>' and '<\|delim\|>' share id 1"):
        ByteBPETokenizer(_pair(tmp_path, trained, vocab=pretty.replace('"<|delim|>": 2', '"<|delim|>": 1', 1)))
    with pytest.raises(DataError, match=r"vocab\.json:1: expected a non-empty JSON object"):
        ByteBPETokenizer(_pair(tmp_path, trained, vocab="[1, 2]"))
    no_bytes = {t: i for i, t in enumerate(["<|endoftext|>", "a", "b", "ab"])}
    with pytest.raises(DataError, match="lacks 254 of the 256 byte-level characters"):
        ByteBPETokenizer(_pair(tmp_path, trained, vocab=json.dumps(no_bytes)))


def test_malformed_merges_errors_name_file_and_line(trained, tmp_path):
    merges = trained.merges_file.read_text("utf-8").splitlines()
    vocab = _pair(tmp_path, trained)
    (vocab.parent / "merges.txt").unlink()
    with pytest.raises(DataError, match=r"bad/merges\.txt: merges\.txt not found"):
        ByteBPETokenizer(vocab)
    bad = merges[:4] + ["a b c"] + merges[4:]
    with pytest.raises(DataError, match=r"bad/merges\.txt:5: bad merge line 'a b c'"):
        ByteBPETokenizer(_pair(tmp_path, trained, merges="\n".join(bad)))
    bad = merges[:6] + ["zq \u0120zqx"] + merges[6:]
    with pytest.raises(DataError, match=r"merges\.txt:7: merge 'zq \u0120zqx' uses 'zq', which is not in vocab"):
        ByteBPETokenizer(_pair(tmp_path, trained, merges="\n".join(bad)))
    bad = merges[:2] + [""] + merges[2:]
    with pytest.raises(DataError, match=r"merges\.txt:3: bad merge line ''"):
        ByteBPETokenizer(_pair(tmp_path, trained, merges="\n".join(bad)))
    ok = ByteBPETokenizer(_pair(tmp_path, trained, merges="\n".join(merges[1:]) + "\n\n"))  # no header: fine
    assert ok.encode("the king") == trained.encode("the king")
