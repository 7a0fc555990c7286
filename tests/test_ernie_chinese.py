"""ERNIE's Chinese knowledge masking (families/ernie/chinese_units.py): jieba's dictionary segmentation over the
one-character CJK tokens gives phrase and entity units (entities where the dictionary tags a person, place,
organisation or proper noun), runs stop at non-CJK tokens, the units are cached beside the token cache and rebuilt
when the sources change, and the masked examples take whole multi-character words where BERT's masking takes
single characters. The Chinese text is written here (no download); jieba comes from .venv/jieba
(tests/reference_libs.py)."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import reference_libs
from ptm_jax.families.ernie import units as U
from ptm_jax.train.stages import prepare_corpus
from test_ernie import GB, ernie_config, masked_batches, unit_ids

SENTENCES = ["北京大学和清华大学都位于北京市海淀区。", "哈尔滨是黑龙江的省会，国际冰雪文化名城。",
             "这家酒店的服务很好，房间干净，早餐也不错！", "价格有点贵，但是位置很方便，离地铁站很近。",
             "我们在上海参加了人工智能会议，会议讨论了语言模型。", "房间太小了，隔音效果很差，晚上根本睡不着。",
             "他用BERT模型做中文情感分析，效果非常好。", "长江是中国最长的河流，流经很多省份。"]


@pytest.fixture(scope="module")
def segmenter():
    if not reference_libs.use("jieba"):
        pytest.skip(reference_libs.missing("jieba"))
    from ptm_jax.families.ernie.chinese_units import Segmenter

    return Segmenter()


@pytest.fixture(scope="module")
def zh(segmenter, tmp_path_factory):
    d = tmp_path_factory.mktemp("ernie_zh")
    docs = ["\n".join(SENTENCES[k:] + SENTENCES[:k]) for k in range(len(SENTENCES))]
    (d / "zh.txt").write_text("\n\n".join(docs * 3) + "\n", encoding="utf-8")
    cfg = ernie_config(d / "run", d / "zh.txt", d / "none.tsv", unit_sources="jieba", max_seq_length=48,
                       max_predictions_per_seq=8, format="lines")
    cfg.tokenizer.vocab_size = 400
    return cfg, prepare_corpus(cfg)


def test_jieba_words_become_phrase_and_entity_units_over_cjk_runs(zh, segmenter):
    from ptm_jax.families.ernie.chinese_units import cjk_token_chars, segment_units

    _, c = zh
    tok = c.tokenizer
    chars = cjk_token_chars(tok)

    def units(text):
        ids = np.array(tok.encode(text))
        return [("".join(tok.id_to_token(i) for i in ids[s:e]), kind) for s, e, kind in
                segment_units(ids, chars, segmenter)]

    assert units("北京大学和清华大学都位于北京市海淀区。") == [
        ("北京大学", "entity"), ("清华大学", "entity"), ("位于", "phrase"), ("北京市", "entity"), ("海淀区", "entity")]
    # a Latin word ends the run: no unit crosses "bert"; 模型 and 中文 are still found on either side
    assert units("他用BERT模型做中文情感分析") == [("模型", "phrase"), ("中文", "entity"), ("情感", "phrase"),
                                            ("分析", "phrase")]   # 中文 is tagged nz in jieba's dictionary
    assert segmenter.tags["黑龙江"] == "ns" and segmenter.kind("哈尔滨") == "entity" and segmenter.kind("省会") == "phrase"


def test_chinese_units_are_cached_and_rebuilt_when_the_sources_change(zh):
    cfg, c = zh
    art = c.artifacts["units"]
    metas = list(Path(cfg.output_dir).rglob("units.json"))
    assert len(metas) == 1
    meta = json.loads(metas[0].read_text())
    assert meta["units"]["jieba"] > 100 and meta["units"]["lexicon"] == 0 and meta["units"]["pmi"] == 0
    codes_file = metas[0].parent / "units.npz"
    stamp = codes_file.stat().st_mtime_ns
    again = prepare_corpus(cfg)  # same inputs: read back, not recomputed
    assert codes_file.stat().st_mtime_ns == stamp and np.array_equal(again.artifacts["units"].codes, art.codes)
    cfg.data.unit_sources = ""   # basic units only: a new fingerprint, rebuilt without any unit
    basic = prepare_corpus(cfg)
    assert codes_file.stat().st_mtime_ns != stamp and not basic.artifacts["units"].codes.any()
    cfg.data.unit_sources = "jieba"


def _whole_word_share(batches, words):
    """Share of the masked tokens that lie in a multi-character word (``words``: per batch, the continuation flags
    of the jieba units) masked whole, and the number of masked tokens."""
    whole = total = 0
    for b, w in zip(batches, words):
        for r in range(GB):
            pos = b["masked_lm_positions"][r][b["masked_lm_weights"][r] > 0]
            sel = np.zeros(b["input_ids"].shape[1], bool)
            sel[pos] = True
            ids = unit_ids(w[r])
            for p in pos:
                members = ids == ids[p]
                whole += members.sum() > 1 and sel[members].all()
            total += len(pos)
    return whole / total, total


def test_ernie_masks_whole_chinese_words_where_bert_masks_characters(zh):
    cfg, c = zh
    ernie = masked_batches(cfg, c, 4)
    words = [e["unit_continuation"] for e in ernie]
    share, n = _whole_word_share(ernie, words)
    kinds = np.concatenate([b["unit_kind"][b["input_mask"] > 0] for b in ernie])
    assert n > 200 and share > 0.6 and {1, 2} <= set(kinds.tolist())
    # BERT's masking on the same examples: the same stream with every token its own unit (codes all 0)
    units = c.artifacts["units"]
    basic = dataclasses.replace(c, artifacts={**c.artifacts, "units": U.UnitSource(
        np.zeros_like(units.codes), units.offsets, units.cache)})
    bert = masked_batches(cfg, basic, 4)
    for e, b in zip(ernie, bert):
        assert np.array_equal(e["input_mask"], b["input_mask"]) and not b["unit_continuation"].any()
    bert_share, _ = _whole_word_share(bert, words)
    assert bert_share < 0.2 < share - 0.4
