"""Subword tokenizers: BERT WordPiece (HF ``tokenizers``, Rust) and SentencePiece (C++), one interface.

WordPiece follows google-research/bert ``tokenization.py`` (BasicTokenizer + WordpieceTokenizer) rule for
rule. It is assembled from generic ``tokenizers`` components rather than ``BertNormalizer`` /
``BertPreTokenizer``, because an exhaustive check over every code point (tests/test_tokenizers.py) showed
those two differ from the reference in five ways: private-use characters (Co) are deleted, the Greek
final sigma is lower-cased to 'σ' where Python's ``str.lower`` gives 'ς', CJK Extension E-F
(U+2B820-U+2CEAF) is not isolated, and their punctuation and Mn tables predate Unicode 10. The composed
pipeline below matches the reference on every code point whose category is the same in both Unicode
versions (Python's ``unicodedata`` and the Rust regex tables).

Loading a run's tokenizer by its kind, or training it, is ``data/tokenizer_loading.py``.

Specials: [PAD]=0 for vocabularies trained here; [UNK], [CLS], [SEP], [MASK] are looked up by name. They are
plain vocabulary entries for WordPiece (text "[MASK]" splits as punctuation, as in the reference) and
user-defined symbols for SentencePiece.
"""
from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ptm_jax import digest
from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SP_SPECIAL_ALIASES = {"pad": ("[PAD]", "<pad>"), "cls": ("[CLS]", "<cls>"), "sep": ("[SEP]", "<sep>"),
                      "mask": ("[MASK]", "<mask>")}

# CJK Unified Ideograph blocks isolated by the reference (BasicTokenizer._is_chinese_char).
_CJK = ("\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}\\x{2B740}-\\x{2B81F}"
        "\\x{2B820}-\\x{2CEAF}\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}")
# Reference _is_punctuation: every non-alphanumeric printable ASCII character, and Unicode category P*.
_PUNCT = "\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}"
# Python's str.lower() Final_Sigma context: cased (case-ignorable)* Σ, not followed by (case-ignorable)* cased.
_FINAL_SIGMA = ("(?<=\\p{Cased}|\\p{Cased}\\p{Case_Ignorable}|\\p{Cased}\\p{Case_Ignorable}{2})"
                "Σ(?!\\p{Case_Ignorable}*\\p{Cased})")


def bert_normalizer(lower_case: bool):
    """Reference _clean_text, then (uncased) lower() + NFD + drop Mn; CJK/punctuation go to the pre-tokenizer."""
    from tokenizers import Regex, normalizers as N

    steps = [N.Replace(Regex("[[\\x00\\x{FFFD}\\p{Cc}\\p{Cf}]&&[^\\t\\n\\r]]"), ""),  # NUL, U+FFFD, controls
             N.Replace(Regex("[\\t\\n\\r\\p{Zs}]"), " ")]  # whitespace -> space
    if lower_case:
        steps += [N.Replace(Regex(_FINAL_SIGMA), "ς"), N.Lowercase(), N.NFD(), N.Replace(Regex("\\p{Mn}"), "")]
    return N.Sequence(steps)


def bert_pre_tokenizer():
    """Reference whitespace split, then CJK ideographs and punctuation each become their own word."""
    from tokenizers import Regex, pre_tokenizers as P

    return P.Sequence([P.WhitespaceSplit(), P.Split(Regex(f"[{_CJK}{_PUNCT}]"), "isolated")])


