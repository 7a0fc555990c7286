"""The static word vectors of a MODEL argument (a run, params directory or vector file) and their export to files.

Every family with the ``Inspection.word_vectors`` (or ``subword_vectors``) hook has them; `ptm export --format
text_vectors|binary_vectors` writes them in word2vec.c's formats.

MODEL is a run directory or params directory (``export/params.load_params``; the family's ``word_vectors`` hook
gives the matrix and the run's word vocabulary its words) or a vector file (word2vec.c's text or binary format,
or GloVe's headerless text, ``export/vector_files.py``), so vectors trained by other tools are queried and scored
the same way (`ptm neighbors | analogy | eval-vectors | vector-map`). The queries and scores are
``evaluate/word_vectors.py``.
"""
from __future__ import annotations

from pathlib import Path

from ptm_jax.errors import ConfigError
from ptm_jax.evaluate.word_vectors import WordVectors


def load_word_vectors(model: str) -> WordVectors:
    """The word vectors of MODEL (module doc)."""
    p = Path(model)
    if p.is_file() and p.suffix != ".npz":
        from ptm_jax.export.vector_files import read_vectors

        words, vectors = read_vectors(p)
        return WordVectors(words, vectors, source=str(p))
    from ptm_jax.export.params import load_params, load_tokenizer
    from ptm_jax.families import registry

    params, cfg, info, tok_dir = load_params(model)
    fam = registry.get(cfg.family)
    if fam.inspection.word_vectors is None and fam.inspection.subword_vectors is None:
        able = sorted(n for n, f in registry.families().items() if {"word_vectors", "node_vectors"} & f.capabilities)
        raise ConfigError(f"{model}: model.family={cfg.family!r} exports no static word vectors; the families "
                          f"that do: {', '.join(able)} (or pass a text vector file)")
    tokenizer = load_tokenizer(info, tok_dir)
    if fam.inspection.subword_vectors is None:
        return WordVectors.from_vocab(fam.inspection.word_vectors(params, cfg), tokenizer, source=str(model),
                                      distance=fam.inspection.vector_distance)

    def vectors_of(words):  # a subword family: any word's vector from its units
        return fam.inspection.subword_vectors(params, cfg, tokenizer, list(words))

    matrix = vectors_of(tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size))
    return WordVectors.from_vocab(matrix, tokenizer, source=str(model), oov=vectors_of)


def export_vectors(src: str, out: str, fmt: str, force: bool = False) -> str:
    """``ptm export SRC --format text_vectors|binary_vectors --out FILE``: one line per word, specials left out."""
    from ptm_jax.export.vector_files import write_vectors

    if Path(out).exists() and not force:
        raise ConfigError(f"{out} already exists; choose another output path or pass --force")
    wv = load_word_vectors(src)
    write_vectors(out, wv.words, wv.vectors, fmt)
    return f"exported {src} -> {out} ({fmt}: {len(wv)} words x {wv.dim})"
