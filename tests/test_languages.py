"""mBERT's exponentially smoothed language sampling (data/languages.py): the corpus spec's language tags, chunks
that never hold two languages, the tokenizer sample's and the pretraining stream's realised shares against
q_i = p_i^alpha / sum_j p_j^alpha, the same stream for any host count, `ptm data`'s per-language shares, and a
SentencePiece vocabulary trained on the smoothed sample."""
from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from ptm_jax.config import DataConfig
from ptm_jax.data.cache import build_chunks, build_or_load_cache
from ptm_jax.data.chunks import ChunkLayout, sample_sentences
from ptm_jax.data.corpus import language_groups, resolve_files
from ptm_jax.data.corpus import detect_format
from ptm_jax.data.languages import document_languages, smoothed_documents, smoothed_shares, split_by_language
from ptm_jax.data.tokenizers import train_sentencepiece, train_wordpiece
from ptm_jax.errors import ConfigError, DataError

ZH = ["北京大学和清华大学都位于北京市海淀区。", "这家酒店的服务很好，房间干净，早餐也不错！",
      "语言模型在大量无标注的文本上预训练，然后在下游任务上微调。", "价格有点贵，但是位置很方便，离地铁站很近。"]
EN = ["The model reads a large corpus of text.", "Hotels near the station were cheap and clean.",
      "Pretraining on unlabeled text helps the downstream task.", "The weather was fine and the rooms were big."]
DE = ["Das Modell liest einen großen Textkorpus.", "Das Hotel war sauber und nicht zu teuer."]


