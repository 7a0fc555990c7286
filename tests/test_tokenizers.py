"""WordPiece and SentencePiece tokenizers: BERT rules (checked against an independent pure-Python reference
written from google-research/bert tokenization.py's rules), vocab errors, tf.data encoding, training."""
from __future__ import annotations

import csv
import itertools
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from ptm_jax.config import TokenizerConfig
from ptm_jax.data.tokenizer_loading import load_tokenizer
from ptm_jax.data.tokenizers import (SPECIALS, SentencePieceTokenizer, WordPieceTokenizer, bert_normalizer,
                                     bert_pre_tokenizer, train_sentencepiece, train_wordpiece)
from ptm_jax.errors import DataError

# ----------------------------------------------------------------------------------------------------
# Independent reference (test-only): BasicTokenizer + greedy longest-match-first WordPiece, from the rules.


def _ref_is_whitespace(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _ref_is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def _ref_is_punct(c: str) -> bool:
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


_REF_CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
            (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def ref_basic_tokens(text: str, lower: bool = True) -> list[str]:
    kept = []
    for c in text:
        if c in "\x00\ufffd" or _ref_is_control(c):
            continue
        kept.append(" " if _ref_is_whitespace(c) else c)
    spaced = "".join(f" {c} " if any(a <= ord(c) <= b for a, b in _REF_CJK) else c for c in kept)
    out: list[str] = []
    for word in spaced.split():
        if lower:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower())
                           if unicodedata.category(c) != "Mn")
        piece = ""
        for c in word:
            if _ref_is_punct(c):
                out.extend([piece, c] if piece else [c])
                piece = ""
            else:
                piece += c
        if piece:
            out.append(piece)
    return out


def ref_wordpiece_ids(text: str, vocab: dict[str, int], lower: bool = True, max_chars: int = 200) -> list[int]:
    ids: list[int] = []
    for word in ref_basic_tokens(text, lower):
        if len(word) > max_chars:
            ids.append(vocab["[UNK]"])
            continue
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in vocab:
                    pieces.append(vocab[sub])
                    start = end
                    break
            else:
                pieces = [vocab["[UNK]"]]
                break
        ids.extend(pieces)
    return ids


# ----------------------------------------------------------------------------------------------------
# Fixtures: a vocabulary trained on real text, plus extra entries that the edge cases need.