class Tokenizer:
    """Common interface; subclasses implement ``encode_batch``, ``tokenize``, ``decode`` and the vocab maps."""

    kind: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    def tokenize(self, text: str) -> list[str]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without any special token added."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def encode_batch_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(int32 ids of all texts concatenated, int64 length of each text): the array form of encode_batch."""
        ids = self.encode_batch(texts)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        return flat, lengths

    def decode(self, ids) -> str:
        raise NotImplementedError

    def token_to_id(self, tok: str) -> int:
        raise NotImplementedError

    def id_to_token(self, i: int) -> str:
        raise NotImplementedError

    def special_ids(self) -> list[int]:
        return sorted({self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id})

    def continuation_mask(self) -> np.ndarray:
        """bool [vocab_size]: True for pieces that continue a word (whole-word masking groups them)."""
        if getattr(self, "_continuation", None) is None:
            self._continuation = self._continuation_mask()
        return self._continuation

    def _continuation_mask(self) -> np.ndarray:
        raise NotImplementedError

    def tf_encode(self, texts):
        """1-D tf.string -> int32 RaggedTensor [N, None]; one ``tf.py_function`` call per batch.

        Bytes that are not UTF-8 become U+FFFD, which WordPiece drops as the reference does.
        """
        import tensorflow as tf

        def _encode(batch):
            strs = [b.decode("utf-8", errors="replace") for b in batch.numpy().tolist()]
            return self.encode_batch_flat(strs)

        texts = tf.convert_to_tensor(texts, dtype=tf.string)
        if texts.shape.rank is not None and texts.shape.rank != 1:
            raise ValueError(f"tf_encode takes a 1-D batch of strings, got shape {texts.shape}")
        flat, lengths = tf.py_function(_encode, [texts], [tf.int32, tf.int64])
        flat.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(flat, lengths, validate=False)

    def save(self, directory) -> list[Path]:
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError


# ----------------------------------------------------------------------------------------------------
# WordPiece


def read_vocab(path: Path) -> list[str]:
    """Tokens of a BERT vocab.txt in id order (line n = id n-1); errors name the file and line."""
    if not path.is_file():
        raise DataError(f"{path}: vocabulary file not found; set tokenizer.vocab_file to a BERT vocab.txt "
                        "or leave it empty to train one on the corpus")
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise DataError(f"{path}: is binary, not a one-token-per-line vocab.txt (a SentencePiece .model? "
                        "then set tokenizer.kind=sentencepiece_unigram or sentencepiece_bpe)")
    lines = raw.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise DataError(f"{path}: vocabulary file is empty; expected one token per line")
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        try:
            tok = line.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}:{lineno}: not UTF-8 ({e.reason} at byte {e.start} of the line); "
                            "re-encode the file, e.g. iconv -f latin1 -t utf-8") from None
        if lineno == 1:
            tok = tok.lstrip("\ufeff")
        if not tok.strip():
            raise DataError(f"{path}:{lineno}: empty token line; remove it (ids are line numbers - 1)")
        if tok in seen:
            raise DataError(f"{path}:{lineno}: duplicate token {tok!r} (first on line {seen[tok]}); "
                            "every token must appear once")
        seen[tok] = lineno
        tokens.append(tok)
    return tokens