def _write(path, sentences, docs, per_doc=4):
    lines = []
    for d in range(docs):
        lines += [f"{sentences[(d + k) % len(sentences)]} {d}-{k}" for k in range(per_doc)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("multi")
    (d / "en").mkdir()
    _write(d / "en" / "a.txt", EN, 300)
    _write(d / "en" / "b.txt", EN[::-1], 300)
    _write(d / "zh.txt", ZH, 60)
    _write(d / "de.txt", DE, 12)
    spec = f"en={d / 'en'},zh={d / 'zh.txt'},de={d / 'de.txt'}"
    return d, DataConfig(corpus=spec, format="lines", cache_chunk_bytes=4096, language_alpha=0.7)


def test_smoothed_shares_follow_the_formula():
    q = smoothed_shares([900, 90, 10], 0.7)
    p = np.array([0.9, 0.09, 0.01])
    np.testing.assert_allclose(q, p ** 0.7 / (p ** 0.7).sum())
    np.testing.assert_allclose(q, [0.80490, 0.16060, 0.03450], atol=1e-5)
    np.testing.assert_allclose(smoothed_shares([900, 90, 10], 1.0), p)
    np.testing.assert_allclose(smoothed_shares([900, 90, 10], 0.0), [1 / 3] * 3)


def test_corpus_spec_names_languages_and_rejects_ambiguous_specs(corpus, tmp_path):
    d, cfg = corpus
    assert language_groups("en=a.txt,b.txt,zh=c/*.txt") == [("en", "a.txt,b.txt"), ("zh", "c/*.txt")]
    assert language_groups("a.txt,b.txt") == [(None, "a.txt,b.txt")]
    files = resolve_files(cfg.corpus)  # language by language, in the spec's order
    assert [f.name for f in files] == ["a.txt", "b.txt", "zh.txt", "de.txt"]
    for bad, msg in [("a.txt,zh=b.txt", "has no language"), ("en=a.txt,en=b.txt", "named twice"),
                     ("en=", "has no path"), ("zh=tfds:wiki", "must be files")]:
        with pytest.raises(ConfigError, match=msg):
            language_groups(bad)
    with pytest.raises(DataError, match="both languages 'en' and 'zh'"):
        resolve_files(f"en={d / 'zh.txt'},zh={d / 'zh.txt'}")
    with pytest.raises(ConfigError, match="language_alpha"):
        DataConfig(language_alpha=1.5).validate()


def test_chunks_never_hold_two_languages(corpus):
    _, cfg = corpus
    layout = ChunkLayout(cfg)
    assert layout.languages == ["en", "zh", "de"]
    sizes = layout.language_bytes()
    assert [len(layout.language_chunks(i)) for i in range(3)] == [-(-b // 4096) for b in sizes]
    for c in range(layout.num_chunks):
        files = {layout.files[p.file].name for p in layout.pieces(c)}
        lang = layout.language_of_chunk(c)
        assert files <= ({"a.txt", "b.txt"} if lang == "en" else {f"{lang}.txt"}), (c, lang, files)
    # every document read once: the chunks partition the corpus
    docs = sum(1 for c in range(layout.num_chunks) for _ in layout.documents(c))
    assert docs == 300 + 300 + 60 + 12


@pytest.mark.parametrize("budget", [0, 40_000])
def test_tokenizer_sample_shares_equal_the_smoothed_shares(corpus, budget):
    _, cfg = corpus
    layout = ChunkLayout(cfg)
    want = smoothed_shares(layout.language_bytes(), 0.7)
    got = dict.fromkeys(layout.languages, 0)
    for s in sample_sentences(cfg, budget):
        lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in s) else "de" if ("Das" in s) else "en"
        got[lang] += len(s.encode("utf-8"))
    total = sum(got.values())
    assert total == pytest.approx(budget or sum(layout.language_bytes()), rel=0.01)
    np.testing.assert_allclose([got[k] / total for k in layout.languages], want, atol=0.005)
    sizes = layout.language_bytes()
    assert want[2] > 2 * sizes[2] / sum(sizes)  # German is over-sampled ...
    if not budget:
        assert got["de"] > 2 * sizes[2]  # ... by repeating its text


@pytest.fixture(scope="module")
def caches(corpus, tmp_path_factory):
    d, cfg = corpus
    tok = train_wordpiece(sample_sentences(cfg, 0), 400, tmp_path_factory.mktemp("tok"))
    one = build_or_load_cache(cfg, tok, tmp_path_factory.mktemp("c1"))
    two_dir = tmp_path_factory.mktemp("c2")
    build_chunks(cfg, tok, two_dir, process_index=1, process_count=2)
    two = build_or_load_cache(cfg, tok, two_dir, process_index=0, process_count=2)
    return cfg, one, two


def test_stream_shares_equal_the_smoothed_shares_for_any_host_count(caches):
    cfg, one, two = caches
    layout = ChunkLayout(cfg)
    train = np.arange(one.num_docs - 4)
    docs, report = smoothed_documents(one, layout, train, 0.7, seed=3)
    lang = document_languages(one, layout)
    tokens = one.doc_num_tokens()
    p = np.array([tokens[train][lang[train] == i].sum() for i in range(3)], float)
    q = (p / p.sum()) ** 0.7 / ((p / p.sum()) ** 0.7).sum()
    realised = np.array([tokens[docs][lang[docs] == i].sum() for i in range(3)], float)
    np.testing.assert_allclose(realised / realised.sum(), q, atol=0.01)
    assert [report[k]["stream_share"] for k in layout.languages] == pytest.approx(realised / realised.sum())
    assert realised.sum() == pytest.approx(p.sum(), rel=0.01)  # as many tokens as the corpus
    counts = np.bincount(docs, minlength=one.num_docs)
    tl, tc = lang[train], counts[train]
    assert tc[tl == 2].min() >= 3 and tc[tl == 0].max() == 1 and tc[tl == 0].min() == 0  # de repeated, en thinned
    assert counts[one.num_docs - 4:].sum() == 0  # held-out documents never enter the stream
    same, _ = smoothed_documents(two, layout, train, 0.7, seed=3)  # cache built by 2 processes
    np.testing.assert_array_equal(same, docs)
    other, _ = smoothed_documents(one, layout, train, 0.7, seed=4)
    assert not np.array_equal(other, docs)


def test_every_language_holds_out_its_last_documents(caches):
    cfg, one, _ = caches
    layout = ChunkLayout(cfg)
    lang = document_languages(one, layout)
    train, held = split_by_language(one, layout, 4)
    assert len(np.intersect1d(train, held)) == 0 and len(train) + len(held) == one.num_docs
    for i in range(3):  # ceil(4 / 3) = 2 each: the language's last two documents
        np.testing.assert_array_equal(held[lang[held] == i], np.flatnonzero(lang == i)[-2:])


def test_chinese_lines_are_detected_as_the_lines_format(tmp_path):
    path = tmp_path / "zh.txt"
    path.write_text("\n\n".join("\n".join(ZH[k:] + ZH[:k]) for k in range(4)) + "\n", encoding="utf-8")
    assert detect_format(path) == "lines"


def test_ptm_data_prints_the_language_shares(corpus, tmp_path, capsys):
    from ptm_jax.cli import main

    _, cfg = corpus
    assert main(["data", "-c", "bert_tiny", f"data.corpus={cfg.corpus!r}", "data.format='lines'",
                 "data.language_alpha=0.5", "tokenizer.vocab_size=400", f"output_dir={str(tmp_path)!r}"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ") and "realised" in ln}
    assert set(rows) == {"en", "zh", "de"} and "language_alpha=0.5" in out
    realised = {k: float(v.split("realised ")[1].split(",")[0]) for k, v in rows.items()}
    target = {k: float(v.split("-> ")[1].split()[0]) for k, v in rows.items()}
    corpus_p = {k: float(v.split("stream ")[1].split()[0]) for k, v in rows.items()}
    norm = sum(v ** 0.5 for v in corpus_p.values())
    for k in rows:
        assert target[k] == pytest.approx(corpus_p[k] ** 0.5 / norm, abs=2e-3)
        assert realised[k] == pytest.approx(target[k], abs=0.01)
    assert target["de"] > 2 * corpus_p["de"]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_on_the_smoothed_sample_encodes_every_language_without_unk(corpus, tmp_path, model_type):
    """A SentencePiece vocabulary trained on the language-smoothed sample (as `ptm data` trains one for
    tokenizer.kind=sentencepiece_*): every sentence of the three languages encodes with no [UNK] and decodes to
    its NFKC form (SentencePiece's normalisation), every Chinese character of the corpus is in a piece, and some
    pieces are Chinese words."""
    _, cfg = corpus
    tok = train_sentencepiece(sample_sentences(cfg, 0), 400, tmp_path / "spm", model_type)
    for s in ZH + EN + DE:
        ids = tok.encode(s)
        assert tok.unk_id not in ids, s
        assert tok.decode(ids) == unicodedata.normalize("NFKC", s)  # full-width ，！ read as , ! (nmt_nfkc)
    pieces = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    zh_chars = {ch for s in ZH for ch in s if "\u4e00" <= ch <= "\u9fff"}
    covered = {ch for p in pieces for ch in p if ch in zh_chars}
    assert covered == zh_chars
    words = [w for w in (p.lstrip("\u2581") for p in pieces)
             if len(w) > 1 and all("\u4e00" <= ch <= "\u9fff" for ch in w)]
    assert words  # Chinese words of their own: unigram 1 (大学), BPE 69 (北京, 房间, ...)
