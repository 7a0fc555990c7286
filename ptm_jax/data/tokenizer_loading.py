"""The tokenizer of a run: its vocabulary file loaded by kind, or trained on process 0 and shared.

``tokenizer.vocab_file`` is loaded by ``tokenizer.kind``; without one, a tokenizer is trained on the corpus sample on
process 0 and shared with the other processes (:func:`load_tokenizer`). The kinds are ``data/tokenizers.py``
(WordPiece, SentencePiece), ``data/byte_bpe.py`` (GPT-2's byte-level BPE), ``data/word_vocab.py`` (word
vocabularies with counts) and ``data/char_vocab.py`` (character vocabularies); this module and
``export/params.py`` (a saved model's tokenizer files) are the ones that know all of them."""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ptm_jax import digest
from ptm_jax.config import TokenizerConfig
from ptm_jax.data import tokenizer_cache
from ptm_jax.data.char_vocab import CHARS_FILE, CharVocab, build_char_vocab
from ptm_jax.data.byte_bpe import ByteBPETokenizer, train_byte_bpe
from ptm_jax.data.tokenizers import (SentencePieceTokenizer, Tokenizer, WordPieceTokenizer, _atomic_write,
                                     train_sentencepiece, train_wordpiece)
from ptm_jax.data.word_vocab import WordVocab, build_word_vocab
from ptm_jax.errors import ConfigError, DataError

log = logging.getLogger(__name__)


def _load_file(cfg: TokenizerConfig) -> Tokenizer:
    from ptm_jax import fs

    vocab_file = cfg.vocab_file
    if fs.is_remote(vocab_file):  # the Rust/C++ libraries read local files: copy the file (and merges.txt)
        src = fs.path(vocab_file)
        local = fs.scratch_dir() / f"vocab-{digest.sha256(str(src))[:16]}"
        local.mkdir(parents=True, exist_ok=True)
        names = [src.name] + (["merges.txt"] if cfg.kind == "byte_bpe" else [])
        for name in names:
            if not (local / name).is_file():
                try:
                    _atomic_write(local / name, (src.parent / name).read_bytes())
                except (OSError, FileNotFoundError) as e:
                    raise DataError(f"{src.parent / name}: cannot read ({e})") from None
        vocab_file = str(local / src.name)
    if cfg.kind == "word":  # a word vocabulary with counts (NNLM, word2vec, ...)
        return WordVocab(vocab_file, lower_case=cfg.lower_case)
    if cfg.kind == "char":  # a character vocabulary (character-level LMs)
        return CharVocab(vocab_file, lower_case=cfg.lower_case)
    if cfg.kind == "byte_bpe":
        return ByteBPETokenizer(vocab_file)
    if cfg.kind == "wordpiece":
        return WordPieceTokenizer(vocab_file, lower_case=cfg.lower_case)
    return SentencePieceTokenizer(vocab_file)


TRAIN_BYTES_PER_S = 128 * 1024
"""A pessimistic tokenizer-training rate (sample bytes per second), for the timeout of the barrier the other
processes wait at while process 0 trains."""


