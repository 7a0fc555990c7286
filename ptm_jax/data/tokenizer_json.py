"""Tokenizers of a Hugging Face ``tokenizer.json`` (the one file transformers 5's ``save_pretrained`` writes), as the
classic files our tokenizers read: ``vocab.txt`` (BERT / ERNIE WordPiece), ``vocab.json`` + ``merges.txt`` (GPT-2
byte-level BPE) and ``spiece.model`` (XLNet's SentencePiece unigram).

``tokenizer.json`` is the serialisation of the Rust ``tokenizers`` pipeline (huggingface/tokenizers
``tokenizers/src/tokenizer/serialization.rs``): ``model`` holds the vocabulary (``WordPiece.vocab`` token -> id,
``BPE.vocab`` + ``BPE.merges``, ``Unigram.vocab`` [piece, score] pairs in id order), ``normalizer`` the lower-casing
and, for SentencePiece conversions, the ``Precompiled`` character map of the original model, ``added_tokens`` the
special tokens. Each kind is checked against what our tokenizer computes (a WordPiece with ``##`` continuations and
BERT's normaliser; a byte-level pre-tokenizer for BPE; a Metaspace pre-tokenizer for unigram); anything else is a
``CheckpointError`` naming the file and field. The unigram model becomes a SentencePiece ``ModelProto``
(google/sentencepiece ``src/sentencepiece_model.proto``): pieces and scores in id order, the unknown piece
UNKNOWN, the added tokens USER_DEFINED (matched in raw text, as ``tokenizers`` matches added tokens), the
precompiled map as the normaliser with a dummy prefix and whitespace collapsing (what XLNet's ``spiece.model``
sets). XLNet's own text preprocessing in transformers (``\\`\\``/``''`` -> ``"``, accents stripped) is not part of
a SentencePiece model, so ids agree with transformers on text without those characters, as with ``spiece.model``.

The derived files are written once per ``tokenizer.json`` content into ``fs.scratch_dir()`` and the folder is
returned; importers copy them into the params directory like any tokenizer files.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from ptm_jax.errors import CheckpointError

FILE = "tokenizer.json"


def _read(path: Path) -> dict[str, Any]:
    from ptm_jax.export.hf_files import read_json

    tj = read_json(path)
    if not isinstance(tj.get("model"), dict) or not isinstance(tj["model"].get("type"), str):
        raise CheckpointError(f"{path}: has no 'model' object with a 'type'; is this a Hugging Face tokenizer.json? "
                              "Re-save the tokenizer with transformers")
    return tj


def _steps(node: Any, kind: str) -> list[dict[str, Any]]:
    """The components of a normalizer / pre-tokenizer (a ``Sequence``'s members, or the one component)."""
    if not isinstance(node, dict):
        return []
    key = {"normalizer": "normalizers", "pre_tokenizer": "pretokenizers"}[kind]
    if node.get("type") == "Sequence":
        return [s for s in node.get(key) or [] if isinstance(s, dict)]
    return [node]


def _lower_case(tj: dict[str, Any]) -> bool:
    steps = _steps(tj.get("normalizer"), "normalizer")
    return any(s.get("type") == "Lowercase" or (s.get("type") == "BertNormalizer" and s.get("lowercase", True))
               for s in steps)


def _ordered(vocab: Any, path: Path, field: str) -> list[str]:
    """token -> id of ``field`` as tokens in id order; ids must be exactly 0..n-1."""
    if not isinstance(vocab, dict) or not vocab:
        raise CheckpointError(f"{path}: {field} is not a non-empty object of token -> id")
    tokens: list[str | None] = [None] * len(vocab)
    for tok, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(vocab) or tokens[i] is not None:
            raise CheckpointError(f"{path}: {field}[{tok!r:.40}] = {i!r:.20}: ids must be the integers "
                                  f"0..{len(vocab) - 1}, each once; fix the file or re-save the tokenizer")
        tokens[i] = tok
    return tokens  # type: ignore[return-value]


def _wordpiece(tj: dict[str, Any], path: Path, out: Path) -> dict[str, Any]:
    model = tj["model"]
    if model.get("continuing_subword_prefix", "##") != "##":
        raise CheckpointError(f"{path}: model.continuing_subword_prefix={model['continuing_subword_prefix']!r:.20}; "
                              "BERT's WordPiece continues words with '##'")
    tokens = _ordered(model.get("vocab"), path, "model.vocab")
    bad = [t for t in tokens if not t.strip() or "\n" in t or "\r" in t]
    if bad:
        raise CheckpointError(f"{path}: model.vocab has {len(bad)} token(s) a vocab.txt line cannot hold (blank or "
                              f"with a line break), e.g. {bad[0]!r:.40}")
    (out / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return {"kind": "wordpiece", "lower_case": _lower_case(tj), "files": ["vocab.txt"]}


def _byte_bpe(tj: dict[str, Any], path: Path, out: Path) -> dict[str, Any]:
    model = tj["model"]
    if not any(s.get("type") == "ByteLevel" for s in _steps(tj.get("pre_tokenizer"), "pre_tokenizer")):
        raise CheckpointError(f"{path}: a BPE model without a ByteLevel pre-tokenizer; only GPT-2's byte-level BPE "
                              "imports")
    if _steps(tj.get("normalizer"), "normalizer"):
        raise CheckpointError(f"{path}: has a normalizer ({tj['normalizer'].get('type')}); GPT-2's byte-level BPE "
                              "has none, so these ids could not be reproduced")
    tokens = _ordered(model.get("vocab"), path, "model.vocab")
    merges = model.get("merges")
    if not isinstance(merges, list):
        raise CheckpointError(f"{path}: model.merges is not a list")
    lines = ["#version: 0.2"]
    for n, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p and " " not in p
                                                                  for p in pair)):
            raise CheckpointError(f"{path}: model.merges[{n}] = {m!r:.60} is not a pair of tokens")
        lines.append(" ".join(pair))
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False),
                                    encoding="utf-8")
    (out / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"kind": "byte_bpe", "lower_case": False, "files": ["vocab.json", "merges.txt"]}


