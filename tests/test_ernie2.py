"""ERNIE 2.0's continual multi-task pretraining (issue 19 item 3; ptm_jax/families/ernie/continual*.py, case.py):
each task's labels on real text, the class balance of the structure tasks, the continual schedule, the stream's
exact resume and the task-weight errors. Training through the loop (finite losses, exact resume, 1 device =
(2,2,2)) is tests/test_conformance.py's ernie2 row.

Real text: the first 3000 lines of tiny-shakespeare (../shared/data/corpus/tinyshakespeare/input.txt) in the
'lines' format (a document = a speech, its speaker line included; a sentence = a line), a WordPiece vocabulary of
500 trained on it."""
import collections
import re
import types

import numpy as np
import pytest

from ptm_jax.config import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.families import registry
from ptm_jax.families.ernie import case as case_lib
from ptm_jax.families.ernie import continual
from ptm_jax.families.ernie.continual_data import PERMUTATIONS
from ptm_jax.train.stages import prepare_corpus

G, L = 8, 64


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("ernie2")
    lines = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()[:3000]
    (d / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = load_config("ernie2_tiny", [f"data.corpus={d / 'corpus.txt'}", "data.format=lines", f"output_dir={d}",
                                      "tokenizer.vocab_size=500", "model.vocab_size=500",
                                      f"data.max_seq_length={L}", f"train.batch_size={G}"])
    corpus = prepare_corpus(cfg)
    obj = registry.get("ernie2").objectives["ernie2"](cfg, corpus)
    return types.SimpleNamespace(cfg=cfg, corpus=corpus, obj=obj, ex=obj.builders[id(corpus.train)], lines=lines)


def test_capitalisation_labels_are_istitle_or_isupper_of_each_word(run):
    corpus, lines = run.corpus, run.lines
    tok, cache, labels = corpus.tokenizer, corpus.cache, corpus.artifacts["case"]
    speeches = [s.split("\n") for s in "\n".join(lines).split("\n\n") if s.strip()]
    ones = 0
    for d in range(40):   # document d of the cache is speech d of the file, sentence s its line s
        for s, line in enumerate(speeches[d]):
            words = re.findall(r"\w+|[^\w\s]", line)   # BERT's split of ASCII text: punctuation on its own
            want = [int(w.istitle() or w.isupper()) for w in words for _ in tok.encode(w)]
            assert labels.doc_tokens(d, s, s + 1).tolist() == want, line
            assert cache.doc_tokens(d, s, s + 1).tolist() == [i for w in words for i in tok.encode(w)]
            ones += sum(want)
    assert ones > 100
    assert labels.doc_tokens(0, 0, 1).tolist()[:2] == [1, 1]   # "First Citizen:"
    assert not (labels.codes == case_lib.UNKNOWN).any()   # every sentence aligned with the cache


def test_token_document_labels_by_direct_counting(run):
    cfg, ex = run.cfg, run.ex
    src, positives, total = ex.source, 0, 0
    for i in range(200):
        x = ex.example("token_document", i, cfg.data.seed)
        d, first, end, n = x.where
        span = src.doc_tokens(d, first, end)
        counts = collections.Counter(src.doc_tokens(d).tolist())
        counts.subtract(collections.Counter(span.tolist()))
        want = [int(counts[t] > 0) for t in span[:n].tolist()]
        assert x.token_labels[1:n + 1].tolist() == want
        assert x.token_weights.tolist() == [0.0] + [1.0] * n + [0.0]
        assert x.ids[1:n + 1].tolist() == span[:n].tolist() and len(x.ids) == n + 2 <= L
        positives += sum(want)
        total += n
    assert 0.1 < positives / total < 0.95, positives / total


def test_reorder_classes_are_uniform_and_the_parts_reassemble(run):
    cfg, corpus, ex = run.cfg, run.corpus, run.ex
    k = cfg.data.reorder_segments
    counts = np.zeros(len(PERMUTATIONS[k]), int)
    n = 1200
    for i in range(n):
        x = ex.example("reorder", i, cfg.data.seed)
        tokens = x.where[1]
        counts[x.label] += 1
        seps = np.flatnonzero(x.ids == corpus.special.sep)
        assert len(seps) == k and len(x.ids) <= L and x.ids[0] == corpus.special.cls
        shown = np.split(x.ids, seps[:-1] + 1)   # [CLS] P [SEP], then P [SEP]: the parts in input order
        parts = [None] * k
        for j, p in enumerate(PERMUTATIONS[k][x.label]):
            parts[p] = shown[j][1:-1] if j == 0 else shown[j][:-1]
        assert all(len(p) for p in parts)
        np.testing.assert_array_equal(np.concatenate(parts), tokens)
    # multinomial(1200, 1/6): standard deviation 12.9 per class; 4.6 of them allowed
    assert np.all(np.abs(counts - n / len(counts)) < 60), counts


def test_distance_classes_are_balanced_and_true(run):
    cfg, corpus, ex = run.cfg, run.corpus, run.ex
    counts = np.zeros(3, int)
    n = 1200
    for i in range(n):
        x = ex.example("distance", i, cfg.data.seed)
        d, a, bd, b = x.where
        counts[x.label] += 1
        if x.label == 0:
            assert bd == d and b == a + 1
        elif x.label == 1:
            assert bd == d and abs(b - a) >= 2
        else:
            assert bd != d
        cap = (L - 3) // 2
        want = [corpus.special.cls, *ex.source.doc_tokens(d, a, a + 1)[:cap], corpus.special.sep,
                *ex.source.doc_tokens(bd, b, b + 1)[:cap], corpus.special.sep]
        assert x.ids.tolist() == want
    assert np.all(np.abs(counts / n - 1 / 3) < 0.05), counts


def test_schedule_adds_each_task_at_its_step_and_samples_by_weight():
    dcfg = load_config("ernie2_tiny", ['data.task_weights="1,1,1,1,4"']).data
    starts = dict(zip(dcfg.task_list(), dcfg.starts()))   # 0, 4, 8, 12, 16
    seen = [continual.task_at(dcfg, s, 5) for s in range(3000)]
    for s, task in enumerate(seen):
        assert starts[task] <= s, (s, task)
    for task, start in starts.items():   # each task trains from its stage on
        assert task in seen[start:start + 40], task
    tail = collections.Counter(seen[16:])
    assert abs(tail["distance"] / sum(tail.values()) - 0.5) < 0.04, tail
    assert abs(tail["reorder"] / sum(tail.values()) - 0.125) < 0.03, tail


def test_stream_follows_the_schedule_and_resumes_exactly(run):
    cfg, obj = run.cfg, run.obj
    km = continual.TASKS.index("knowledge_masking")
    whole = obj.train_batches(0, G, 0, 1)
    batches = [next(whole) for _ in range(10)]
    resumed = obj.train_batches(6 * G, G, 0, 1)
    for step, b in enumerate(batches):
        task = continual.task_at(cfg.data, step, cfg.data.seed)
        assert (b["task_ids"] == continual.TASKS.index(task)).all()
        if task != "knowledge_masking":
            assert not b["masked_lm_weights"].any()
        if step >= 6:
            r = next(resumed)
            for key in b:
                np.testing.assert_array_equal(r[key], b[key], err_msg=f"step {step} {key}")
    assert batches[0]["task_ids"][0] == km and batches[0]["masked_lm_weights"].sum() >= G
    half = next(obj.train_batches(0, G, 1, 2))   # process 1 of 2 holds rows 4..7 of the same batch
    for key in half:
        np.testing.assert_array_equal(half[key], batches[0][key][G // 2:])


@pytest.mark.parametrize("weights,starts,message", [
    ("1,-1,1,1,1", "0,4,8,12,16", r"data.task_weights=.*must be finite and >= 0"),
    ("0,0,0,0,0", "0,4,8,12,16", r"data.task_weights=.*active from step 0 \(knowledge_masking\) all have weight 0"),
    ("0,0,1,1,1", "0,0,8,12,16", r"active from step 0 \(knowledge_masking, capitalisation\) all have weight 0"),
    ("1,1,1,1", "0,4,8,12,16", r"data.task_weights has 4 entries but data.tasks has 5"),
    ("1,1,1,1,1", "0,4,2,12,16", r"data.task_from_steps=.*must not decrease"),
])
def test_bad_task_weights_and_stages_are_config_errors(weights, starts, message):
    with pytest.raises(ConfigError, match=message):
        load_config("ernie2_tiny", [f'data.task_weights="{weights}"', f'data.task_from_steps="{starts}"'])