def load_tokenizer(cfg: TokenizerConfig, train_texts: Callable[[], Iterable[str]] | None, out_dir, *,
                   corpus_key: str = "", process_index: int = 0,
                   barrier: Callable[..., None] = lambda *a, **k: None) -> Tokenizer:
    """``cfg.vocab_file`` set (local or gs://): load it (``cfg.kind`` picks the class). Otherwise train on
    ``train_texts()`` (the caller passes a bounded sample: ``chunks.sample_sentences``) into
    ``out_dir/tokenizer/`` on process 0, or reuse the one there when its settings (kind, vocab_size,
    lower_case, train_sample_bytes, ``corpus_key``) are unchanged; a tokenizer trained before on this machine
    from the same sample and settings is copied from ``data/tokenizer_cache.py`` instead. The other processes wait at
    ``barrier(name, timeout_s)`` (a timeout that fits the training), then get it:
      - local out_dir on a shared disk: they read it there;
      - local out_dir on each host's own disk: process 0 also puts the files into the jax.distributed
        key-value store (``distributed.publish_files``) and the others write them into their out_dir;
      - gs:// out_dir: process 0 trains in ``fs.scratch_dir()`` and uploads, COMPLETE last; every process
        reads it through ``fs.local_copy`` (a copy in its scratch dir).
    """
    from ptm_jax import fs
    from ptm_jax.parallel import distributed

    if cfg.vocab_file:
        return _load_file(cfg)
    tok_dir = fs.path(out_dir) / "tokenizer"
    remote = fs.is_remote(tok_dir)
    settings = {"kind": cfg.kind, "vocab_size": cfg.vocab_size, "lower_case": cfg.lower_case,
                "corpus_key": corpus_key, "train_sample_bytes": cfg.train_sample_bytes, "version": 2}
    if cfg.kind in ("word", "char"):
        settings["min_count"] = cfg.min_count
    if cfg.kind == "wordpiece" and cfg.limit_alphabet != 1000:  # (the default keeps earlier runs' keys)
        settings["limit_alphabet"] = cfg.limit_alphabet
    key = digest.sha256(json.dumps(settings, sort_keys=True))
    names = {"wordpiece": ["vocab.txt"], "byte_bpe": ["vocab.json", "merges.txt"],
             "word": ["vocab.tsv"], "char": [CHARS_FILE]}.get(cfg.kind, ["spm.model", "spm.vocab"])

    def reusable() -> bool:
        try:
            ok = json.loads(fs.read_text(tok_dir / "settings.json"))["key"] == key and (tok_dir / names[0]).exists()
            return ok and (not remote or fs.is_complete(tok_dir))
        except (OSError, ValueError, KeyError):
            return False

    if process_index == 0:
        if not reusable():
            if train_texts is None:
                raise ConfigError("tokenizer.vocab_file is empty and there is no corpus to train a tokenizer on; "
                                  "set tokenizer.vocab_file")
            base = fs.scratch_dir() if remote else Path(os.fspath(fs.makedirs(out_dir)))
            tmp = base / f".tokenizer-tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            start = time.perf_counter()
            cache_settings = {k: v for k, v in settings.items() if k != "corpus_key"}  # the sample stands for it
            cache_key = tokenizer_cache.sample_key(cache_settings, train_texts()) if tokenizer_cache.root() else ""
            cached = tokenizer_cache.lookup(cache_key, names) if cache_key else None
            try:
                if cached is not None:  # trained before from this very sample and settings: the same files
                    tmp.mkdir(parents=True)
                    for name in names:
                        shutil.copyfile(cached / name, tmp / name)
                elif cfg.kind == "byte_bpe":
                    train_byte_bpe(train_texts(), cfg.vocab_size, tmp)
                elif cfg.kind == "word":  # counts over the sample; tokenizer.vocab_size caps the entries
                    build_word_vocab(train_texts(), tmp, min_count=cfg.min_count, max_vocab=cfg.vocab_size,
                                     lower_case=cfg.lower_case)
                elif cfg.kind == "char":  # counts over the sample; tokenizer.vocab_size caps the entries
                    build_char_vocab(train_texts(), tmp, min_count=cfg.min_count, max_vocab=cfg.vocab_size,
                                     lower_case=cfg.lower_case)
                elif cfg.kind == "wordpiece":
                    train_wordpiece(train_texts(), cfg.vocab_size, tmp, lower_case=cfg.lower_case,
                                    limit_alphabet=cfg.limit_alphabet)
                else:
                    train_sentencepiece(train_texts(), cfg.vocab_size, tmp, cfg.kind.removeprefix("sentencepiece_"),
                                        lower_case=cfg.lower_case)
                if cached is None and cache_key:
                    tokenizer_cache.store(cache_key, tmp, names)
                (tmp / "settings.json").write_text(json.dumps({"key": key, **settings}, indent=1))
                if remote:
                    fs.rmtree(tok_dir)
                    fs.upload_tree(tmp, tok_dir)  # COMPLETE last
                else:
                    local_dir = Path(os.fspath(tok_dir))
                    shutil.rmtree(local_dir, ignore_errors=True)
                    os.replace(tmp, local_dir)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if cached is not None:
                log.info("tokenizer: %s trained before on the same sample with the same settings; copied from %s "
                         "in %.1f s -> %s", cfg.kind, cached, time.perf_counter() - start, tok_dir)
            else:
                log.info("tokenizer: %s trained on a sample of at most %d bytes in %.1f s -> %s", cfg.kind,
                         cfg.train_sample_bytes, time.perf_counter() - start, tok_dir)
        if not remote:
            distributed.publish_files(f"tokenizer-{key}", {n: (tok_dir / n).read_bytes()
                                                           for n in names + ["settings.json"]})
    barrier("tokenizer", timeout_s=distributed.timeout_for(cfg.train_sample_bytes or 1e9, TRAIN_BYTES_PER_S))
    if not reusable() and not remote and process_index != 0 and jax_process_count() > 1:
        files = distributed.fetch_files(f"tokenizer-{key}", timeout_s=120)
        local_dir = Path(os.fspath(tok_dir))
        tmp = local_dir.parent / f".tokenizer-tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        shutil.rmtree(local_dir, ignore_errors=True)
        os.replace(tmp, local_dir)
        log.info("tokenizer: not on this host's disk; received from process 0 through the key-value store "
                 "-> %s", local_dir)
    if not reusable():
        raise DataError(f"{tok_dir}: no trained tokenizer with the current settings; process 0 trains it "
                        "(check process 0's log for an error)")
    local_dir = fs.local_copy(tok_dir) if remote else Path(os.fspath(tok_dir))
    return _load_file(TokenizerConfig(kind=cfg.kind, vocab_file=str(local_dir / names[0]),
                                      lower_case=cfg.lower_case))


def jax_process_count() -> int:
    import jax

    return jax.process_count()
