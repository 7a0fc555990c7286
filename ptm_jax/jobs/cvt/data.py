"""The CVT job's sentences: the labelled CoNLL-2003 split checked for tags, and the unlabelled sentences of raw
text (``cvt.unlabelled``) cut into words as the CoNLL words are.

Raw text is read by the pretraining corpus reader (``data/corpus.read_documents``: Project Gutenberg's
header and footer cut, prose paragraphs split into sentences), then each sentence into words by
``objectives/feature_inputs.text_words`` (punctuation, brackets and quotes split off the words' ends, clitics
kept), the word splitting the feature heads use for raw text. WikiText's tokenized form is joined back first
(' @-@ ' -> '-', ' @,@ ' -> ',', ' @.@ ' -> '.', as CoNLL writes '60-year' and '1,000' as one word) and its
'= Heading =' lines are left out.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

from ptm_jax.errors import ConfigError, DataError

_WIKITEXT_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_HEADING = re.compile(r"^\s*=+ .* =+\s*$")


def check_labelled(sentences: Sequence, where: str) -> None:
    """A DataError when the labelled training sentences hold no entity tag (none read, or every word 'O')."""
    if not sentences:
        raise DataError(f"{where}: no labelled training sentences (eng.train of CoNLL-2003 is empty); "
                        "finetune.data_dir must name a CoNLL-2003 folder with tagged sentences")
    if all(t == "O" for s in sentences for t in s.tags):
        raise DataError(f"{where}: the {len(sentences)} labelled training sentences have no entity tags (every "
                        "word is tagged O); finetune.data_dir must name a CoNLL-2003 folder with NER tags")


def unlabelled_files(path: str, where: str = "cvt.unlabelled") -> list[Path]:
    """The text files ``cvt.unlabelled`` names: the file, or a folder's *.txt files (sorted; LICENSE* left out)."""
    if not path:
        raise ConfigError(f"{where} is empty: name a raw-text file or folder of unlabelled sentences (e.g. "
                          "../shared/data/corpus/wikitext-2-tokenized/valid.txt), or set cvt.enabled=false for the "
                          "supervised baseline")
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.txt") if not f.name.upper().startswith("LICENSE"))
        if not files:
            raise DataError(f"{where}={path!r}: the folder holds no .txt file of unlabelled text")
        return files
    if not p.is_file():
        raise DataError(f"{where}={path!r} does not exist; name a raw-text file or a folder of .txt files")
    return [p]


def sentence_words(sentence: str) -> list[str]:
    """One raw sentence -> its words (module doc)."""
    from ptm_jax.objectives.feature_inputs import text_words

    for tokenized, joined in _WIKITEXT_JOINS:
        sentence = sentence.replace(tokenized, joined)
    return text_words(sentence)


def read_unlabelled(path: str, limit: int = 0, seed: int = 0, where: str = "cvt.unlabelled") -> list[list[str]]:
    """The unlabelled sentences as lists of words: all of them, or a sample of ``limit`` seeded by ``seed`` in
    reading order. A DataError names the field when the text holds no sentence."""
    from ptm_jax.data.corpus import read_documents

    sentences: list[list[str]] = []
    for f in unlabelled_files(path, where):
        with open(f, "rb") as fh:
            head = fh.read(65536)
        if not head.strip():
            raise DataError(f"{where}={path!r}: {f.name} is empty; name a file of raw text (one or more sentences)")
        for doc in read_documents(f, "auto"):
            for s in doc:
                if _HEADING.match(s):
                    continue
                words = sentence_words(s)
                if words:
                    sentences.append(words)
    if not sentences:
        raise DataError(f"{where}={path!r} holds no sentence; name a file of raw text")
    if 0 < limit < len(sentences):
        keep = sorted(random.Random(seed).sample(range(len(sentences)), limit))
        sentences = [sentences[i] for i in keep]
    return sentences
