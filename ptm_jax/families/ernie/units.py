"""ERNIE 1.0 knowledge units: per-token phrase/entity annotations aligned with the token cache.

ERNIE (Sun et al. 2019, Sec. 3.2) masks whole *units*: basic units (a token; the WordPiece pre-tokenizer makes
every CJK ideograph its own word, so a Chinese character is a basic unit), phrases and entities. Units are found
once per corpus (the ``Pretraining.artifacts`` entry "units", built beside the token cache by
``train/stages.py:prepare_corpus``) from four sources, applied in this order of precedence (a later source only
claims tokens no earlier unit holds):

* ``spans``: a span file, ``DOC<TAB>START<TAB>END<TAB>KIND`` per line, token offsets [START, END) into document
  DOC of the token cache.
* ``lexicon``: a file of phrases and entities, ``KIND<TAB>TEXT`` per line. Each entry is tokenized with the run's
  tokenizer; entries are matched greedily, longest first, at word starts of each sentence, and a match must end at
  a word end (so a unit always spans every piece of its words).
* ``jieba``: Chinese words of two or more characters, found by jieba's dictionary segmentation over the runs of
  one-character CJK tokens; entities where the dictionary tags them as names of persons, places, organisations or
  other proper nouns, phrases otherwise (``chinese_units.py``).
* ``pmi``: two-word phrases found in the training documents with word2phrase's rule (word2vec's
  ``word2phrase.c``): score(a, b) = (count(ab) - min_count) / (count(a) count(b)) * N over words (a word = its
  WordPiece pieces), N the number of words; bigrams never cross a sentence; a word or bigram rarer than
  ``min_count`` never scores; reading left to right, b joins a when score > threshold, and the word after a
  joined pair starts afresh (word2phrase sets pb = 0). Punctuation words never join (:func:`punctuation_ids`).

Each token gets one code (uint8): bits 0-1 the kind of unit it is in (0 none, 1 phrase, 2 entity), bit 2 set on
the first token of a unit. At masking level ``l`` (0 basic, 1 phrase, 2 entity) a token *continues* the unit of
the token before it when its kind is in [1, l] and it is not a unit start (:func:`continuation`).
"""
from __future__ import annotations

import collections
import hashlib
import io
import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import DataError

NONE, PHRASE, ENTITY = 0, 1, 2
START = 4
KINDS = {"phrase": PHRASE, "entity": ENTITY}
KIND_NAMES = {PHRASE: "phrase", ENTITY: "entity"}
FORMAT_VERSION = 1


def continuation(codes: np.ndarray, level: int) -> np.ndarray:
    """bool per token: True where the token continues the unit of the previous token at masking ``level``."""
    kind = codes & 3
    return (kind >= 1) & (kind <= level) & ((codes & START) == 0)


def _mark(codes: np.ndarray, start: int, end: int, kind: int) -> None:
    codes[start:end] = kind
    codes[start] = kind | START


def _read(path: str, what: str, field: str) -> bytes:
    if not fs.exists(path):
        raise DataError(f"{what} {path} does not exist; set {field} to an existing file")
    return fs.read_bytes(path)


def _kind(value: str, where: str) -> int:
    if value not in KINDS:
        raise DataError(f"{where}: unit kind {value!r} is not one of {', '.join(KINDS)}; write 'phrase' or "
                        "'entity'")
    return KINDS[value]


