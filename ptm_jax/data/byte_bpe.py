"""GPT-2 byte-level BPE (Radford et al. 2019, section 2.2) from a ``vocab.json`` + ``merges.txt`` pair.

Built on the HF Rust ``tokenizers`` library with the pieces transformers' ``GPT2TokenizerFast`` uses: a
``ByteLevel`` pre-tokenizer (GPT-2's word regex, every byte mapped to a printable character, no prefix space),
a plain ``BPE`` model (no unknown token, no dropout, no subword prefix/suffix) and the ``ByteLevel`` decoder,
so ids equal ``GPT2TokenizerFast(vocab_file, merges_file)`` and ``decode(encode(x)) == x`` for any text.
(Text holding the literal strings ``<|start|>``, ``<|delim|>`` or ``<|extract|>`` encodes them to their single
ids, as GPT2TokenizerFast does once they are registered with ``add_special_tokens``.)

Special tokens (all ``special`` added tokens, so their literal text encodes to the single id, as in
GPT2TokenizerFast for ``<|endoftext|>``):

* ``<|endoftext|>`` = ``eos_id`` (GPT-2: 50256), also used as ``pad_id``;
* ``<|start|>``, ``<|delim|>``, ``<|extract|>`` = ``start_id``, ``delim_id``, ``extract_id``: the GPT-1
  finetuning input transformations (Radford et al. 2018, section 3.3). Exposed to BERT-style code as
  ``cls_id``, ``sep_id`` and ``mask_id``.

Any of the four missing from ``vocab.json`` is appended after it, in that order, so GPT-2's 50257-entry
vocabulary becomes ``vocab_size`` 50260 (``base_vocab_size`` 50257): the model's embedding must have
``vocab_size`` rows. A byte-level vocabulary covers every byte, so there is no unknown token: ``unk_id`` is
-1 ("none"), which ``token_to_id`` also returns for a string that is not a token.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ptm_jax import digest
from ptm_jax.data.tokenizers import RustTokenizer, _atomic_write, _nonempty
from ptm_jax.errors import ConfigError, DataError

EOS, START, DELIM, EXTRACT = "<|endoftext|>", "<|start|>", "<|delim|>", "<|extract|>"
SPECIAL_TOKENS = (EOS, START, DELIM, EXTRACT)
SPACE_MARKER = "\u0120"  # "Ġ": the byte-level image of the space byte
MERGES_HEADER = "#version: 0.2"


def byte_alphabet() -> list[str]:
    """The 256 printable characters the byte-level mapping sends the bytes to."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel.alphabet()


def _line_of(text: str, key: str, last: bool = False) -> int:
    """1-based line of the first (``last``: final) occurrence of the JSON string ``key`` in ``text``, raw or
    \\u-escaped; 1 when not found. Used only to word an error."""
    for quoted in (json.dumps(key, ensure_ascii=False), json.dumps(key)):
        pos = text.rfind(quoted) if last else text.find(quoted)
        if pos >= 0:
            return text.count("\n", 0, pos) + 1
    return 1


