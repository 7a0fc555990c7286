"""ERNIE 1.0 knowledge masking (ptm_jax/families/ernie): whole units only, 80/10/10 within units,
the unit and token rates, lexicon longest match, word2phrase PMI phrases on real text, span/lexicon file errors,
the staged basic -> phrase -> entity schedule, Chinese at character level and the Hugging Face round trip. Training
through the loop (finite losses, exact resume, 1 device = (2,2,2)) is tests/test_conformance.py's ernie rows.

The corpus: the first 200 kB of Pride and Prejudice (../shared/data/corpus/gutenberg/1342-0.txt), a WordPiece
vocabulary of 2000 trained on it, a lexicon of the book's names and a few phrases."""
import numpy as np
import pytest

from ptm_jax.config import RunConfig, TokenizerConfig, TrainConfig
from ptm_jax.errors import DataError
from ptm_jax.families import registry
from ptm_jax.families.ernie import units as U
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig
from ptm_jax.train.stages import prepare_corpus

LEXICON = """# names and phrases of Pride and Prejudice
entity\tElizabeth Bennet
entity\tMr. Darcy
entity\tMr. Bingley
entity\tJane
entity\tLondon
entity\tNetherfield
entity\tLady Catherine de Bourgh
phrase\tyoung lady
phrase\tgreat deal
phrase\tat least
"""
GB = 8


def ernie_config(tmp, corpus_file, lexicon_file, **data) -> RunConfig:
    fields = dict(corpus=str(corpus_file), max_seq_length=64, max_predictions_per_seq=10, eval_documents=2,
                  unit_sources="lexicon,pmi", lexicon_file=str(lexicon_file), phrase_min_count=5,
                  phrase_threshold=10.0, phrase_from_step=0, entity_from_step=0)
    fields.update(data)
    return RunConfig(output_dir=str(tmp), objective="ernie_mlm",
                     model=ErnieConfig(vocab_size=2000, hidden_size=32, num_layers=2, num_heads=2,
                                       intermediate_size=64, max_position_embeddings=64),
                     tokenizer=TokenizerConfig(kind="wordpiece", vocab_size=2000),
                     data=ErnieDataConfig(**fields),
                     train=TrainConfig(batch_size=GB, steps=8, learning_rate=2e-3, warmup_steps=2, log_every=1,
                                       eval_every=100, eval_batches=1, checkpoint_every=100, progress_bar=False))


