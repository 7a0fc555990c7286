"""Chinese text through the WordPiece tokenizer: CJK ideographs are split one per word as the reference BERT
BasicTokenizer does (google-research/bert tokenization.py ``_tokenize_chinese_chars``), checked token for token
against transformers' BertTokenizer (the Python port of that file) and BertTokenizerFast on Chinese prose with
mixed scripts, full-width punctuation and the rarer CJK blocks."""
from __future__ import annotations

import pytest

from ptm_jax.data.tokenizers import WordPieceTokenizer, train_wordpiece

CHINESE = [
    "自然语言处理是人工智能的一个重要方向，研究如何让计算机理解人类的语言。",
    "北京大学和清华大学都位于北京市海淀区。",
    "这家酒店的服务很好，房间干净，早餐也不错！下次还会再来。",
    "价格有点贵，但是位置很方便，离地铁站只有五分钟。",
    "他在2019年发表了一篇关于BERT模型的论文，引用次数超过1000次。",
    "《红楼梦》是中国古典四大名著之一，作者是曹雪芹。",
    "今天天气怎么样？明天会下雨吗？",
    "我们使用ＧＰＵ训练模型，每个批次有３２个样本。",
    "上海的外滩、南京路和豫园都是著名的旅游景点。",
    "语言模型在大量无标注的文本上预训练，然后在下游任务上微调。",
    "房间太小了，隔音效果很差，晚上根本睡不着。",
    "服务员态度冷淡……不推荐！",
]
# Mixed scripts and the rarer blocks: Extension A (㐀), compatibility ideographs (豈, U+F900), Extension B (𠀀),
# Japanese kana and Korean Hangul (not in the reference's CJK ranges, so they stay whole words), CJK punctuation.
MIXED = ["日本語のテキストとカタカナ、ひらがな", "한국어 문장도 있습니다", "㐀㐁 豈更 𠀀𠀁 〇", "中文English混合mixed文本",
         "「引号」『书名』【括号】", "Ｈｅｌｌｏ，世界！", "数字１２３和abc123", "  空白\t和\n换行  "]


@pytest.fixture(scope="module")
def zh_vocab(tmp_path_factory):
    d = tmp_path_factory.mktemp("zh_wp")
    english = ["the model is trained on a large corpus of text .", "hello world , mixed english text here ."] * 5
    tok = train_wordpiece(CHINESE * 3 + MIXED * 2 + english, 600, d)
    return d / "vocab.txt", tok


def test_cjk_ideographs_are_single_tokens_and_other_scripts_are_not(zh_vocab):
    _, tok = zh_vocab
    assert tok.tokenize("北京大学") == ["北", "京", "大", "学"]
    pieces = tok.tokenize("中文English混合")
    assert pieces[:2] == ["中", "文"] and pieces[-2:] == ["混", "合"] and "".join(
        p.removeprefix("##") for p in pieces[2:-2]) == "english"
    # kana is not in the reference's CJK ranges: a kana run is one word (split into ## pieces, not words)
    kana = tok.tokenize("カタカナ")
    assert kana[0] == "カ" and all(p.startswith("##") for p in kana[1:])
    assert tok.tokenize("㐀豈𠀀") == ["㐀", "豈", "𠀀"]


@pytest.mark.parametrize("lower", [True, False])
def test_chinese_tokens_and_ids_equal_transformers_bert_tokenizer(zh_vocab, lower):
    transformers = pytest.importorskip("transformers")
    vocab_file, _ = zh_vocab
    ours = WordPieceTokenizer(vocab_file, lower_case=lower)
    slow = transformers.BertTokenizer(vocab_file=str(vocab_file), do_lower_case=lower, tokenize_chinese_chars=True)
    fast = transformers.BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=lower,
                                          tokenize_chinese_chars=True)
    texts = CHINESE + MIXED
    got = ours.encode_batch(texts)
    assert [slow.encode(t, add_special_tokens=False) for t in texts] == got
    assert [slow.tokenize(t) for t in texts] == [ours.tokenize(t) for t in texts]
    # the fast tokenizer agrees here too (its differences from the reference are outside these texts)
    assert [fast.encode(t, add_special_tokens=False) for t in texts] == got
    n = sum(map(len, got))
    assert n > 300 and sum(i == ours.unk_id for ids in got for i in ids) < 0.05 * n


def test_limit_alphabet_bounds_the_characters_of_a_trained_vocabulary(tmp_path):
    from ptm_jax.config import TokenizerConfig
    from ptm_jax.data.tokenizer_loading import load_tokenizer

    def chars(limit):
        cfg = TokenizerConfig(kind="wordpiece", vocab_size=600, limit_alphabet=limit)
        tok = load_tokenizer(cfg, lambda: CHINESE * 3, tmp_path / f"a{limit}")
        return {tok.id_to_token(i) for i in range(tok.vocab_size) if len(tok.id_to_token(i)) == 1}, tok

    few, tok = chars(40)
    every, _ = chars(1000)
    distinct = {c for t in CHINESE for c in t.lower() if not c.isspace()}
    assert len(few) == 40 and every == distinct
    assert tok.tokenize("的")[0] == "的" and tok.unk_id in tok.encode("曹雪芹")  # frequent kept, rare [UNK]