def read_vocab_json(path: Path) -> list[str]:
    """Tokens of a GPT-2 ``vocab.json`` (``{token: id}``) in id order; ids must be exactly 0..n-1."""
    if not path.is_file():
        raise DataError(f"{path}: vocab.json not found; set tokenizer.vocab_file to a GPT-2 vocab.json (with "
                        "merges.txt beside it) or leave it empty to train one on the corpus")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 ({e.reason}); a GPT-2 vocab.json is UTF-8 JSON") from None
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict:
        seen: dict[str, object] = {}
        for k, v in items:
            if k in seen:
                duplicates.append(k)
            seen[k] = v
        return seen

    try:
        vocab = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}); expected a GPT-2 "
                        "vocab.json object {token: id}") from None
    if not isinstance(vocab, dict) or not vocab:
        raise DataError(f"{path}:1: expected a non-empty JSON object {{token: id}}, got {type(vocab).__name__}")
    if duplicates:
        k = duplicates[0]
        raise DataError(f"{path}:{_line_of(text, k, last=True)}: token {k!r} appears twice; every token "
                        "must appear once")
    tokens: list[str | None] = [None] * len(vocab)
    for tok, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(vocab):
            raise DataError(f"{path}:{_line_of(text, tok)}: token {tok!r} has id {i!r}; ids must be the integers "
                            f"0..{len(vocab) - 1} (one per token)")
        if tokens[i] is not None:
            raise DataError(f"{path}:{_line_of(text, tok)}: tokens {tokens[i]!r} and {tok!r} share id {i}; ids "
                            "must be unique")
        tokens[i] = tok
    missing = sorted(set(byte_alphabet()) - set(vocab))
    if missing:
        raise DataError(f"{path}: lacks {len(missing)} of the 256 byte-level characters (e.g. {missing[0]!r}); "
                        "it is not a byte-level BPE vocabulary (tokenizer.kind=byte_bpe needs GPT-2's format)")
    return tokens  # type: ignore[return-value]


