"""ERNIE finetuning (ptm_jax/families/ernie/task_heads.py): BERT's heads on the "ernie" trunk (ERNIE 1.0)
and on the "ernie2" trunk with its task embedding (ERNIE 2.0), so `ptm finetune` runs CoNLL-2003 NER and a GLUE
task from an ``ernie_mlm`` or an ``ernie2`` pretraining run.

Two real runs, module-scoped. ERNIE 1.0: ernie_mlm pretrains a 2-layer H=32 model for 4 steps on the first 40 kB
of Pride and Prejudice (lexicon units). ERNIE 2.0: ernie2 pretrains the same shape (8 task rows) for 4 steps on
the first 3000 lines of tiny-shakespeare, the five tasks started by step 2. From each, CoNLL-2003 (64 training /
32 dev sentences of eng.train / eng.testa) and SST-2 (64 / 32 rows of train.tsv / dev.tsv) are finetuned for one
epoch (4 steps of 16) each. Subsets are written to tmp files in file order (deterministic across processes)."""
import dataclasses
from itertools import islice

import numpy as np
import pytest

from ptm_jax import fs
from ptm_jax.config import FinetuneConfig, RunConfig, TokenizerConfig, TrainConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import load_params
from ptm_jax.families import registry
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig
from ptm_jax.train.finetune import finetune
from ptm_jax.data.pretraining.source import SubsetSource
from ptm_jax.families.bert.mlm_nsp_data import local_batches
from ptm_jax.train.stages import prepare_corpus, pretrain

LEXICON = "entity\tElizabeth Bennet\nentity\tMr. Darcy\nentity\tJane\nphrase\tyoung lady\nphrase\tgreat deal\n"
STEPS, LR = 4, 1e-3  # one epoch of batch 16 over 59 CoNLL sentences / 64 SST-2 rows


def _first_sentences(src, dst, n):
    """The first ``n`` blank-line separated CoNLL sentences of ``src`` (the -DOCSTART- line kept)."""
    blocks = src.read_text(encoding="utf-8").split("\n\n")
    dst.write_text("\n\n".join(blocks[: n + 1]) + "\n\n", encoding="utf-8")