def _unigram(tj: dict[str, Any], path: Path, out: Path) -> dict[str, Any]:
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = tj["model"]
    vocab, unk = model.get("vocab"), model.get("unk_id")
    if not isinstance(vocab, list) or not vocab or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], (int, float))
            for v in vocab):
        raise CheckpointError(f"{path}: model.vocab of a Unigram model must be a list of [piece, score] pairs")
    if isinstance(unk, bool) or not isinstance(unk, int) or not 0 <= unk < len(vocab):
        raise CheckpointError(f"{path}: model.unk_id={unk!r:.20} is not an id of model.vocab")
    pre = _steps(tj.get("pre_tokenizer"), "pre_tokenizer")
    if not any(s.get("type") == "Metaspace" for s in pre):
        raise CheckpointError(f"{path}: a Unigram model without a Metaspace pre-tokenizer; only SentencePiece "
                              "conversions (XLNet's) import")
    added = {t["id"] for t in tj.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)}
    charsmap = [s for s in _steps(tj.get("normalizer"), "normalizer") if s.get("type") == "Precompiled"]
    m = pb.ModelProto()
    for i, (piece, score) in enumerate(vocab):
        p = m.pieces.add()
        p.piece, p.score = piece, float(score)
        p.type = pb.ModelProto.SentencePiece.UNKNOWN if i == unk else (
            pb.ModelProto.SentencePiece.USER_DEFINED if i in added else pb.ModelProto.SentencePiece.NORMAL)
    m.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    m.trainer_spec.vocab_size = len(vocab)
    m.trainer_spec.unk_id = unk
    m.trainer_spec.byte_fallback = bool(model.get("byte_fallback", False))
    m.trainer_spec.bos_id = m.trainer_spec.eos_id = m.trainer_spec.pad_id = -1
    spec = m.normalizer_spec
    spec.name = "nmt_nfkc" if charsmap else "identity"
    if charsmap:
        spec.precompiled_charsmap = base64.b64decode(charsmap[0].get("precompiled_charsmap") or "")
    spec.add_dummy_prefix = spec.remove_extra_whitespaces = spec.escape_whitespaces = True
    (out / "spiece.model").write_bytes(m.SerializeToString())
    return {"kind": "sentencepiece", "lower_case": _lower_case(tj), "files": ["spiece.model"]}


CONVERTERS = {"WordPiece": _wordpiece, "BPE": _byte_bpe, "Unigram": _unigram}


def classic_files(folder: Path, wanted: str) -> tuple[dict[str, Any], Path]:
    """The tokenizer of ``folder/tokenizer.json`` as our files: (tokenizer settings {kind, lower_case, files},
    the folder holding the files). ``wanted``: the model type the importing family needs (WordPiece, BPE,
    Unigram); another one is a CheckpointError naming it."""
    path = folder / FILE
    tj = _read(path)
    kind = tj["model"]["type"]
    if kind != wanted:
        raise CheckpointError(f"{path}: model.type={kind!r:.40}; this model needs a {wanted} tokenizer")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:20]
    from ptm_jax import fs

    out = fs.scratch_dir() / f"tokenizer-json-{digest}"
    done = out / "settings.json"
    if done.is_file():
        return json.loads(done.read_text()), out
    stage = out.with_name(out.name + f".tmp{id(tj)}")
    stage.mkdir(parents=True, exist_ok=True)
    settings = CONVERTERS[kind](tj, path, stage)
    (stage / "settings.json").write_text(json.dumps(settings))
    try:
        stage.rename(out)
    except OSError:  # another process made it first: same content
        import shutil

        shutil.rmtree(stage, ignore_errors=True)
    return settings, out


def has_tokenizer_json(folder: Path) -> bool:
    return (folder / FILE).is_file()