class RustTokenizer(Tokenizer):
    """The methods every tokenizer built on the Rust ``tokenizers`` library shares: ``self._hf`` (the pipeline),
    ``self._encode_many`` (its batch encoder), ``self._vocab`` (token -> id) and ``self._tokens`` (id -> token)."""

    def tokenize(self, text: str) -> list[str]:
        return self._hf.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._encode_many(list(texts), add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_to_id(self, tok: str) -> int:
        return self._vocab.get(tok, self.unk_id)

    def id_to_token(self, i: int) -> str:
        return self._tokens[int(i)]


class WordPieceTokenizer(RustTokenizer):
    """BERT WordPiece from a vocab.txt (google-research/bert tokenization.py FullTokenizer)."""

    def __init__(self, vocab_file, lower_case: bool = True, max_input_chars_per_word: int = 200):
        from tokenizers import Tokenizer as HFTokenizer, decoders, models

        self.vocab_file = Path(vocab_file)
        self.lower_case = bool(lower_case)
        self.max_input_chars_per_word = int(max_input_chars_per_word)
        self._tokens = read_vocab(self.vocab_file)
        self._vocab = {t: i for i, t in enumerate(self._tokens)}
        missing = [s for s in SPECIALS if s not in self._vocab]
        if missing:
            raise DataError(f"{self.vocab_file}: lacks the special token(s) {', '.join(missing)}; a BERT "
                            "vocab.txt has [PAD], [UNK], [CLS], [SEP] and [MASK]")
        self.kind = "wordpiece"
        self.vocab_size = len(self._tokens)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (self._vocab[s] for s in SPECIALS)
        model = models.WordPiece(self._vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                 max_input_chars_per_word=self.max_input_chars_per_word)
        self._hf = HFTokenizer(model)
        self._hf.normalizer = bert_normalizer(self.lower_case)
        self._hf.pre_tokenizer = bert_pre_tokenizer()
        self._hf.decoder = decoders.WordPiece(prefix="##", cleanup=True)
        self._encode_many = getattr(self._hf, "encode_batch_fast", self._hf.encode_batch)

    def _continuation_mask(self) -> np.ndarray:
        return np.array([t.startswith("##") for t in self._tokens], dtype=bool)

    def save(self, directory) -> list[Path]:
        out = Path(directory) / "vocab.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(out, ("\n".join(self._tokens) + "\n").encode("utf-8"))
        return [out]

    def fingerprint(self) -> str:
        return digest.sha256("wordpiece-v1", "\n".join(self._tokens), str(self.lower_case),
                             str(self.max_input_chars_per_word))


# ----------------------------------------------------------------------------------------------------
# SentencePiece


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (Kudo & Richardson 2018): unigram (XLNet, ALBERT) or BPE."""

    def __init__(self, model_file):
        import sentencepiece as spm

        self.model_file = Path(model_file)
        if not self.model_file.is_file():
            raise DataError(f"{self.model_file}: SentencePiece model not found; set tokenizer.vocab_file to a "
                            ".model file or leave it empty to train one on the corpus")
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(self.model_file))
        except (OSError, RuntimeError) as e:
            raise DataError(f"{self.model_file}: not a valid SentencePiece model ({e}); a BERT vocab.txt "
                            "needs tokenizer.kind=wordpiece") from None
        self._proto = self._sp.serialized_model_proto()
        self.kind = f"sentencepiece_{self._model_type()}"
        self.vocab_size = int(self._sp.get_piece_size())
        self.unk_id = int(self._sp.unk_id())
        for i in range(self.vocab_size):  # a corrupted file can hold pieces that are not UTF-8
            try:
                self._sp.id_to_piece(i)
            except UnicodeDecodeError as e:
                raise DataError(f"{self.model_file}: piece {i} is not valid UTF-8 ({e.reason}); the model file is "
                                "corrupted: retrain it or restore the original") from None
        for name, aliases in SP_SPECIAL_ALIASES.items():
            found = [i for i in map(self._sp.piece_to_id, aliases) if i != self.unk_id]
            if not found:
                raise DataError(f"{self.model_file}: has no {name} piece (looked for {', '.join(aliases)}); "
                                "train with user_defined_symbols=[CLS],[SEP],[MASK] and pad_id=0")
            setattr(self, f"{name}_id", int(found[0]))

    def _model_type(self) -> str:
        try:
            from sentencepiece import sentencepiece_model_pb2 as pb

            m = pb.ModelProto()
            m.ParseFromString(self._proto)
            return {1: "unigram", 2: "bpe", 3: "word", 4: "char"}.get(m.trainer_spec.model_type, "unigram")
        except ImportError:  # protobuf missing: the kind is only descriptive
            return "unigram"

    def tokenize(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(list(texts), out_type=int)

    def decode(self, ids) -> str:
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, tok: str) -> int:
        return int(self._sp.piece_to_id(tok))

    def id_to_token(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    def _continuation_mask(self) -> np.ndarray:
        sp = self._sp
        ids = range(self.vocab_size)
        starts = np.array([sp.id_to_piece(i).startswith("\u2581") for i in ids], dtype=bool)
        special = np.array([sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) for i in ids], dtype=bool)
        special[self.special_ids()] = True
        return ~starts & ~special

    def save(self, directory) -> list[Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        model, vocab = d / "spm.model", d / "spm.vocab"
        _atomic_write(model, self._proto)
        rows = (f"{self._sp.id_to_piece(i)}\t{self._sp.get_score(i):g}" for i in range(self.vocab_size))
        _atomic_write(vocab, ("\n".join(rows) + "\n").encode("utf-8"))
        return [model, vocab]

    def fingerprint(self) -> str:
        return digest.sha256("sentencepiece-v1", self._proto)


# ----------------------------------------------------------------------------------------------------
# Training and loading


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _nonempty(texts: Iterable[str]) -> Iterable[str]:
    return (t for t in texts if t and not t.isspace())


def train_wordpiece(texts: Iterable[str], vocab_size: int, out_dir, lower_case: bool = True,
                    min_frequency: int = 2, limit_alphabet: int = 1000) -> WordPieceTokenizer:
    """Trains a WordPiece vocabulary and writes ``out_dir/vocab.txt``, specials first: Hugging Face's
    WordPieceTrainer algorithm with every order defined (ptm_jax/data/wordpiece_training.py), so the same texts
    give a byte-identical vocab.txt in any run and on any process."""
    from ptm_jax.data.wordpiece_training import count_words, train_vocab

    if vocab_size <= len(SPECIALS):
        raise ConfigError(f"tokenizer.vocab_size={vocab_size} is too small (must exceed {len(SPECIALS)})")
    words = count_words(_nonempty(texts), bert_normalizer(lower_case), bert_pre_tokenizer())
    tokens = train_vocab(words, vocab_size, SPECIALS, min_frequency=min_frequency, limit_alphabet=limit_alphabet)
    if len(tokens) <= len(SPECIALS):
        raise DataError("WordPiece training saw no text: the corpus is empty")
    assert tuple(tokens[: len(SPECIALS)]) == SPECIALS, tokens[:8]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "vocab.txt", ("\n".join(tokens) + "\n").encode("utf-8"))
    return WordPieceTokenizer(out / "vocab.txt", lower_case=lower_case)


SPM_THREADS = 8
"""SentencePiece trainer threads: fixed, because the unigram EM's pieces depend on the thread count (1, 2 and 4
threads gave three different models of the same text), so os.cpu_count() would differ between machines."""


def sentence_sample(texts: Iterable[str], size: int, seed: int) -> list[str]:
    """At most ``size`` sentences of the stream, a uniform sample (reservoir sampling, Vitter's Algorithm R)
    drawn with a seeded generator and kept in corpus order. SentencePiece's own sample
    (``shuffle_input_sentence``) differs from one process to the next whatever ``set_random_generator_seed``
    says (two runs on tiny-shakespeare with 6000 sentences: 198 of 500 pieces differed), so the vocabulary
    of a run would not follow from its corpus, config and seed."""
    rng = np.random.default_rng(seed)
    kept: list[tuple[int, str]] = []
    for i, text in enumerate(texts):
        if i < size:
            kept.append((i, text))
        else:
            j = int(rng.integers(0, i + 1))
            if j < size:
                kept[j] = (i, text)
    kept.sort()
    return [t for _, t in kept]


def train_sentencepiece(texts: Iterable[str], vocab_size: int, out_dir, model_type: str = "unigram", *,
                        lower_case: bool = False, input_sentence_size: int = 1_000_000,
                        character_coverage: float = 0.9995, seed: int = 0) -> SentencePieceTokenizer:
    """Trains ``out_dir/spm.model`` from a streamed sentence iterator (the trainer samples at most
    ``input_sentence_size`` sentences). Ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4; no BOS/EOS.
    ``lower_case`` selects SentencePiece's case-folding normalisation (nmt_nfkc_cf)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    if model_type not in ("unigram", "bpe"):
        raise ConfigError(f"SentencePiece model_type must be 'unigram' or 'bpe', got {model_type!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / f".spm-tmp-{os.getpid()}"
    failures: list[BaseException] = []

    def sentences() -> Iterable[str]:  # keeps an error of the corpus reader for re-raising as is
        try:
            yield from sentence_sample(_nonempty(texts), input_sentence_size, seed)
        except BaseException as e:
            failures.append(e)
            raise

    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences()), model_prefix=str(prefix), vocab_size=vocab_size,
            model_type=model_type, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]",
            unk_piece="[UNK]", user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
            input_sentence_size=0, shuffle_input_sentence=False,
            character_coverage=character_coverage, hard_vocab_limit=False,
            normalization_rule_name="nmt_nfkc_cf" if lower_case else "nmt_nfkc",
            num_threads=SPM_THREADS, minloglevel=2)
    except RuntimeError as e:
        if failures:
            raise failures[0] from None
        raise DataError(f"SentencePiece training on the corpus failed: {e}") from None
    model = sp_pb2.ModelProto()
    model.ParseFromString(Path(f"{prefix}.model").read_bytes())
    model.trainer_spec.model_prefix = ""  # the temporary path (with a process id) would differ in every run
    _atomic_write(out / "spm.model", model.SerializeToString(deterministic=True))
    os.remove(f"{prefix}.model")
    os.replace(f"{prefix}.vocab", out / "spm.vocab")
    return SentencePieceTokenizer(out / "spm.model")