def _sst2_dev(shared_data: Path) -> list[str]:
    with open(shared_data / "glue/SST-2/dev.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r[0] for r in rows[1:]]


def _book_lines(shared_data: Path, n: int = 3000) -> list[str]:
    with open(shared_data / "corpus/gutenberg/84-0.txt", encoding="utf-8") as f:
        return [ln.strip() for ln in itertools.islice(f, 200, None) if ln.strip()][:n]


EXTRA = ["中", "文", "字", "ς", "σ", "##ς", "##σ", "ο", "##δ", "##ο", "α", "##α", "H", "##é", "##É", "é",
         "W", "##ö", "İ", "##i", "\ue000", "##\ue000", "😀", "ﬁ", "##ﬁ", "@", "Ο", "##Δ", "##Ο", "##Σ", "Σ", "##Α"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory, shared_data) -> Path:
    d = tmp_path_factory.mktemp("wp")
    tok = train_wordpiece(_sst2_dev(shared_data) + _book_lines(shared_data), 3000, d / "trained")
    tokens = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    tokens += [t for t in EXTRA if t not in set(tokens)]
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    tokens += [p for c in letters for p in (c, f"##{c}") if p not in set(tokens)]
    path = d / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def wp(vocab_file) -> WordPieceTokenizer:
    return WordPieceTokenizer(vocab_file)


def _vocab(tok: WordPieceTokenizer) -> dict[str, int]:
    return {tok.id_to_token(i): i for i in range(tok.vocab_size)}


EDGE_CASES = [
    "Héllo wörld", "HÉLLO World", "中文字", "中a文b字", "a\x07b\x1bc\x7fd", "a\u00a0b\u2003c", "x\ufffdy", "nul\x00here",
    "don't", "a--b", "...!?", "x" * 150, "y" * 250, "z" * 200, "z" * 201, "McDonald's iPhone XR", "", "   ",
    "\t\n\r ", "ΟΔΟΣ ΣΑΣ. Σ ΑΣ'Α", "a\ue000b", "zero\u200bwidth soft\u00adhyphen", "İstanbul", "smile 😀!",
    "cafe\u0301 CAFÉ", "[MASK] [CLS]", "$100.00 e-mail@x.com", "ﬁne ﬁ", "line\u2028sep para\u2029sep",
]


@pytest.mark.parametrize("lower", [True, False])
def test_wordpiece_matches_reference_on_edge_cases(vocab_file, lower):
    tok = WordPieceTokenizer(vocab_file, lower_case=lower)
    vocab = _vocab(tok)
    for text in EDGE_CASES:
        assert tok.encode(text) == ref_wordpiece_ids(text, vocab, lower), repr(text)
    assert tok.encode("") == [] and tok.encode("   ") == [] and tok.encode("\x00\ufffd\x07") == []
    assert tok.encode("z" * 201) == [tok.unk_id] and tok.unk_id not in tok.encode("z" * 200)
    word = "".join(p.removeprefix("##") for p in tok.tokenize("Héllo"))
    assert word == ("hello" if lower else "Héllo")


def test_basic_tokenization_matches_reference_on_every_bmp_code_point():
    """Each code point c in 'a{c}b {c}': differences may only come from characters that Python 3.11's
    Unicode 14 tables leave unassigned (Cn) and the Rust tables (newer) assign."""
    norm, pre = bert_normalizer(True), bert_pre_tokenizer()
    mismatched = []
    for cp in itertools.chain(range(0xD800), range(0xE000, 0x10000), range(0x1F300, 0x1F700, 7),
                              range(0x20000, 0x2FA20, 61)):
        s = f"a{chr(cp)}b {chr(cp)}"
        got = [t for t, _ in pre.pre_tokenize_str(norm.normalize_str(s))]
        if got != ref_basic_tokens(s):
            mismatched.append(cp)
    assert all(unicodedata.category(chr(cp)) == "Cn" for cp in mismatched), [hex(c) for c in mismatched[:10]]
    assert len(mismatched) < 150


def test_hf_bert_normalizer_differs_from_reference_where_we_do_not():
    """Why the pipeline is composed from generic parts: BertNormalizer lower-cases a final Σ to 'σ' and
    deletes private-use characters; Python's rules (and ours) give 'ς' and keep them."""
    from tokenizers import normalizers

    hf = normalizers.BertNormalizer(lowercase=True)
    ours = bert_normalizer(True)
    assert hf.normalize_str("ΟΔΟΣ") == "οδοσ" and ours.normalize_str("ΟΔΟΣ") == "οδος" == "ΟΔΟΣ".lower()
    assert hf.normalize_str("a\ue000b") == "ab" and ours.normalize_str("a\ue000b") == "a\ue000b"


def test_wordpiece_matches_reference_on_real_text(wp, shared_data):
    texts = _sst2_dev(shared_data) + _book_lines(shared_data)
    vocab = _vocab(wp)
    got = wp.encode_batch(texts)
    want = [ref_wordpiece_ids(t, vocab) for t in texts]
    assert len(texts) > 3000
    assert sum(a == b for a, b in zip(got, want)) == len(texts)
    n_tokens = sum(map(len, got))
    assert n_tokens > 40_000 and sum(i == wp.unk_id for ids in got for i in ids) < 0.001 * n_tokens


def test_wordpiece_matches_transformers_on_sst2_dev(vocab_file, shared_data):
    transformers = pytest.importorskip("transformers")
    texts = _sst2_dev(shared_data)
    ours = WordPieceTokenizer(vocab_file).encode_batch(texts)
    fast = transformers.BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    slow = transformers.BertTokenizer(vocab_file=str(vocab_file), do_lower_case=True)
    assert [fast.encode(t, add_special_tokens=False) for t in texts] == ours
    assert [slow.encode(t, add_special_tokens=False) for t in texts] == ours


def test_wordpiece_specials_continuation_fingerprint_and_save(wp, vocab_file, tmp_path):
    assert (wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id) == (0, 1, 2, 3, 4)
    cont = wp.continuation_mask()
    assert cont.shape == (wp.vocab_size,) and cont.dtype == bool
    assert cont.sum() == sum(wp.id_to_token(i).startswith("##") for i in range(wp.vocab_size)) > 100
    ids = wp.encode("unbelievably wonderful")
    assert [cont[i] for i in ids] == [t.startswith("##") for t in wp.tokenize("unbelievably wonderful")]
    assert wp.decode(wp.encode("The monster, he said.")) == "the monster, he said."
    (saved,) = wp.save(tmp_path)
    assert saved.read_bytes() == vocab_file.read_bytes()
    assert WordPieceTokenizer(saved).fingerprint() == wp.fingerprint()
    assert WordPieceTokenizer(saved, lower_case=False).fingerprint() != wp.fingerprint()
    assert wp.token_to_id("[MASK]") == 4 and wp.token_to_id("no-such-token") == wp.unk_id


def test_vocab_file_errors_name_file_and_line(tmp_path):
    cases = {
        "missing.txt": (None, "not found"),
        "empty.txt": (b"", "empty"),
        "blank.txt": (b"\n\n  \n", "empty"),
        "latin1.txt": ("\n".join(SPECIALS).encode() + b"\ncaf\xe9\n", "vocab:6: not UTF-8"),
        "dup.txt": ("\n".join(SPECIALS + ("the", "a", "the")).encode() + b"\n", "dup.txt:8: duplicate token 'the' (first on line 6)"),
        "nospecial.txt": (b"[PAD]\n[UNK]\nthe\n", "[CLS], [SEP], [MASK]"),
        "binary.model": (b"\n\x0e\n\x05[PAD]\x15\x00\x00\x00\x00", "binary"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(DataError) as e:
            WordPieceTokenizer(path)
        msg = str(e.value).replace("latin1.txt", "vocab")
        assert name in str(e.value) and expected in msg, str(e.value)


def test_tf_encode_in_tf_data_equals_encode_batch_one_call_per_batch(wp, shared_data):
    texts = _sst2_dev(shared_data)[:500] + ["", "Héllo 中文 don't"]
    calls = []
    original = wp.encode_batch_flat

    def counting(batch):
        calls.append(len(batch))
        return original(batch)

    wp.encode_batch_flat = counting
    try:
        ds = tf.data.Dataset.from_tensor_slices(texts).batch(64).map(wp.tf_encode)
        got = [row for ragged in ds for row in ragged.to_list()]
    finally:
        del wp.encode_batch_flat
    assert got == wp.encode_batch(texts)
    assert calls == [64] * 7 + [502 - 7 * 64]
    spec = ds.element_spec
    assert isinstance(spec, tf.RaggedTensorSpec) and spec.dtype == tf.int32


@pytest.fixture(scope="module")
def shakespeare(shared_data) -> list[str]:
    with open(shared_data / "corpus/tinyshakespeare/input.txt", encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip()]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_train_load_round_trip(model_type, shakespeare, tmp_path):
    sp = train_sentencepiece(iter(shakespeare), 500, tmp_path / "sp", model_type, input_sentence_size=6000)
    assert sp.kind == f"sentencepiece_{model_type}" and sp.vocab_size == 500
    assert (sp.pad_id, sp.unk_id, sp.cls_id, sp.sep_id, sp.mask_id) == (0, 1, 2, 3, 4)
    assert [sp.id_to_token(i) for i in range(5)] == list(SPECIALS)
    sample = shakespeare[1000:1400]
    ids = sp.encode_batch(sample)
    assert [sp.decode(x) for x in ids] == [" ".join(s.split()) for s in sample]
    assert sum(i == sp.unk_id for x in ids for i in x) == 0
    assert ids == [sp.encode(s) for s in sample]
    cont = sp.continuation_mask()
    pieces = [sp.id_to_token(i) for i in range(sp.vocab_size)]
    assert not cont[:5].any() and all(not cont[i] for i, p in enumerate(pieces) if p.startswith("\u2581"))
    assert cont.sum() == sum(1 for p in pieces[5:] if not p.startswith("\u2581")) > 50
    files = sp.save(tmp_path / "saved")
    assert [f.name for f in files] == ["spm.model", "spm.vocab"]
    again = SentencePieceTokenizer(files[0])
    assert again.fingerprint() == sp.fingerprint() and again.encode_batch(sample) == ids
    ds = tf.data.Dataset.from_tensor_slices(sample).batch(100).map(sp.tf_encode)
    assert [r for b in ds for r in b.to_list()] == ids


def test_sentence_sample_is_seeded_uniform_and_in_corpus_order():
    from ptm_jax.data.tokenizers import sentence_sample

    texts = [f"s{i}" for i in range(1000)]
    a = sentence_sample(iter(texts), 100, seed=0)
    assert a == sentence_sample(iter(texts), 100, seed=0) != sentence_sample(iter(texts), 100, seed=1)
    assert len(a) == 100 and a == sorted(a, key=lambda t: int(t[1:]))
    assert sentence_sample(iter(texts[:50]), 100, seed=0) == texts[:50]
    hits = np.zeros(1000)
    for seed in range(200):
        hits[[int(t[1:]) for t in sentence_sample(iter(texts), 100, seed)]] += 1
    assert abs(hits[:500].sum() / hits.sum() - 0.5) < 0.02  # first and second half equally likely (20000 draws)


def test_sentencepiece_model_errors(tmp_path, vocab_file):
    with pytest.raises(DataError, match="nothere.model: SentencePiece model not found"):
        SentencePieceTokenizer(tmp_path / "nothere.model")
    with pytest.raises(DataError, match="vocab.txt: not a valid SentencePiece model"):
        SentencePieceTokenizer(vocab_file)


def test_sentencepiece_model_with_a_non_utf8_piece_is_refused_naming_the_piece(shakespeare, tmp_path):
    sp = train_sentencepiece(iter(shakespeare), 500, tmp_path / "sp", "unigram", input_sentence_size=6000)
    raw = sp.model_file.read_bytes()
    piece = "\u2581the".encode()
    assert raw.count(piece) >= 1
    bad = tmp_path / "bad.model"
    bad.write_bytes(raw.replace(piece, piece[:3] + b"\xf4" + piece[4:], 1))  # 't' -> a lone 0xF4 byte
    with pytest.raises(DataError, match=r"bad.model: piece \d+ is not valid UTF-8"):
        SentencePieceTokenizer(bad)


def test_load_tokenizer_trains_once_then_reuses(tmp_path, shakespeare):
    cfg = TokenizerConfig(kind="wordpiece", vocab_size=800)
    tok = load_tokenizer(cfg, lambda: iter(shakespeare[:5000]), tmp_path, corpus_key="shakespeare")
    vocab = tmp_path / "tokenizer" / "vocab.txt"
    assert tok.vocab_size == 800 and vocab.is_file()
    mtime = vocab.stat().st_mtime_ns

    def must_not_train():
        raise AssertionError("retrained although the settings did not change")

    again = load_tokenizer(cfg, must_not_train, tmp_path, corpus_key="shakespeare")
    assert again.fingerprint() == tok.fingerprint() and vocab.stat().st_mtime_ns == mtime
    bigger = load_tokenizer(TokenizerConfig(kind="wordpiece", vocab_size=900), lambda: iter(shakespeare[:5000]),
                            tmp_path, corpus_key="shakespeare")
    assert bigger.vocab_size == 900 and not list(tmp_path.glob(".tokenizer-tmp-*"))
    loaded = load_tokenizer(TokenizerConfig(kind="wordpiece", vocab_file=str(vocab)), None, tmp_path / "x")
    assert loaded.fingerprint() == bigger.fingerprint()
    sp = load_tokenizer(TokenizerConfig(kind="sentencepiece_bpe", vocab_size=300, lower_case=False),
                        lambda: iter(shakespeare[:3000]), tmp_path / "sp")
    assert sp.kind == "sentencepiece_bpe" and (tmp_path / "sp/tokenizer/spm.model").is_file()


def test_encode_batch_flat_equals_encode_batch(wp, shared_data):
    """The array form used by the token cache (its speed is benchmarks/bench_tokenizers.py's business)."""
    texts = _book_lines(shared_data, 3000)
    flat, lengths = wp.encode_batch_flat(texts)
    assert flat.dtype == np.int32 and lengths.dtype == np.int64 and lengths.sum() == flat.size
    ids = wp.encode_batch(texts)
    assert lengths.tolist() == [len(x) for x in ids] and flat.tolist() == [i for x in ids for i in x]
    assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "2"


def test_reader_errors_during_training_propagate_unchanged(tmp_path):
    def reader():
        yield "Some text to start with."
        raise DataError("corpus.txt:2: not valid UTF-8")

    for kind in ("wordpiece", "sentencepiece_unigram"):
        with pytest.raises(DataError, match=r"^corpus.txt:2: not valid UTF-8$"):
            load_tokenizer(TokenizerConfig(kind=kind, vocab_size=50), reader, tmp_path / kind)
        left = list((tmp_path / kind).iterdir()) if (tmp_path / kind).exists() else []
        assert left == []  # no tokenizer, no temporary directory