def read_merges(path: Path, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Merge rules of a GPT-2 ``merges.txt`` (optional ``#version`` first line, then ``left right`` per
    line, highest priority first); both parts and their concatenation must be tokens of ``vocab``."""
    if not path.is_file():
        raise DataError(f"{path}: merges.txt not found; a byte-level BPE needs it beside vocab.json")
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e.reason} at byte {e.start}); a GPT-2 merges.txt is UTF-8") from None
    while lines and not lines[-1].strip():
        lines.pop()
    merges: list[tuple[str, str]] = []
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if lineno == 1 and line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise DataError(f"{path}:{lineno}: bad merge line {line!r}; expected two tokens separated by one "
                            "space (GPT-2 merges.txt format)")
        for tok in (parts[0], parts[1], parts[0] + parts[1]):
            if tok not in vocab:
                raise DataError(f"{path}:{lineno}: merge {line!r} uses {tok!r}, which is not in vocab.json; "
                                "the two files do not belong together")
        merges.append((parts[0], parts[1]))
    return merges


class ByteBPETokenizer(RustTokenizer):
    """GPT-2 byte-level BPE (``tokenizer.kind = "byte_bpe"``); ids equal transformers' GPT2TokenizerFast.

    ``vocab_file``: a ``vocab.json`` (or a directory holding one); ``merges_file`` defaults to the
    ``merges.txt`` beside it. ``add_prefix_space`` adds a space before each text (GPT2TokenizerFast's option of
    the same name), so a text tokenized alone starts like a word in running text.
    """

    def __init__(self, vocab_file, merges_file=None, *, add_prefix_space: bool = False):
        from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

        path = Path(vocab_file)
        self.vocab_file = path / "vocab.json" if path.is_dir() else path
        self.merges_file = Path(merges_file) if merges_file else self.vocab_file.with_name("merges.txt")
        self.add_prefix_space = bool(add_prefix_space)
        self._base_tokens = read_vocab_json(self.vocab_file)
        base = {t: i for i, t in enumerate(self._base_tokens)}
        self._merges = read_merges(self.merges_file, base)
        self.appended = tuple(t for t in SPECIAL_TOKENS if t not in base)  # lacking in vocab.json: ids follow it
        self._tokens = self._base_tokens + list(self.appended)
        self._vocab = {t: i for i, t in enumerate(self._tokens)}
        self._hf = HFTokenizer(models.BPE(base, self._merges, fuse_unk=False))
        self._hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=self.add_prefix_space,
                                                          use_regex=True)
        self._hf.decoder = decoders.ByteLevel()
        self._hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
        got = [self._hf.token_to_id(t) for t in SPECIAL_TOKENS]
        want = [self._vocab[t] for t in SPECIAL_TOKENS]
        if got != want:  # guards the id layout documented above against a library change
            raise DataError(f"{self.vocab_file}: special tokens got ids {got}, expected {want}")
        self.kind = "byte_bpe"
        self.base_vocab_size = len(self._base_tokens)
        self.vocab_size = len(self._tokens)
        self.eos_id, self.start_id, self.delim_id, self.extract_id = want
        self.pad_id = self.eos_id
        self.cls_id, self.sep_id, self.mask_id = self.start_id, self.delim_id, self.extract_id
        self.unk_id = -1
        self._encode_many = getattr(self._hf, "encode_batch_fast", self._hf.encode_batch)

    def special_ids(self) -> list[int]:
        """eos (= pad), start, delim, extract; there is no unknown token."""
        return sorted({self.eos_id, self.start_id, self.delim_id, self.extract_id})

    def _continuation_mask(self) -> np.ndarray:
        """A piece not starting with the space marker "Ġ" continues a word (so do punctuation and a text's
        first piece, which GPT-2's pre-tokenizer leaves without a space); special tokens never do."""
        cont = np.array([not t.startswith(SPACE_MARKER) for t in self._tokens], dtype=bool)
        cont[self.special_ids()] = False
        return cont

    def save(self, directory) -> list[Path]:
        """Writes ``vocab.json`` (the base vocabulary, as read) and ``merges.txt``; appended specials are not
        written, loading appends them again at the same ids."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        vocab, merges = d / "vocab.json", d / "merges.txt"
        _atomic_write(vocab, _vocab_json(self._base_tokens))
        _atomic_write(merges, _merges_txt(self._merges))
        return [vocab, merges]

    def fingerprint(self) -> str:
        return digest.sha256("byte_bpe-v1", _vocab_json(self._base_tokens), _merges_txt(self._merges),
                             str(self.add_prefix_space), "\n".join(self.appended))


def _vocab_json(tokens: list[str]) -> bytes:
    return json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False).encode("utf-8")


def _merges_txt(merges: list[tuple[str, str]]) -> bytes:
    return "\n".join([MERGES_HEADER, *(f"{a} {b}" for a, b in merges)]).encode("utf-8") + b"\n"


def train_byte_bpe(texts: Iterable[str], vocab_size: int, out_dir, *, min_frequency: int = 2) -> ByteBPETokenizer:
    """Trains a byte-level BPE (HF BpeTrainer over the 256-character byte alphabet) and writes
    ``out_dir/vocab.json`` and ``out_dir/merges.txt``. ``vocab_size`` counts everything: ids 0..3 are
    <|endoftext|>, <|start|>, <|delim|>, <|extract|>, then the 256 byte characters, then the merges.

    Reproducible: every symbol of a word is one of the 256 byte characters, numbered in code-point order before
    training, and the trainer breaks ties between equally frequent pairs by those ids, so no hash-map order
    reaches the result (unlike its WordPiece mode, where '##' symbols are numbered as they are met:
    data/wordpiece_training.py). tests/test_tokenizer_determinism.py trains twice in fresh processes."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, trainers

    floor = len(SPECIAL_TOKENS) + 256
    if vocab_size <= floor:
        raise ConfigError(f"tokenizer.vocab_size={vocab_size} is too small for a byte-level BPE (must exceed "
                          f"{floor}: 4 special tokens and 256 bytes)")
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), initial_alphabet=byte_alphabet(),
                                  show_progress=False)
    hf.train_from_iterator(_nonempty(texts), trainer=trainer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".byte-bpe-tmp-", dir=out))
    try:
        hf.model.save(str(tmp))
        reread = ByteBPETokenizer(tmp / "vocab.json")
        if not reread._merges:
            raise DataError("byte-level BPE training learned no merges: the corpus is empty or has no pair of "
                            f"bytes seen {min_frequency} times; check data.corpus")
        for name in ("vocab.json", "merges.txt"):
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ByteBPETokenizer(out / "vocab.json")
