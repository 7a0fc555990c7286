"""Static word vectors (ptm_jax/evaluate/word_vectors.py, commands/vectors.py): analogy accuracy with the
compute-accuracy protocol equals gensim's KeyedVectors.evaluate_word_analogies section by section (same
restrict_vocab, case ignored), Spearman equals gensim's evaluate_word_pairs on WordSim353 and SimLex-999,
neighbours equal gensim's most_similar; case variants of the question words are excluded; malformed analogy and
similarity files and OOV queries are DataErrors naming the file and line or the word; `ptm neighbors`,
`ptm analogy` and `ptm eval-vectors` print the same figures (MODEL a text or binary vector file); a run of
`ptm pretrain -c nnlm_tiny` exports its features C (the specials left out) through `ptm export --format
text_vectors|binary_vectors` into files gensim loads, and the commands read the run directly.

The vectors: the real vocabulary of ../shared/data/word2vec (analogy, SimLex and WordSim words) with seeded random
vectors in which each analogy pair (a, b) of a section is planted as v(b) = v(a) + offset + noise, so that
about 40 % of the questions are answered right and the rest wrong by a margin the noise sets; some words get a
case variant (a near copy, before or after them in frequency order) and some analogy words are left out (OOV).
"""
import json

import numpy as np
import pytest
from gensim.models import KeyedVectors

from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.word_vectors import (WordVectors, analogy_half, evaluate_analogies, evaluate_similarity,
                                           read_analogies, spearman)

DIM, OFFSET, NOISE, PER_SECTION = 32, 0.3, 1.2, 40


@pytest.fixture(scope="module")
def planted(shared_data, tmp_path_factory):
    """(WordVectors, gensim KeyedVectors of the same rows, the analogy file: 40 questions of each section)."""
    src = shared_data / "word2vec"
    lines, n = [], 0
    for line in (src / "questions-words.txt").read_text(encoding="utf-8").splitlines():
        n = 0 if line.startswith(":") else n + 1
        if n <= PER_SECTION:
            lines.append(line)
    questions = tmp_path_factory.mktemp("analogies") / "questions.txt"
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    vec, order, offset = {}, [], None
    for line in lines:
        if line.startswith(":"):
            offset = rng.standard_normal(DIM) * OFFSET
            continue
        a, b, c, d = line.split()
        for x, y in ((a, b), (c, d)):
            for w in (x, y):
                if w not in vec:
                    vec[w] = vec[x] + offset + NOISE * rng.standard_normal(DIM) if w == y else rng.standard_normal(DIM)
                    order.append(w)
    words = list(order)
    rng.shuffle(words)
    oov = set(words[::37])
    words = [w for w in words if w not in oov]
    for i, w in enumerate(list(words[::10])):
        variant = w.lower() if w != w.lower() else w.capitalize()
        if variant not in vec:
            vec[variant] = vec[w] + 0.05 * rng.standard_normal(DIM)
            j = words.index(w)
            words.insert(j if i % 2 else j + 1, variant)
    for name in ("simlex999.txt", "wordsim353.tsv"):  # their words, every 13th left out (OOV)
        for line in (src / name).read_text(encoding="utf-8").splitlines():
            for w in line.split()[:2] if not line.startswith("#") else []:
                if w not in vec:
                    vec[w] = rng.standard_normal(DIM)
                    if len(vec) % 13:
                        words.append(w)
    vectors = np.array([vec[w] for w in words], np.float32)
    kv = KeyedVectors(DIM)
    kv.add_vectors(words, vectors)
    return WordVectors(words, vectors, source="planted"), kv, questions