# -- lexicon -------------------------------------------------------------------------------------------------
def read_lexicon(path: str, tokenizer: Any) -> dict[tuple[int, ...], int]:
    """Token-id sequence -> kind for every entry of a lexicon file (entity wins over phrase for equal text).

    An entry holding a word outside the vocabulary ([UNK]) is left out: it would match any unknown word."""
    lexicon: dict[tuple[int, ...], int] = {}
    unk = getattr(tokenizer, "unk_id", None)
    text = _read(path, "lexicon file", "data.lexicon_file").decode("utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"lexicon file {path}, line {n}"
        fields = line.split("\t")
        if len(fields) != 2 or not fields[1].strip():
            raise DataError(f"{where}: expected 'KIND<TAB>TEXT' (2 tab-separated fields, text non-empty), got "
                            f"{len(fields)} field(s): {line[:80]!r}; fix or delete the line")
        kind = _kind(fields[0].strip(), where)
        ids = tuple(int(i) for i in tokenizer.encode(fields[1].strip()))
        if not ids:
            raise DataError(f"{where}: {fields[1].strip()[:80]!r} tokenizes to no tokens; delete the line")
        if unk is None or unk not in ids:
            lexicon[ids] = max(kind, lexicon.get(ids, NONE))
    return lexicon


class LexiconMatcher:
    """Greedy longest-first matching of lexicon entries over the word sequence of a sentence."""

    def __init__(self, lexicon: dict[tuple[int, ...], int]):
        self.lexicon = lexicon
        by_first: dict[int, set[int]] = collections.defaultdict(set)
        for ids in lexicon:
            by_first[ids[0]].add(len(ids))
        self.lengths = {t: sorted(ls, reverse=True) for t, ls in by_first.items()}

    def match(self, tokens: np.ndarray, word_start: np.ndarray) -> list[tuple[int, int, int]]:
        """(start, end, kind) of the matches in one sentence; matches start at a word start and end at a word end."""
        out = []
        n = len(tokens)
        toks = tokens.tolist()
        starts = word_start.tolist() + [True]
        i = 0
        while i < n:
            hit = None
            if starts[i]:
                for length in self.lengths.get(toks[i], ()):
                    end = i + length
                    if end <= n and starts[end] and tuple(toks[i:end]) in self.lexicon:
                        hit = (i, end, self.lexicon[tuple(toks[i:end])])
                        break
            if hit:
                out.append(hit)
                i = hit[1]
            else:
                i += 1
        return out


# -- word2phrase PMI phrases -----------------------------------------------------------------------------------
def _words(tokens: np.ndarray, word_start: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The words of a sentence (tuples of piece ids) and each word's first token offset (plus the end)."""
    bounds = np.append(np.flatnonzero(word_start), len(tokens))
    toks = tokens.tolist()
    return [tuple(toks[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())], bounds


def punctuation_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the vocabulary entries without a letter or digit. word2phrase reads whitespace-separated words, to
    which punctuation sticks; the WordPiece pre-tokenizer splits punctuation off as words of its own, and those
    never join a phrase here (else "’ s" would be the commonest phrase of English prose)."""
    if tokenizer is None or not hasattr(tokenizer, "id_to_token"):
        return frozenset()
    out = set()
    for i in range(tokenizer.vocab_size):
        text = tokenizer.id_to_token(i) or ""
        if text.startswith("[") and text.endswith("]"):
            continue   # specials
        if not any(ch.isalnum() for ch in text):
            out.add(i)
    return frozenset(out)


class PhraseScorer:
    """word2phrase.c's counts and score over word sequences (sentences of word tuples)."""

    def __init__(self, sentences: Iterable[list[tuple[int, ...]]], min_count: int, threshold: float,
                 never: frozenset[int] = frozenset()):
        self.never = never
        """First pieces of the words that never join (punctuation: see :func:`punctuation_ids`)."""
        self.unigrams: collections.Counter = collections.Counter()
        self.bigrams: collections.Counter = collections.Counter()
        for words in sentences:
            self.unigrams.update(words)
            self.bigrams.update(zip(words[:-1], words[1:]))
        self.train_words = sum(self.unigrams.values())
        self.min_count, self.threshold = min_count, threshold

    def score(self, a: tuple[int, ...], b: tuple[int, ...], pa: int | None = None) -> float:
        pa = self.unigrams.get(a, 0) if pa is None else pa
        pb, pab = self.unigrams.get(b, 0), self.bigrams.get((a, b), 0)
        if pa < self.min_count or pb < self.min_count or pab < self.min_count:
            return 0.0
        return (pab - self.min_count) / pa / pb * self.train_words

    def joins(self, words: list[tuple[int, ...]]) -> list[int]:
        """Indices i of the words that join word i-1 into a phrase, reading left to right."""
        out = []
        pa = 0
        for i, w in enumerate(words):
            pb = self.unigrams.get(w, 0)
            if i and w[0] not in self.never and words[i - 1][0] not in self.never \
                    and self.score(words[i - 1], w, pa) > self.threshold:
                out.append(i)
                pb = 0   # the word after a joined pair starts afresh (word2phrase.c)
            pa = pb
        return out


# -- span file -------------------------------------------------------------------------------------------------
def read_spans(path: str, doc_lengths: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(doc, start, end, kind) of every line of a span file, checked against the token cache's documents."""
    spans = []
    taken: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for n, line in enumerate(_read(path, "span file", "data.span_file").decode("utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"span file {path}, line {n}"
        fields = line.split("\t")
        if len(fields) != 4:
            raise DataError(f"{where}: expected 'DOC<TAB>START<TAB>END<TAB>KIND' (4 tab-separated fields), got "
                            f"{len(fields)}: {line[:80]!r}; fix or delete the line")
        try:
            doc, start, end = (int(f) for f in fields[:3])
        except ValueError:
            raise DataError(f"{where}: DOC, START and END must be integers, got {fields[:3]}; fix the line") from None
        kind = _kind(fields[3].strip(), where)
        if not 0 <= doc < len(doc_lengths):
            raise DataError(f"{where}: document {doc} is out of range: the token cache has {len(doc_lengths)} "
                            "documents (0-based); the span file was made for another corpus or cache")
        if not 0 <= start < end <= doc_lengths[doc]:
            raise DataError(f"{where}: span [{start}, {end}) is out of range for document {doc} of "
                            f"{int(doc_lengths[doc])} tokens; spans need 0 <= START < END <= tokens of the document "
                            "(offsets of the run's tokenizer)")
        for s, e, m in taken[doc]:
            if start < e and s < end:
                raise DataError(f"{where}: span [{start}, {end}) of document {doc} overlaps span [{s}, {e}) of "
                                f"line {m}; units may not overlap: merge or drop one")
        taken[doc].append((start, end, n))
        spans.append((doc, start, end, kind))
    return spans


# -- the artifact ----------------------------------------------------------------------------------------------
def annotate(cache: Any, train_docs: np.ndarray, is_continuation: np.ndarray, dcfg: Any, tokenizer: Any,
             count_source: Any = None) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(codes uint8 over the cache's tokens in document order, document token offsets, unit counts by source).

    PMI phrases are counted over documents ``train_docs`` of ``count_source`` (default: ``cache``)."""
    num_docs = cache.num_docs
    doc_len = np.array([int(cache.doc_sentence_lengths(d).sum()) for d in range(num_docs)], np.int64)
    offsets = np.concatenate([[0], np.cumsum(doc_len)])
    codes = np.zeros(int(offsets[-1]), np.uint8)
    taken = np.zeros(len(codes), bool)
    counts = {"spans": 0, "lexicon": 0, "jieba": 0, "pmi": 0}

    def claim(lo: int, hi: int, kind: int, source: str) -> None:
        if not taken[lo:hi].any():
            _mark(codes, lo, hi, kind)
            taken[lo:hi] = True
            counts[source] += 1

    def sentences(d: int, source: Any = cache):
        base = offsets[d] if source is cache else 0
        tokens = np.asarray(source.doc_tokens(d))
        for sent in np.split(tokens, np.cumsum(source.doc_sentence_lengths(d))[:-1]):
            start = ~is_continuation[sent]
            start[0] = True
            yield base, sent, start
            base += len(sent)

    sources = dcfg.sources()
    if "spans" in sources:
        for doc, s, e, kind in read_spans(dcfg.span_file, doc_len):
            claim(offsets[doc] + s, offsets[doc] + e, kind, "spans")
    if "lexicon" in sources:
        matcher = LexiconMatcher(read_lexicon(dcfg.lexicon_file, tokenizer))
        for d in range(num_docs):
            for base, sent, start in sentences(d):
                for s, e, kind in matcher.match(sent, start):
                    claim(base + s, base + e, kind, "lexicon")
    if "jieba" in sources:  # Chinese words, phrases and entities from jieba's dictionary (chinese_units.py)
        from ptm_jax.families.ernie.chinese_units import Segmenter, cjk_token_chars, segment_units

        seg, chars = Segmenter(), cjk_token_chars(tokenizer)
        for d in range(num_docs):
            for base, sent, _ in sentences(d):
                for s, e, kind in segment_units(sent, chars, seg):
                    claim(base + s, base + e, KINDS[kind], "jieba")
    if "pmi" in sources:
        counted = cache if count_source is None else count_source
        scorer = PhraseScorer((_words(sent, start)[0] for d in train_docs
                               for _, sent, start in sentences(int(d), counted)),
                              dcfg.phrase_min_count, dcfg.phrase_threshold, punctuation_ids(tokenizer))
        for d in range(num_docs):
            for base, sent, start in sentences(d):
                words, bounds = _words(sent, start)
                for i in scorer.joins(words):
                    claim(base + bounds[i - 1], base + bounds[i + 1], PHRASE, "pmi")
    return codes, offsets, counts


def fingerprint(dcfg: Any, cache: Any, tokenizer: Any) -> str:
    """Hash of everything the annotations depend on: the sources' settings and files, the cache, the tokenizer."""
    parts = {"version": FORMAT_VERSION, "sources": dcfg.sources(), "min_count": dcfg.phrase_min_count,
             "threshold": dcfg.phrase_threshold, "cache": getattr(cache, "meta", {}).get("fingerprint"),
             "docs": cache.num_docs, "tokens": int(getattr(cache, "num_tokens", 0)),
             "vocab": tokenizer.vocab_size, "kind": tokenizer.kind}
    for src, field in (("lexicon", "lexicon_file"), ("spans", "span_file")):
        if src in dcfg.sources():
            parts[field] = hashlib.sha256(_read(getattr(dcfg, field), f"{src} file", f"data.{field}")).hexdigest()
    if "jieba" in dcfg.sources():
        from ptm_jax.families.ernie.chinese_units import Segmenter

        seg = Segmenter()
        parts["jieba"] = [seg.version, seg.dictionary_sha256]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class UnitSource:
    """The unit codes as a ``DocumentSource`` shaped exactly like the token cache (same documents, sentences)."""

    def __init__(self, codes: np.ndarray, offsets: np.ndarray, cache: Any):
        self.codes, self.offsets, self.cache = codes, offsets, cache
        self.num_docs = cache.num_docs

    def doc_sentence_lengths(self, d: int) -> np.ndarray:
        return self.cache.doc_sentence_lengths(d)

    def doc_tokens(self, d: int, first_sentence: int = 0, last_sentence: int | None = None) -> np.ndarray:
        lengths = self.cache.doc_sentence_lengths(d)
        last = len(lengths) if last_sentence is None else last_sentence
        lo = int(self.offsets[d]) + int(lengths[:first_sentence].sum())
        hi = int(self.offsets[d]) + int(lengths[:last].sum())
        return self.codes[lo:hi].astype(np.int32)


def in_memory_units(cfg: Any, corpus: Any) -> tuple[UnitSource, UnitSource | None]:
    """Unit sources of the train and eval documents of a corpus built without ``prepare_corpus`` (no token
    cache, so no artifact): annotated here, PMI phrases counted over the training documents."""
    cont = corpus.special.continuation
    if cont is None:
        cont = np.zeros(corpus.special.vocab_size, bool)
    tok = getattr(corpus, "tokenizer", None)
    out = []
    for source in (corpus.train, corpus.eval):
        if source is None:
            out.append(None)
            continue
        codes, offsets, _ = annotate(source, np.arange(corpus.train.num_docs), cont, cfg.data, tok,
                                     count_source=corpus.train)
        out.append(UnitSource(codes, offsets, source))
    return out[0], out[1]


def build_units(cfg: Any, corpus: Any, directory: Any) -> UnitSource:
    """``Pretraining.artifacts["units"]``: the unit codes of the whole token cache, computed once by process 0 into
    ``<cache_dir>/artifacts/units`` (rebuilt when the fingerprint changes), loaded by every process."""
    import jax

    from ptm_jax.parallel.distributed import barrier

    tok, cache = corpus.tokenizer, corpus.cache
    key = fingerprint(cfg.data, cache, tok)
    meta_path, codes_path = directory / "units.json", directory / "units.npz"

    def current() -> bool:
        return fs.exists(meta_path) and json.loads(fs.read_text(meta_path)).get("fingerprint") == key

    if jax.process_index() == 0 and not current():
        codes, offsets, counts = annotate(cache, np.asarray(corpus.train.doc_indices), tok.continuation_mask(),
                                          cfg.data, tok)
        buf = io.BytesIO()
        np.savez(buf, codes=codes, offsets=offsets)
        fs.makedirs(directory)
        fs.write_bytes_atomic(codes_path, buf.getvalue())
        fs.write_text_atomic(meta_path, json.dumps({"fingerprint": key, "units": counts,
                                                    "tokens": int(len(codes))}, indent=2))
    barrier("ernie_units")
    with np.load(io.BytesIO(fs.read_bytes(codes_path))) as z:
        return UnitSource(z["codes"], z["offsets"], cache)
