"""ERNIE 2.0's continual multi-task pretraining (ptm_jax/families/ernie/continual*.py, case.py):
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

from ptm_jax.config_loading import load_config
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
    obj = registry.get("ernie2").pretraining.objectives["ernie2"](cfg, corpus)
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


def _vocab(path, n):
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, n)]) + "\n")
    return path


def test_hugging_face_export_gives_transformers_ernie_with_task_ids_equal_logits_and_imports_back(tmp_path):
    """A random tiny ernie2 (vocab 99, 2 layers, H 32, 8 task rows, task_id 3) as a params directory, exported
    twice: the 'pretraining' head as ErnieForMaskedLM (the four other task heads and the pooler left out) and the
    'encoder' head as ErnieModel. transformers loads each with no missing or unexpected tensors; with task_type_ids
    = our per-row task ids [5, 1] (and None = zeros vs our task_id 0) its MLM logits at every position, last hidden
    states and pooled output equal ours within 5e-5 (float32; measured ~1e-6). Both folders import back into the
    ernie2 family bit-equal (the ernie family's converter routes use_task_id folders), and our task_id returns
    from ptm_task_id. Bad input: a task_type_vocab_size that disagrees with the table and a task_id outside the
    table are errors naming the field."""
    import dataclasses
    import json

    import jax
    import jax.numpy as jnp
    import torch
    import transformers

    from ptm_jax.errors import CheckpointError
    from ptm_jax.export import params as params_lib
    from ptm_jax.families.ernie.continual import Ernie2Config
    from ptm_jax.families.ernie.continual_model import Ernie2ForPreTraining, Ernie2Model

    cfg = Ernie2Config(vocab_size=99, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                       max_position_embeddings=64, task_vocab_size=8, task_id=3)
    S = 16
    ids = np.random.RandomState(0).randint(5, 99, (2, S)).astype(np.int32)
    ids[:, 0] = 2
    mask, seg = np.ones_like(ids), np.zeros_like(ids)
    seg[:, 9:] = 1
    mask[1, 12:] = 0
    tasks = np.asarray([5, 1], np.int32)
    model = Ernie2ForPreTraining(cfg)
    params = jax.tree.map(np.asarray, params_lib.plain_tree(model.init(
        jax.random.PRNGKey(1), ids, mask, seg, tasks, np.zeros((2, 3), np.int32))["params"]))
    vocab = _vocab(tmp_path / "vocab.txt", 99)
    tok = {"tokenizer": {"kind": "wordpiece", "files": ["vocab.txt"], "lower_case": True}}
    fam = registry.get("ernie2")
    pre = params_lib.save_params(tmp_path / "pre", params, cfg, "pretraining", tok, [vocab])
    report = fam.interop.hf.export_dir(pre, tmp_path / "hf_mlm")
    assert report.architecture == "ErnieForMaskedLM"
    assert report.left_out == ("ernie2/pooler", "capitalisation", "token_document", "reorder", "distance")
    hf_cfg = json.loads((tmp_path / "hf_mlm" / "config.json").read_text())
    assert (hf_cfg["use_task_id"], hf_cfg["task_type_vocab_size"], hf_cfg["ptm_task_id"]) == (True, 8, 3)
    ref, load_info = transformers.ErnieForMaskedLM.from_pretrained(tmp_path / "hf_mlm", output_loading_info=True)
    assert not load_info["missing_keys"] and not load_info["unexpected_keys"]
    pt = lambda x: torch.tensor(np.asarray(x, np.int64))  # noqa: E731
    with torch.no_grad():
        want = ref.eval()(input_ids=pt(ids), attention_mask=pt(mask), token_type_ids=pt(seg),
                          task_type_ids=pt(np.repeat(tasks[:, None], S, 1))).logits.numpy()
    got = model.apply({"params": params}, ids, mask, seg, tasks, np.tile(np.arange(S), (2, 1)))["mlm"]
    np.testing.assert_allclose(np.asarray(got), want, atol=5e-5)

    trunk = {"ernie2": params["ernie2"]}
    enc_cfg = dataclasses.replace(cfg, task_id=0)
    enc = params_lib.save_params(tmp_path / "enc", trunk, enc_cfg, "encoder", tok, [vocab])
    assert fam.interop.hf.export_dir(enc, tmp_path / "hf_enc").architecture == "ErnieModel"
    ref = transformers.ErnieModel.from_pretrained(tmp_path / "hf_enc").eval()
    for task_ids, theirs in ((tasks, pt(np.repeat(tasks[:, None], S, 1))), (None, None)):
        with torch.no_grad():
            want = ref(input_ids=pt(ids), attention_mask=pt(mask), token_type_ids=pt(seg), task_type_ids=theirs)
        seq, pooled = Ernie2Model(enc_cfg).apply({"params": trunk["ernie2"]}, ids, mask, seg, task_ids=task_ids)
        np.testing.assert_allclose(np.asarray(seq), want.last_hidden_state.numpy(), atol=5e-5)
        np.testing.assert_allclose(np.asarray(pooled), want.pooler_output.numpy(), atol=5e-5)

    for folder, head, ours in (("hf_mlm", "masked_lm", {"ernie2": {k: v for k, v in params["ernie2"].items()
                                                                  if k != "pooler"}, "mlm": params["mlm"]}),
                               ("hf_enc", "encoder", trunk)):
        assert registry.hf_family("ernie").name == "ernie"
        back, back_cfg, info, _ = registry.hf_family("ernie").interop.hf.load(tmp_path / folder)
        assert back_cfg == (cfg if head == "masked_lm" else enc_cfg) and info["head"] == head
        assert registry.family_of_params(back).name == "ernie2"
        flat = lambda t: {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(t)}  # noqa
        b, o = flat(back), flat(ours)
        assert b.keys() == o.keys() and all(np.array_equal(b[k], o[k]) for k in o)

    hf_cfg["task_type_vocab_size"] = 5
    (tmp_path / "hf_mlm" / "config.json").write_text(json.dumps(hf_cfg))
    with pytest.raises(CheckpointError, match=r"task_type_vocab_size=5 disagrees with the weights: "
                                              r"ernie\.embeddings\.task_type_embeddings\.weight has shape \(8, 32\)"):
        registry.hf_family("ernie").interop.hf.load(tmp_path / "hf_mlm")
    meta = json.loads((enc / "ptm.json").read_text())
    meta["model"]["task_id"] = 8
    (enc / "ptm.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"model\.task_id=8 is outside the task embedding \(model\."
                                              r"task_vocab_size=8 rows, ids 0\.\.7\)"):
        fam.interop.hf.export_dir(enc, tmp_path / "hf_bad")


def test_a_task_id_outside_the_task_table_is_a_config_error():
    with pytest.raises(ConfigError, match=r"model\.task_id=8 is outside the task embedding \(model\.task_vocab_size=8 "
                                          r"rows, ids 0\.\.7\); set model\.task_id"):
        load_config("ernie2_tiny", ["model.task_id=8"])
    assert load_config("ernie2_tiny", ["model.task_id=7"]).model.task_id == 7