@pytest.fixture(scope="module")
def files(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("ernie")
    text = (shared_data / "corpus/gutenberg/1342-0.txt").read_bytes()[:200_000].decode("utf-8", "ignore")
    (d / "pp.txt").write_text(text, encoding="utf-8")
    (d / "lexicon.tsv").write_text(LEXICON, encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def corpus(files):
    cfg = ernie_config(files / "run", files / "pp.txt", files / "lexicon.tsv")
    return cfg, prepare_corpus(cfg)


def objective(cfg, corpus):
    return registry.get("ernie").pretraining.objectives[cfg.objective](cfg, corpus)


def unit_ids(cont: np.ndarray) -> np.ndarray:
    """Per position, the index of its unit (a position not continuing the previous one starts a unit)."""
    return np.cumsum(cont == 0, axis=-1)


def test_lexicon_match_is_longest_first_and_ends_at_a_word_end():
    lex = {(5, 6): U.PHRASE, (5, 6, 7, 8): U.ENTITY, (9,): U.ENTITY, (7,): U.PHRASE}
    m = U.LexiconMatcher(lex)
    tokens = np.array([5, 6, 7, 8, 9, 5, 6, 7, 1])
    start = np.array([1, 1, 1, 1, 1, 1, 1, 0, 1], bool)   # token 7 at index 7 continues a word ("##")
    # 5 6 7 8 -> the longest entry; 9 alone; 5 6 must not take half of the word "6 ##7": no match there
    assert m.match(tokens, start) == [(0, 4, U.ENTITY), (4, 5, U.ENTITY)]
    start[7] = True
    assert m.match(tokens, start) == [(0, 4, U.ENTITY), (4, 5, U.ENTITY), (5, 7, U.PHRASE), (7, 8, U.PHRASE)]


def test_lexicon_units_cover_every_piece_of_their_words(corpus):
    cfg, c = corpus
    tok, units = c.tokenizer, c.artifacts["units"]
    name = tuple(tok.encode("Elizabeth Bennet"))
    flat = np.concatenate([c.cache.doc_tokens(d) for d in range(c.cache.num_docs)])
    hits = [i for i in range(len(flat) - len(name)) if tuple(flat[i:i + len(name)]) == name
            and not tok.continuation_mask()[flat[i + len(name)]]]
    assert len(hits) >= 5
    for i in hits:
        codes = units.codes[i:i + len(name)]
        assert codes[0] == U.ENTITY | U.START and list(codes[1:]) == [U.ENTITY] * (len(name) - 1)
        assert units.codes[i + len(name)] & U.START or units.codes[i + len(name)] == 0


def test_word2phrase_scores_and_joins_on_real_text(corpus):
    cfg, c = corpus
    tok, cont = c.tokenizer, c.tokenizer.continuation_mask()
    sents = []
    for d in c.train.doc_indices:
        t = np.asarray(c.cache.doc_tokens(int(d)))
        for s in np.split(t, np.cumsum(c.cache.doc_sentence_lengths(int(d)))[:-1]):
            start = ~cont[s]
            start[0] = True
            sents.append(U._words(s, start)[0])
    scorer = U.PhraseScorer(sents, 5, 10.0)
    w = lambda text: tuple(tok.encode(text))  # noqa: E731
    # the score is word2phrase's (count(ab) - min_count) / count(a) / count(b) * N
    a, b = w("sir"), w("william")
    pab = sum(1 for s in sents for x, y in zip(s, s[1:]) if (x, y) == (a, b))
    pa, pb = sum(s.count(a) for s in sents), sum(s.count(b) for s in sents)
    n = sum(map(len, sents))
    assert pab >= 5 and scorer.score(a, b) == pytest.approx((pab - 5) / pa / pb * n)
    assert scorer.score(a, b) > 10.0 and scorer.score(w("of"), w("the")) < 10.0
    # left to right, "by george" joins first (score ~100), so "allen" starts afresh although "george allen"
    # scores ~1100 (word2phrase.c's pb = 0 after a join)
    sent = [w("by"), w("george"), w("allen"), w("sir"), w("william")]
    assert scorer.score(w("by"), w("george")) > 10.0 and scorer.score(w("george"), w("allen")) > 10.0
    assert scorer.joins(sent) == [1, 4]
    # punctuation words never join, although "’ s" scores high
    apos = [w("’"), w("s")]
    assert scorer.score(*apos) > 10.0 and scorer.joins(apos) == [1]
    assert U.PhraseScorer(sents, 5, 10.0, U.punctuation_ids(tok)).joins(apos) == []


def test_bad_lexicon_and_span_lines_name_the_file_and_line(tmp_path, corpus):
    cfg, c = corpus
    bad = tmp_path / "bad_lexicon.tsv"
    bad.write_text("entity\tLondon\nperson Jane\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad_lexicon.tsv, line 2: expected 'KIND<TAB>TEXT'"):
        U.read_lexicon(str(bad), c.tokenizer)
    bad.write_text("entity\tLondon\n\ncity\tBath\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 3: unit kind 'city' is not one of phrase, entity"):
        U.read_lexicon(str(bad), c.tokenizer)
    lengths = np.array([10, 4])
    spans = tmp_path / "spans.tsv"
    for body, msg in [("0\t1\t3\tentity\n1\t0\t5\tphrase\n", r"line 2: span \[0, 5\) is out of range for document 1 of 4"),
                      ("2\t0\t1\tentity\n", r"line 1: document 2 is out of range: the token cache has 2"),
                      ("0\tone\t3\tentity\n", r"line 1: DOC, START and END must be integers"),
                      ("0\t1\t3\n", r"line 1: expected 'DOC<TAB>START<TAB>END<TAB>KIND'"),
                      ("0\t3\t3\tentity\n", r"line 1: span \[3, 3\) is out of range"),
                      ("0\t1\t4\tentity\n0\t3\t6\tphrase\n", r"line 2: span \[3, 6\) of document 0 overlaps span \[1, 4\) of line 1")]:
        spans.write_text(body, encoding="utf-8")
        with pytest.raises(DataError, match=msg) as err:
            U.read_spans(str(spans), lengths)
        assert "spans.tsv" in str(err.value)
    with pytest.raises(DataError, match=r"span file .*missing.tsv does not exist; set data.span_file"):
        U.read_spans(str(tmp_path / "missing.tsv"), lengths)
    spans.write_text("# doc start end kind\n0\t1\t4\tentity\n1\t0\t4\tphrase\n", encoding="utf-8")
    assert U.read_spans(str(spans), lengths) == [(0, 1, 4, U.ENTITY), (1, 0, 4, U.PHRASE)]


def masked_batches(cfg, c, steps, start=0):
    it = objective(cfg, c).train_batches(start * GB, GB, 0, 1)
    return [next(it) for _ in range(steps)]


def test_whole_units_only_with_80_10_10_within_units_and_the_token_budget(corpus):
    cfg, c = corpus
    batches = masked_batches(cfg, c, 24)
    mask_id = c.special.mask
    units_masked = units_multi = units_partial = 0
    choice = np.zeros(3)
    tokens = budget_tokens = 0
    for b in batches:
        for r in range(GB):
            w = b["masked_lm_weights"][r] > 0
            pos = b["masked_lm_positions"][r][w]
            ids = unit_ids(b["unit_continuation"][r])
            sel = np.zeros(len(ids), bool)
            sel[pos] = True
            for u in np.unique(ids[pos]):
                members = ids == u
                units_masked += 1
                units_multi += members.sum() > 1
                units_partial += not sel[members].all()
            orig, now = b["masked_lm_ids"][r][w], b["input_ids"][r][pos]
            choice += [(now == mask_id).sum(), ((now == orig) & (now != mask_id)).sum(),
                       ((now != orig) & (now != mask_id)).sum()]
            n = int(b["input_mask"][r].sum())
            tokens += len(pos)
            budget_tokens += min(10, max(1, round(n * 0.15)))
    assert units_partial == 0
    assert units_multi > 30
    frac = choice / choice.sum()
    assert choice.sum() > 1500    # tolerances about 3 standard deviations of a binomial share at n = 1500
    assert frac[0] == pytest.approx(0.8, abs=0.03) and frac[1] == pytest.approx(0.1, abs=0.025)
    assert frac[2] == pytest.approx(0.1, abs=0.025)
    # whole units are skipped when they overflow the budget, so a few tokens of the budget stay unused
    assert 0.9 * budget_tokens <= tokens <= budget_tokens


def test_staged_schedule_masks_basic_then_phrase_then_entity_units(files, corpus):
    _, c = corpus
    cfg = ernie_config(files / "run", files / "pp.txt", files / "lexicon.tsv", phrase_from_step=2,
                       entity_from_step=4)
    assert [cfg.data.level_at(s) for s in range(6)] == [0, 0, 1, 1, 2, 2]
    staged = masked_batches(cfg, c, 6)
    kinds = [set(np.unique(b["unit_kind"]).tolist()) for b in staged]
    conts = [int(b["unit_continuation"].sum()) for b in staged]
    assert kinds[:2] == [{0}, {0}] and conts[:2] == [0, 0]        # basic: every token is its own unit
    assert kinds[2] == kinds[3] == {0, 1} and min(conts[2:4]) > 0  # phrase units
    assert all(k == {0, 1, 2} for k in kinds[4:])                   # entity units too
    # on the same examples, entity level continues a superset of the tokens phrase level does
    phrase_only = masked_batches(ernie_config(files / "run", files / "pp.txt", files / "lexicon.tsv",
                                              phrase_from_step=0, entity_from_step=100), c, 4)
    both = masked_batches(ernie_config(files / "run", files / "pp.txt", files / "lexicon.tsv"), c, 4)
    for p, e in zip(phrase_only, both):
        assert np.all(p["unit_continuation"] <= e["unit_continuation"])
        assert np.array_equal(p["input_mask"], e["input_mask"])
    assert sum(int(e["unit_continuation"].sum()) for e in both) > sum(int(p["unit_continuation"].sum())
                                                                      for p in phrase_only)


def test_stream_resumes_at_any_step_and_splits_over_processes(corpus):
    cfg, c = corpus
    full = masked_batches(cfg, c, 4)
    tail = masked_batches(cfg, c, 2, start=2)
    for a, b in zip(full[2:], tail):
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    obj = objective(cfg, c)
    halves = [next(obj.train_batches(2 * GB, GB, p, 2)) for p in range(2)]
    for k in full[2]:
        assert np.array_equal(full[2][k], np.concatenate([h[k] for h in halves])), k


CHINESE = ["哈尔滨是黑龙江的省会，国际冰雪文化名城。",
           "北京是中华人民共和国的首都，也是全国的政治中心。",
           "哈尔滨的冬天很冷，每年都有冰雪节。",
           "黑龙江省位于中国的东北部。"]


def test_chinese_text_masks_characters_and_whole_entities(tmp_path):
    doc = "\n".join(CHINESE * 3)
    (tmp_path / "zh.txt").write_text("\n\n".join([doc] * 6) + "\n", encoding="utf-8")
    (tmp_path / "lex.tsv").write_text("entity\t哈尔滨\nentity\t黑龙江\nentity\t中华人民共和国\nphrase\t冰雪文化\n",
                                      encoding="utf-8")
    cfg = ernie_config(tmp_path / "run", tmp_path / "zh.txt", tmp_path / "lex.tsv", unit_sources="lexicon",
                       max_seq_length=32, max_predictions_per_seq=8)
    cfg.tokenizer.vocab_size = 300
    c = prepare_corpus(cfg)
    tok = c.tokenizer
    assert tok.tokenize("哈尔滨是黑龙江的省会") == list("哈尔滨是黑龙江的省会")  # a character is a basic unit
    codes = c.artifacts["units"].codes
    first = np.asarray(c.cache.doc_tokens(0))[:8]
    assert tok.decode(first[:3]).replace(" ", "") == "哈尔滨"
    assert list(codes[:3]) == [U.ENTITY | U.START, U.ENTITY, U.ENTITY] and codes[3] == 0
    assert list(codes[4:7]) == [U.ENTITY | U.START, U.ENTITY, U.ENTITY]
    hits = 0
    for b in masked_batches(cfg, c, 6):
        for r in range(GB):
            pos = b["masked_lm_positions"][r][b["masked_lm_weights"][r] > 0]
            ids = unit_ids(b["unit_continuation"][r])
            for u in np.unique(ids[pos]):
                members = np.flatnonzero(ids == u)
                assert set(members) <= set(pos)
                hits += len(members) >= 3
    assert hits > 5


def test_hugging_face_ernie_imports_with_equal_logits_and_exports_back_bit_equal(tmp_path):
    """transformers' ErnieForPreTraining (BERT + optional task-type embeddings, off) on a tiny random model:
    our import gives its MLM and NSP logits, and our export loads back in transformers with equal tensors."""
    import jax.numpy as jnp
    import torch
    import transformers

    from ptm_jax.families.ernie.model import ErnieForPreTraining

    hf_cfg = transformers.ErnieConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64, use_task_id=False)
    torch.manual_seed(0)
    ref = transformers.ErnieForPreTraining(hf_cfg).eval()
    ref.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, 99)]) + "\n")
    fam = registry.hf_family("ernie")
    assert fam.name == "ernie"
    params, cfg, info, _ = fam.interop.hf.load(tmp_path / "hf")
    assert info["head"] == "pretraining" and sorted(params) == ["ernie", "mlm", "nsp"]
    assert registry.family_of_params(params).name == "ernie"
    ids = np.random.RandomState(0).randint(5, 99, (2, 16))
    ids[:, 0] = 2
    mask, seg = np.ones_like(ids), np.zeros_like(ids)
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(seg))
    mlm, nsp = ErnieForPreTraining(cfg, with_nsp=True).apply(
        {"params": params}, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(seg),
        jnp.asarray(np.tile(np.arange(16), (2, 1))))
    np.testing.assert_allclose(np.asarray(mlm), want.prediction_logits.numpy(), atol=2e-5)
    np.testing.assert_allclose(np.asarray(nsp), want.seq_relationship_logits.numpy(), atol=2e-5)
    fam.interop.hf.import_dir(tmp_path / "hf", tmp_path / "params")
    report = fam.interop.hf.export_dir(tmp_path / "params", tmp_path / "back")
    assert report.architecture == "ErnieForPreTraining"
    back = transformers.ErnieForPreTraining.from_pretrained(tmp_path / "back").state_dict()
    for name, tensor in ref.state_dict().items():
        assert torch.equal(back[name], tensor), name