@pytest.fixture(scope="module")
def data(shared_data, tmp_path_factory):
    """The text, lexicon and task subsets both runs read."""
    d = tmp_path_factory.mktemp("ernie_ft")
    text = (shared_data / "corpus/gutenberg/1342-0.txt").read_bytes()[:40_000].decode("utf-8", "ignore")
    (d / "pp.txt").write_text(text, encoding="utf-8")
    (d / "lexicon.tsv").write_text(LEXICON, encoding="utf-8")
    (d / "conll").mkdir()
    _first_sentences(shared_data / "conll2003/eng.train", d / "conll/eng.train", 64)
    _first_sentences(shared_data / "conll2003/eng.testa", d / "conll/eng.testa", 32)
    (d / "SST-2").mkdir()
    for name, n in (("train.tsv", 64), ("dev.tsv", 32)):
        lines = (shared_data / "glue/SST-2" / name).read_text(encoding="utf-8").splitlines()
        (d / "SST-2" / name).write_text("\n".join(lines[: n + 1]) + "\n", encoding="utf-8")
    lines = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()[:3000]
    (d / "shakespeare.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def _finetune_both(cfg, d, out, model_fields=None):
    """CoNLL-2003 and SST-2 finetuned from ``cfg``'s pretraining run; ``model_fields``: task -> the run's own
    model settings (``run_settings``, e.g. ERNIE 2.0's ``task_id``)."""
    model = cfg.model
    for task, data_dir in (("conll2003", d / "conll"), ("sst-2", d)):
        cfg.model = dataclasses.replace(model, **(model_fields or {}).get(task, {}))
        cfg.finetune = FinetuneConfig(task=task, data_dir=str(data_dir), max_seq_length=64, batch_size=16,
                                      epochs=1.0, learning_rate=LR, warmup_proportion=0.0,
                                      weight_decay=0.0)
        out[task] = finetune(cfg)
        out[task + "_best"] = load_params(fs.path(cfg.output_dir) / f"finetune-{task}" / "best")
    cfg.model = model
    return out


def _dev_metrics(task, best, d):
    """The dev metrics of the best saved model recomputed apart from the finetuning loop's evaluation (its batching,
    padding, label alignment and metric code): each dev example encoded here, padded alone to 64 with its own
    attention mask, all of them in one call of the family's task head, then in numpy the mean cross-entropy
    (``loss``) and the accuracy over the labelled positions (SST-2: each row, labels from dev.tsv; CoNLL-2003: each
    word's first piece, tags from the raw eng.testa, IOB1 turned into the IOB2 of the saved label names), and
    CoNLL-2003's entity F1 by seqeval. (n examples, metrics)."""
    import jax
    import jax.numpy as jnp
    from seqeval.metrics import f1_score

    from ptm_jax.export.params import load_tokenizer

    params, model_cfg, info, tok_dir = best
    tok, names = load_tokenizer(info, tok_dir), info["label_names"]
    head = registry.get(model_cfg.family).finetuning.task_heads[
        "token_classification" if task == "conll2003" else "sequence_classification"]()(model_cfg, len(names))

    def log_probs(sequences):
        """Per example, the log-softmax of its [CLS] ids [SEP] (SST-2: [C]; CoNLL: [length, C])."""
        rows = [[tok.cls_id, *ids, tok.sep_id] for ids in sequences]
        x = np.zeros((len(rows), 64), np.int32)
        mask = np.zeros_like(x)
        for i, r in enumerate(rows):
            x[i, :len(r)], mask[i, :len(r)] = r, 1
        z = np.asarray(jax.jit(head.apply)({"params": params}, jnp.asarray(x), jnp.asarray(mask),
                                           jnp.zeros_like(x)), np.float64)
        z = z - z.max(-1, keepdims=True)
        z = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return [z[i] if z.ndim == 2 else z[i, :len(r)] for i, r in enumerate(rows)]

    nll, hits = [], []
    if task == "sst-2":
        rows = [line.split("\t") for line in (d / "SST-2/dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
        for (text, label), lp in zip(rows, log_probs([tok.encode(text)[:62] for text, _ in rows])):
            nll.append(-lp[names.index(label)])
            hits.append(int(np.argmax(lp)) == names.index(label))
        return len(rows), {"loss": np.mean(nll), "accuracy": np.mean(hits)}
    sentences = []
    for block in (d / "conll/eng.testa").read_text(encoding="utf-8").split("\n\n"):
        lines = [ln.split() for ln in block.splitlines() if ln.strip() and not ln.startswith("-DOCSTART-")]
        if not lines:
            continue
        tags = [ln[-1] for ln in lines]
        tags = ["B" + t[1:] if t.startswith("I-") and (i == 0 or tags[i - 1][2:] != t[2:]) else t
                for i, t in enumerate(tags)]                                   # IOB1 -> IOB2
        pieces = [[tok.token_to_id(p) for p in tok.tokenize(ln[0])] or [tok.token_to_id("[UNK]")] for ln in lines]
        firsts = np.cumsum([0] + [len(p) for p in pieces])[:-1]
        kept = sum(int(f + len(p) <= 62) for f, p in zip(firsts, pieces))    # the words whose pieces fit in 64
        sentences.append((tags, firsts, kept, [i for p in pieces[:kept] for i in p]))
    gold, pred = [], []
    for (tags, firsts, kept, ids), lp in zip(sentences, log_probs([s[3] for s in sentences])):
        lp = lp[1 + firsts[:kept]]
        want = [names.index(t) for t in tags[:kept]]
        nll.extend(-lp[np.arange(kept), want])
        hits.extend(lp.argmax(-1) == want)
        gold.append(tags)
        pred.append([names[k] for k in lp.argmax(-1)] + ["O"] * (len(tags) - kept))
    return len(gold), {"loss": np.mean(nll), "token_accuracy": np.mean(hits), "f1": f1_score(gold, pred)}


def _check_stage_and_dev_metrics(run: dict, task: str, metric: str) -> None:
    """The stage's summary (steps, training rows: 64 CoNLL blocks hold 5 -DOCSTART- lines, so 59 sentences; the
    last step kept as best), and the metrics the loop recorded for the saved model equal to the ones recomputed
    apart from it (30 CoNLL dev sentences, 32 SST-2 rows). After 4 steps the tagger still tags every word O, so
    its F1 is 0.0 both ways and its loss and token accuracy (measured: 1.7353, 0.7652) carry the check; SST-2:
    0.6887, 0.5625."""
    s = run[task]
    assert s["step"] == STEPS and s["train_rows"] == (59 if task == "conll2003" else 64)
    assert np.isfinite(s["train"]["loss"]) and s["best"]["step"] == STEPS
    n, metrics = _dev_metrics(task, run[task + "_best"], run["data"])
    recorded = s["best"]["metrics"]
    assert n == (30 if task == "conll2003" else 32) and metric in metrics
    for k, v in metrics.items():
        assert recorded[k] == pytest.approx(v, rel=1e-4, abs=1e-9), k


@pytest.fixture(scope="module")
def run(data):
    d = data
    cfg = RunConfig(output_dir=str(d / "run"), objective="ernie_mlm",
                    model=ErnieConfig(vocab_size=800, hidden_size=32, num_layers=2, num_heads=2,
                                      intermediate_size=64, max_position_embeddings=64),
                    tokenizer=TokenizerConfig(kind="wordpiece", vocab_size=800),
                    data=ErnieDataConfig(corpus=str(d / "pp.txt"), max_seq_length=64, max_predictions_per_seq=10,
                                         eval_documents=2, unit_sources="lexicon",
                                         lexicon_file=str(d / "lexicon.tsv"), phrase_from_step=0,
                                         entity_from_step=0),
                    train=TrainConfig(batch_size=8, steps=4, learning_rate=2e-3, warmup_steps=1, log_every=1,
                                      eval_every=100, eval_batches=1, checkpoint_every=100, progress_bar=False))
    pre = pretrain(cfg)
    pretrained, _, info, _ = load_params(d / "run")
    return _finetune_both(cfg, d, {"pre": pre, "pretrained": pretrained, "pre_info": info, "cfg": cfg, "data": d})


def test_conll2003_and_sst2_finetune_from_an_ernie_pretraining_run(run):
    fam = registry.get("ernie")
    assert run["pre_info"]["head"] == "masked_lm" and "ernie" in run["pretrained"]
    for task, head, metric in (("conll2003", "token_classification", "f1"),
                               ("sst-2", "sequence_classification", "accuracy")):
        _check_stage_and_dev_metrics(run, task, metric)
        params, model_cfg, info, _ = run[task + "_best"]
        assert model_cfg.family == "ernie" and set(params) == {"ernie", "classifier"}
        assert info["head"] == head == fam.layout.infer_head(params)
        assert params["classifier"]["dense"]["kernel"].shape == (32, 9 if task == "conll2003" else 2)
        # the trunk was merged from pretraining: Adam moves each weight by about LR per step (up to ~2.5 LR for
        # an embedding row whose gradient is sparse), so the word embeddings stay within 3 * STEPS * LR = 0.012
        # of the pretrained ones (measured: 0.010), while two independent N(0, 0.02) initialisations of these
        # 800 x 32 tables differ by ~0.08 at the maximum
        pre = np.asarray(run["pretrained"]["ernie"]["embeddings"]["word_embeddings"]["embedding"], np.float32)
        ft = np.asarray(params["ernie"]["embeddings"]["word_embeddings"]["embedding"], np.float32)
        assert np.abs(ft - pre).max() <= 3 * STEPS * LR
        assert "pooler" in params["ernie"] if head == "sequence_classification" else "pooler" not in params["ernie"]


@pytest.fixture(scope="module")
def run2(data):
    """ERNIE 2.0: ernie2_tiny at vocabulary 800 pretrained 4 steps, then SST-2 finetuned with task id 2
    (``model.task_id``) and CoNLL-2003 with the default 0."""
    d = data
    cfg = load_config("ernie2_tiny", [f"data.corpus={d / 'shakespeare.txt'}", "data.format=lines",
                                      f"output_dir={d / 'run2'}", "tokenizer.vocab_size=800", "model.vocab_size=800",
                                      'data.task_from_steps="0,1,1,2,2"', "train.batch_size=8", "train.steps=4",
                                      "train.warmup_steps=1", "train.log_every=1", "train.eval_every=100",
                                      "train.eval_batches=1", "train.checkpoint_every=100"])
    pre = pretrain(cfg)
    pretrained, _, info, _ = load_params(d / "run2")
    return _finetune_both(cfg, d, {"pre": pre, "pretrained": pretrained, "pre_info": info, "cfg": cfg, "data": d},
                          {"sst-2": {"task_id": 2}})


def test_conll2003_and_sst2_finetune_from_an_ernie2_run_with_a_fixed_task_id(run2):
    """The trunk, task table included, comes from the pretraining run; the finetuning rows all read task row
    ``model.task_id`` (2 for SST-2, 0 for CoNLL-2003): with weight decay 0, Adam leaves the other seven rows of the
    table bit-equal to the pretrained ones (their gradient is 0) and moves the used row."""
    fam = registry.get("ernie2")
    assert run2["pre_info"]["head"] == "pretraining" and run2["pre"]["step"] == 4
    pre_tasks = np.asarray(run2["pretrained"]["ernie2"]["embeddings"]["task_embeddings"]["embedding"], np.float32)
    for task, head, metric, task_id in (("conll2003", "token_classification", "f1", 0),
                                        ("sst-2", "sequence_classification", "accuracy", 2)):
        _check_stage_and_dev_metrics(run2, task, metric)
        params, model_cfg, info, _ = run2[task + "_best"]
        assert model_cfg.family == "ernie2" and model_cfg.task_id == task_id and model_cfg.task_vocab_size == 8
        assert set(params) == {"ernie2", "classifier"} and info["head"] == head == fam.layout.infer_head(params)
        assert "pooler" in params["ernie2"] if head == "sequence_classification" else "pooler" not in params["ernie2"]
        ft_tasks = np.asarray(params["ernie2"]["embeddings"]["task_embeddings"]["embedding"], np.float32)
        others = np.arange(8) != task_id
        assert np.array_equal(ft_tasks[others], pre_tasks[others])
        assert 0 < np.abs(ft_tasks[task_id] - pre_tasks[task_id]).max() <= 3 * STEPS * LR
        pre = np.asarray(run2["pretrained"]["ernie2"]["embeddings"]["word_embeddings"]["embedding"], np.float32)
        ft = np.asarray(params["ernie2"]["embeddings"]["word_embeddings"]["embedding"], np.float32)
        assert np.abs(ft - pre).max() <= 3 * STEPS * LR


def test_finetuned_ernie2_classifier_exports_to_transformers_with_its_task_id(run2, data, tmp_path):
    """The best SST-2 classifier (task id 2) exported: transformers' ErnieForSequenceClassification (use_task_id,
    ptm_task_id 2) given task_type_ids = 2 scores 8 dev sentences as our head does (atol 5e-5); with its default
    zeros the logits differ (the task row matters). A finetuning task id outside the table is a ConfigError."""
    import torch
    import transformers

    from ptm_jax.data.tasks.features import encode_inputs, pad_rows
    from ptm_jax.export.params import load_tokenizer

    params, model_cfg, info, tok_dir = run2["sst-2_best"]
    report = registry.get("ernie2").interop.hf.export_dir(data / "run2" / "finetune-sst-2" / "best", tmp_path / "hf")
    assert report.architecture == "ErnieForSequenceClassification" and "task_type_ids=2" in report.note
    ref = transformers.ErnieForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert ref.config.use_task_id and ref.config.ptm_task_id == 2 and ref.config.task_type_vocab_size == 8
    texts = [line.split("\t")[0] for line in (data / "SST-2/dev.tsv").read_text().splitlines()[1:9]]
    ids, segs = encode_inputs(load_tokenizer(info, tok_dir), texts, None, 64)
    x, seg = pad_rows(ids, 64), pad_rows(segs, 64)
    mask = pad_rows([np.ones(len(i), np.int32) for i in ids], 64)
    ours = registry.get("ernie2").finetuning.task_heads["sequence_classification"]()(model_cfg, 2).apply(
        {"params": params}, x, mask, seg)
    pt = lambda a: torch.tensor(np.asarray(a, np.int64))  # noqa: E731
    with torch.no_grad():
        want = ref(input_ids=pt(x), attention_mask=pt(mask), token_type_ids=pt(seg),
                   task_type_ids=pt(np.full_like(x, 2))).logits.numpy()
        zeros = ref(input_ids=pt(x), attention_mask=pt(mask), token_type_ids=pt(seg)).logits.numpy()
    np.testing.assert_allclose(np.asarray(ours), want, atol=5e-5)
    assert np.abs(zeros - want).max() > 1e-3
    cfg = run2["cfg"]
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, task_id=8),
                              finetune=FinetuneConfig(task="sst-2", data_dir=str(data), max_seq_length=64))
    with pytest.raises(ConfigError, match=r"model\.task_id=8 is outside the task embedding \(model\.task_vocab_size"
                                          r"=8 rows, ids 0\.\.7\)"):
        finetune(cfg)


def test_one_planning_pass_carries_the_unit_codes_with_the_same_bytes_as_two_passes(run):
    """mlm_nsp_data.local_batches(annotations=...) plans once; before, ERNIE planned the token and the unit-code
    streams separately with the same seed. 30 local batches of 8 rows over the real text: every token array
    (BERT's, annotation keys aside) and the unit codes equal the two separate passes byte for byte."""
    cfg = run["cfg"]
    corpus = prepare_corpus(cfg)   # the pretraining run's cached tokens and units artifact
    units = SubsetSource(corpus.artifacts["units"], corpus.train.doc_indices)
    kw = dict(seed=3, start_index=5 * 16, global_batch=16, process_index=1, process_count=2, epochs=None)
    one = list(islice(local_batches(corpus.train, cfg.data, vocab_size=800, annotations=units,
                                    annotation_name="units", **kw), 30))
    tokens = list(islice(local_batches(corpus.train, cfg.data, vocab_size=800, **kw), 30))
    codes = list(islice(local_batches(units, cfg.data, vocab_size=8, **kw), 30))
    assert len(one) == len(tokens) == len(codes) == 30
    for o, t, c in zip(one, tokens, codes):
        assert set(o) == set(t) | {"a_units", "b_units"}
        assert all(o[k].dtype == t[k].dtype and o[k].tobytes() == t[k].tobytes() for k in t)
        assert o["a_units"].tobytes() == c["a_ids"].tobytes() and o["b_units"].tobytes() == c["b_ids"].tobytes()
    assert sum(int((o["a_units"] > 0).sum()) for o in one) > 0   # the text has units to carry