@pytest.mark.parametrize("restrict_vocab, batch_size", [(0, 512), (800, 7)])
def test_analogy_accuracy_equals_gensim_section_by_section(planted, restrict_vocab, batch_size):
    wv, kv, questions = planted
    ours = evaluate_analogies(wv, questions, restrict_vocab=restrict_vocab, batch_size=batch_size)
    score, sections = kv.evaluate_word_analogies(str(questions), restrict_vocab=restrict_vocab or len(wv),
                                                 case_insensitive=True)
    theirs = sections[:-1]
    assert [s["section"] for s in ours["sections"]] == [s["section"] for s in theirs]
    assert [(s["correct"], s["seen"]) for s in ours["sections"]] == \
        [(len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in theirs]
    assert ours["accuracy"] == pytest.approx(score, abs=1e-12)
    assert 0.3 < ours["accuracy"] < 0.5, "planted noise leaves room for both right and wrong answers"
    assert ours["questions"] == 14 * PER_SECTION
    assert 0.6 < ours["coverage"] < 1.0 and ours["seen"] == round(ours["coverage"] * ours["questions"])
    semantic = [s for s in ours["sections"] if s["kind"] == "semantic"]
    assert [s["section"] for s in semantic] == ["capital-common-countries", "capital-world", "currency",
                                                "city-in-state", "family"]
    assert ours["semantic_accuracy"] == pytest.approx(sum(s["correct"] for s in semantic) /
                                                      sum(s["seen"] for s in semantic))


def test_analogy_halves_are_disjoint_balanced_and_add_up_to_the_whole_file(planted, tmp_path):
    wv, _, questions = planted
    whole = evaluate_analogies(wv, questions, restrict_vocab=800)
    tune, report = (evaluate_analogies(wv, questions, restrict_vocab=800, half=h) for h in ("tune", "report"))
    assert (tune["half"], report["half"], whole["half"]) == ("tune", "report", None)
    for key in ("correct", "seen", "questions"):
        assert tune[key] + report[key] == whole[key]
        for t, r, w in zip(tune["sections"], report["sections"], whole["sections"]):
            assert t[key] + r[key] == w[key]
    assert [s["questions"] for s in tune["sections"]] == [(PER_SECTION + 1) // 2] * 14
    assert [s["questions"] for s in report["sections"]] == [PER_SECTION // 2] * 14
    sections = read_analogies(questions)
    halves = [analogy_half(sections, h) for h in ("tune", "report")]
    for s, t, r in zip(sections, *halves):
        assert set(t.lines).isdisjoint(r.lines) and sorted(t.lines + r.lines) == s.lines
        assert t.questions == s.questions[0::2] and r.questions == s.questions[1::2]
    assert tune["accuracy"] != report["accuracy"], "different questions, different scores on planted noise"
    with pytest.raises(ConfigError, match="analogy half 'dev': choose one of tune, report"):
        evaluate_analogies(wv, questions, half="dev")


def test_case_variants_of_the_question_words_are_not_answers(tmp_path):
    # c's case variant 'France' lies nearest to b - a + c; compute-accuracy would answer it, gensim and we skip it
    words = ["france", "paris", "germany", "France", "berlin", "tokyo"]
    v = {"france": [1, 0, 0], "paris": [1, 0.25, 0.1], "germany": [0, 0, 1], "berlin": [0, 0.4, 1],
         "France": [1, 0.36, -0.05], "tokyo": [-1, 0, 0]}
    wv = WordVectors(words, np.array([v[w] for w in words], np.float32))
    q = tmp_path / "q.txt"
    q.write_text(": capital\ngermany berlin france paris\nfrance paris germany berlin\n", encoding="utf-8")
    assert wv.analogy("germany", "berlin", "france", k=1, ignore_case=False)[0][0] == "France"
    assert wv.analogy("germany", "berlin", "france", k=1, ignore_case=True)[0][0] == "paris"
    kv = KeyedVectors(3)
    kv.add_vectors(words, wv.vectors)
    for ignore_case, correct in ((True, 2), (False, 1)):
        result = evaluate_analogies(wv, q, restrict_vocab=0, ignore_case=ignore_case)
        score, _ = kv.evaluate_word_analogies(str(q), restrict_vocab=10, case_insensitive=ignore_case)
        assert result["correct"] == correct and result["seen"] == 2 and result["accuracy"] == score
    assert result["sections"][0]["kind"] == "semantic" and result["syntactic_accuracy"] is None


@pytest.mark.parametrize("name", ["wordsim353.tsv", "simlex999.txt"])
def test_similarity_spearman_equals_gensim_evaluate_word_pairs(planted, shared_data, name):
    wv, kv, _ = planted
    path = shared_data / "word2vec" / name
    ours = evaluate_similarity(wv, path)
    pearson, spear, oov_percent = kv.evaluate_word_pairs(str(path), restrict_vocab=len(wv))
    assert ours["spearman"] == pytest.approx(spear.statistic, abs=1e-9)
    assert ours["pearson"] == pytest.approx(pearson.statistic, abs=1e-6)
    assert 100.0 * ours["oov_pairs"] / ours["pairs"] == pytest.approx(oov_percent)
    assert ours["pairs"] == {"wordsim353.tsv": 353, "simlex999.txt": 999}[name]
    assert ours["pairs"] * 0.6 < ours["seen"] < ours["pairs"] and ours["oov_pairs"] == ours["pairs"] - ours["seen"]


def test_spearman_gives_ties_their_average_rank():
    from scipy import stats

    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 0.5])
    y = np.array([0.3, 0.1, 0.2, 0.2, 0.9, 0.4, 0.4, 0.0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_neighbors_and_analogy_equal_gensim_most_similar(planted):
    wv, kv, _ = planted
    for word in ("Athens", "brother", "quickly"):
        ours = wv.neighbors(word, k=5)
        theirs = kv.most_similar(word, topn=5)
        assert [w for w, _ in ours] == [w for w, _ in theirs]
        np.testing.assert_allclose([c for _, c in ours], [c for _, c in theirs], atol=1e-5)
    ours = wv.analogy("boy", "girl", "brother", k=3)
    theirs = kv.most_similar(positive=["girl", "brother"], negative=["boy"], topn=3)
    assert [w for w, _ in ours] == [w for w, _ in theirs]


BAD_ANALOGIES = {
    "three_words": (": family\nboy girl brother sister\nboy girl brother\n", ":3: expected an analogy question of 4 "
                    "words"),
    "before_header": ("boy girl brother sister\n: family\n", ":1: question before the first ': section' header"),
    "nameless_header": (":\nboy girl brother sister\n", ":1: section header ':' without a name"),
    "no_questions": (": family\n\n", ": holds no analogy questions"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANALOGIES))
def test_malformed_analogy_file_is_a_data_error_naming_the_line(tmp_path, case):
    text, message = BAD_ANALOGIES[case]
    path = tmp_path / "q.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_analogies(path)
    assert f"{path}{message}" in str(e.value)


@pytest.mark.parametrize("text, message", [
    ("# a comment\nold\tnew\t1.58\nsmart\tintelligent\n", ":3: expected 'word1<TAB>word2<TAB>score', got 2 field(s)"),
    ("old\tnew\thigh\n", ":1: score 'high' of (old, new) is not a number"),
    ("# only comments\n", ": holds no word pairs"),
])
def test_malformed_similarity_file_is_a_data_error_naming_the_line(planted, tmp_path, text, message):
    path = tmp_path / "pairs.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as e:
        evaluate_similarity(planted[0], path)
    assert f"{path}{message}" in str(e.value)


def test_oov_query_names_the_word_and_close_in_vocabulary_words(planted):
    wv = planted[0]
    with pytest.raises(DataError, match=r"word 'brotherr' is not in the vocabulary of planted \(\d+ words\); "
                       r"close in-vocabulary words: brother"):
        wv.neighbors("brotherr")
    with pytest.raises(DataError, match="word 'athens' is not in the vocabulary .*: Athens"):
        wv.analogy("athens", "Greece", "Baghdad", ignore_case=False)
    assert wv.analogy("athens", "Greece", "Baghdad", ignore_case=True)


def test_word_vectors_from_a_vocabulary_leave_out_the_specials_and_padded_rows(tmp_path):
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.families import registry

    vocab = build_word_vocab(["the cat sat on the mat", "the dog sat"], tmp_path)
    features = np.random.default_rng(0).standard_normal((vocab.vocab_size + 2, 4)).astype(np.float32)
    fam = registry.get("nnlm")  # its features C (the trained tree: the end-to-end test below)
    assert "word_vectors" in fam.capabilities
    wv = WordVectors.from_vocab(fam.inspection.word_vectors({"nnlm": {"embedding": features}}, None), vocab)
    assert wv.words == ["the", "sat", "cat", "dog", "mat", "on"]
    np.testing.assert_array_equal(wv.vectors, features[3:vocab.vocab_size])  # 2 padded rows past the ids
    assert wv.counts.tolist() == [3, 2, 1, 1, 1, 1]
    with pytest.raises(DataError, match=r"word vectors of shape \(5, 4\) do not cover the tokenizer's 9 ids"):
        WordVectors.from_vocab(features[:5], vocab, source="short")


# ----------------------------------------------------------------------------------------------------
# Commands


@pytest.fixture(scope="module")
def vector_file(planted, tmp_path_factory):
    from ptm_jax.export.vector_files import write_text_vectors

    wv = planted[0]
    return write_text_vectors(tmp_path_factory.mktemp("vectors") / "planted.txt", wv.words, wv.vectors)


def test_neighbors_command_in_a_subprocess_prints_the_neighbours(planted, vector_file):
    from test_cli_e2e import ptm

    r = ptm("neighbors", str(vector_file), "brother", "Athens", "-k", "3", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert [q["query"] for q in out] == ["brother", "Athens"]
    for q in out:
        want = planted[0].neighbors(q["query"], k=3)
        assert [(n["word"], n["cosine"]) for n in q["neighbors"]] == [(w, round(c, 6)) for w, c in want]


def test_eval_vectors_and_analogy_commands_report_the_library_figures(planted, vector_file, shared_data, tmp_path,
                                                                      capsys):
    from ptm_jax.cli import main

    wv, _, questions = planted
    simlex = shared_data / "word2vec/simlex999.txt"
    assert main(["eval-vectors", str(vector_file), "--analogies", str(questions), "--similarity", str(simlex),
                 "--restrict-vocab", "800", "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert json.loads(capsys.readouterr().out) == report
    assert report["words"] == len(wv) and report["dim"] == DIM
    assert report["analogies"] == json.loads(json.dumps(evaluate_analogies(wv, questions, restrict_vocab=800)))
    assert main(["eval-vectors", str(vector_file), "--analogies", str(questions), "--analogy-half", "report",
                 "--restrict-vocab", "800"]) == 0
    assert json.loads(capsys.readouterr().out)["analogies"] == json.loads(json.dumps(
        evaluate_analogies(wv, questions, restrict_vocab=800, half="report")))
    assert report["similarity"][0]["spearman"] == pytest.approx(evaluate_similarity(wv, simlex)["spearman"])
    assert main(["analogy", str(vector_file), "boy", "girl", "brother", "-k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [n["word"] for n in out["neighbors"]] == [w for w, _ in wv.analogy("boy", "girl", "brother", k=2)]
    assert main(["neighbors", str(vector_file), "brotherr"]) == 2
    err = capsys.readouterr().err
    assert "ptm neighbors: error: word 'brotherr' is not in the vocabulary" in err and "brother" in err
    from ptm_jax.export.vector_files import write_binary_vectors

    binary = write_binary_vectors(tmp_path / "planted.bin", wv.words, wv.vectors)
    for path in (vector_file, binary):
        assert main(["neighbors", str(path), "brother", "-k", "3", "--json"]) == 0
        assert [n["word"] for n in json.loads(capsys.readouterr().out)[0]["neighbors"]] == \
            [w for w, _ in wv.neighbors("brother", k=3)]


@pytest.mark.slow
def test_a_pretrained_run_exports_vector_files_that_gensim_loads_and_the_commands_read(tmp_path, shared_data,
                                                                                       capsys):
    from ptm_jax.cli import main
    from ptm_jax.export.params import load_params

    run, corpus = tmp_path / "nnlm", tmp_path / "corpus.txt"
    with open(shared_data / "corpus/wikitext-2-tokenized/valid.txt", "rb") as f:  # 300 kB: 2,000-word vocabulary
        corpus.write_bytes(f.read(300_000))
    assert main(["pretrain", "-c", "nnlm_tiny", f"output_dir={str(run)!r}", f"data.corpus={str(corpus)!r}",
                 "train.steps=4", "train.eval_every=4", "train.checkpoint_every=4"]) == 0
    params, _, _, _ = load_params(run)
    features = params["nnlm"]["embedding"]
    words = [line.split("\t")[0] for line in (run / "tokenizer/vocab.tsv").read_text(encoding="utf-8").splitlines()]
    for fmt, binary in (("text_vectors", False), ("binary_vectors", True)):
        out = tmp_path / f"vectors.{fmt}"
        assert main(["export", str(run), "--format", fmt, "--out", str(out)]) == 0
        kv = KeyedVectors.load_word2vec_format(str(out), binary=binary)
        assert kv.index_to_key == words[3:] and len(words) > 500  # the specials <pad> <unk> <eos> left out
        np.testing.assert_array_equal(kv.vectors, features[3:])
    assert main(["export", str(run), "--format", "text_vectors", "--out", str(out)]) == 2  # exists, no --force
    capsys.readouterr()
    assert main(["neighbors", str(run), words[3], "-k", "4", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)[0]["neighbors"]
    want = kv.most_similar(words[3], topn=4)
    assert [n["word"] for n in got] == [w for w, _ in want]
    assert main(["eval-vectors", str(run), "--similarity", str(shared_data / "word2vec/simlex999.txt")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["words"] == len(words) - 3 and report["similarity"][0]["seen"] > 0
