"""ELMo's character ids of a word (allenai/bilm-tf ``bilm/data.py`` ``UnicodeCharsVocabulary`` and ``Batcher``).

A token is ``max_characters_per_token`` (50) ids: begin-of-word, the word's UTF-8 bytes (at most 48: longer
words are truncated, as bilm-tf does), end-of-word, then padding. Bytes are 0..255; the specials are
bos 256, eos 257, bow 258, eow 259, pad 260. Sentence boundaries are the one-character "words" [bow, bos, eow]
(``<S>``) and [bow, eos, eow] (``</S>``). Every id is then shifted by 1 so that 0 marks a padding token (all
50 ids 0), bilm-tf's ``Batcher`` ("add one so that 0 is the mask value") and AllenNLP's ``ELMoCharacterMapper``.
"""
from __future__ import annotations

import numpy as np

from ptm_jax.errors import DataError

BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
BOS_WORD, EOS_WORD = "<S>", "</S>"


def _boundary(char: int, width: int) -> np.ndarray:
    code = np.full(width, PAD_CHAR, np.int32)
    code[:3] = (BOW_CHAR, char, EOW_CHAR)
    return code + 1


def word_char_ids(word: str | bytes, width: int = 50, *, where: str = "") -> np.ndarray:
    """[width] int32 character ids of one word (shifted by 1). ``<S>``/``</S>`` are the sentence boundaries.
    An empty word or one whose bytes are not UTF-8 is a DataError naming ``where``."""
    if word == BOS_WORD:
        return _boundary(BOS_CHAR, width)
    if word == EOS_WORD:
        return _boundary(EOS_CHAR, width)
    if isinstance(word, bytes):
        try:
            word = word.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{where or 'a word'}: bytes {word[max(e.start - 8, 0):e.end + 8]!r} are not UTF-8 "
                            f"(byte {e.start}); ELMo reads UTF-8 text: re-encode the file") from None
    if not word:
        raise DataError(f"{where or 'a word'}: an empty word has no characters; split text with str.split()")
    data = word.encode("utf-8")[:width - 2]   # bilm-tf: word.encode('utf-8', 'ignore')[:max_word_length - 2]
    code = np.full(width, PAD_CHAR, np.int32)
    code[0] = BOW_CHAR
    code[1:1 + len(data)] = np.frombuffer(data, np.uint8)
    code[1 + len(data)] = EOW_CHAR
    return code + 1


def sentence_char_ids(words: list[str], width: int = 50, *, where: str = "") -> np.ndarray:
    """[len + 2, width]: ``<S>`` words ``</S>`` (bilm-tf's Batcher adds the boundaries)."""
    if not words:
        raise DataError(f"{where or 'a sentence'} is empty; ELMo features need at least one word per sentence "
                        "(drop empty lines before asking for features)")
    return np.stack([word_char_ids(BOS_WORD, width)]
                    + [word_char_ids(w, width, where=f"{where} word {i + 1}") for i, w in enumerate(words)]
                    + [word_char_ids(EOS_WORD, width)])


def vocab_char_table(tokenizer, width: int = 50) -> np.ndarray:
    """[vocab_size, width] character ids of every word of a word vocabulary: the token cache stores word ids,
    the char-CNN reads this table (bilm-tf's ``UnicodeCharsVocabulary`` precomputes it the same way). ``<pad>``
    is the all-zero mask row and ``<eos>`` (a document's end in the stream) is ``</S>``."""
    table = np.zeros((tokenizer.vocab_size, width), np.int32)
    for i in range(tokenizer.vocab_size):
        if i == tokenizer.pad_id:
            continue
        word = EOS_WORD if i == tokenizer.eos_id else tokenizer.id_to_token(i)
        table[i] = word_char_ids(word, width, where=f"vocabulary entry {i}")
    return table


def build_char_table(cfg, corpus, directory) -> np.ndarray:
    """``Pretraining.artifacts['char_ids']``: the word vocabulary's character table (:func:`vocab_char_table`), built
    from the corpus's tokenizer after the token cache exists. Every process computes it (a pass over the
    vocabulary, no file), so no barrier is needed; ``directory`` is unused."""
    return vocab_char_table(corpus.tokenizer, cfg.model.max_characters_per_token)


def read_sentences(path, lower_case: bool = False) -> list[list[str]]:
    """One sentence per line of a UTF-8 file, words split on whitespace; an empty line or bytes that are not
    UTF-8 are a DataError naming the file and line."""
    out = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n}: byte {e.start} ({raw[e.start:e.start + 1]!r}) is not UTF-8; ELMo "
                                "reads UTF-8 text: re-encode the file") from None
            words = line.lower().split() if lower_case else line.split()
            if not words:
                raise DataError(f"{path}:{n}: empty line; give one sentence per line (remove empty lines)")
            out.append(words)
    return out
