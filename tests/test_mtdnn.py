"""MT-DNN (objectives/multi_task.py, jobs/mtdnn): the task plan's proportions, bad task lists and
weights, the ranking loss against numpy, and one real multi-task job on RTE, STS-B and an MRPC ranking task
(subsets; a tiny random BERT with all-MiniLM-L6-v2's vocabulary) that is stopped, resumed, trains every head,
and keeps a best model per task that `ptm eval` scores again."""
from __future__ import annotations

import json
import math
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, RunConfig
from ptm_jax.jobs.mtdnn.config import MtdnnConfig
from ptm_jax.errors import ConfigError
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.objectives.multi_task import (
    MultiTaskObjective,
    TaskPlan,
    read_task,
    task_names,
    task_weights,
)

SAN_KEYS = {"summary", "attention", "classifier", "gru"}
"""The parameters of a SAN answer module (models/san.SANAnswer)."""
GLUE_SIZES = {"cola": 8551, "sst2": 67349, "mrpc": 3668, "stsb": 5749, "rte": 2490, "wnli": 635}


def test_task_plan_steps_follow_task_sizes_and_weights_and_depend_only_on_step_and_seed():
    n = np.array(list(GLUE_SIZES.values()))
    for weights in ([1.0] * 6, [1.0, 0.25, 2.0, 1.0, 0.0, 3.0]):
        plan = TaskPlan.from_sizes(n, [32] * 6, weights, seed=3)
        want = np.asarray(weights) * n / np.sum(np.asarray(weights) * n)  # the share of steps by size x weight
        steps = 7 * plan.length + 123  # seven epochs and part of the eighth
        tasks = plan.tasks(0, steps)
        share = np.bincount(tasks, minlength=6) / steps
        # whole mini-batches per task (ceil(n/32), rounded after weighting) and the partial last epoch: 0.3%
        np.testing.assert_allclose(share, want, atol=3e-3)
        np.testing.assert_array_equal(share == 0, np.asarray(weights) == 0)  # weight 0: never sampled
        # every epoch holds exactly k_t batches of task t; the counts before any step are those of the steps
        for e in range(7):
            np.testing.assert_array_equal(np.bincount(tasks[e * plan.length:(e + 1) * plan.length], minlength=6),
                                          plan.k)
        for s in (0, 1, 999, plan.length, steps - 1):
            np.testing.assert_array_equal(plan.counts_before(s), np.bincount(tasks[:s], minlength=6))
        # a function of (seed, step): a fresh plan gives the same tasks from any step; another seed does not
        again = TaskPlan.from_sizes(n, [32] * 6, weights, seed=3)
        assert [again.task_of(s) for s in (steps - 1, 5, 2 * plan.length + 7)] == [tasks[steps - 1], tasks[5],
                                                                                    tasks[2 * plan.length + 7]]
        other = TaskPlan.from_sizes(n, [32] * 6, weights, seed=4).tasks(0, plan.length)
        assert not np.array_equal(other, tasks[:plan.length])
    # ceil(n / B) batches per epoch, as Algorithm 1 of Liu et al. 2019 merges every task's mini-batches
    assert TaskPlan.from_sizes([2490, 635], [32, 32], [1, 1], 0).k.tolist() == [78, 20]


def test_bad_task_lists_and_weights_are_config_errors_naming_the_field(tmp_path):
    assert task_names("[rte, MRPC,sts-b,mrpc_rank]") == ["rte", "mrpc", "stsb", "mrpc_rank"]
    assert task_weights([], 3) == [1.0, 1.0, 1.0] and task_weights([2, 0, 0.5], 3) == [2.0, 0.0, 0.5]
    for bad, msg in (([1.0, -0.5], r"mtdnn.task_weights\[1\]=-0.5 is negative"),
                     ([0, 0.0], r"mtdnn.task_weights=\[0, 0.0\] are all zero"),
                     ([1.0], r"mtdnn.task_weights has 1 values for 2 tasks"),
                     ([1.0, float("nan")], r"mtdnn.task_weights\[1\]=nan is not a finite number"),
                     ("[1,x]", r"mtdnn.task_weights='\[1,x\]': give a list of numbers")):
        with pytest.raises(ConfigError, match=msg):
            task_weights(bad, 2)
    for bad, msg in (([], "mtdnn.tasks is empty"), (["rte", "rte"], "names rte more than once"),
                     (["squad"], "'squad' is not a GLUE task"), (["sst2_rank"], "needs a labelled sentence-pair"),
                     (["stsb_rank"], "needs a labelled sentence-pair")):
        with pytest.raises(ConfigError, match=msg):
            task_names(bad)
    # through `ptm finetune --job mtdnn`: refused before any model or data is read
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.finetune import finetune

    cfg = load_config("bert_tiny", ["finetune.job=mtdnn", "mtdnn.tasks=[rte,mrpc]", "mtdnn.task_weights=[0,0]",
                                    f"finetune.init='{tmp_path / 'missing'}'", f"output_dir='{tmp_path}'"])
    assert cfg.plugins["mtdnn"].tasks == "[rte,mrpc]"  # the bare override text; task_names reads it
    with pytest.raises(ConfigError, match=r"mtdnn.task_weights=\[0, 0\] are all zero"):
        finetune(cfg)


def test_ranking_loss_is_softmax_cross_entropy_over_each_group(minilm_tok, glue_subset):
    cfg = run_cfg(minilm_tok, glue_subset, tasks=["mrpc_rank"], ranking_candidates=4, batch_size=8)
    task = read_task(cfg, "mrpc_rank", minilm_tok)
    obj = MultiTaskObjective(cfg.model, [task], [1.0], cfg.finetune, cfg.plugins["mtdnn"])
    # groups of 4 rows: the true second sentence once, at the position the seeded order put it
    y = task.train["labels"].reshape(-1, 4)
    assert task.units == 16 and np.all(y.sum(-1) == 1) and len(set(np.argmax(y, -1))) > 1
    batch = next(obj.train_batches(0, 8, 0, 1))
    scores = np.random.default_rng(0).normal(size=(8, 1)).astype(np.float32)
    total, count = obj._branch(0)((jnp.asarray(scores),), {k: jnp.asarray(v) for k, v in batch.items()})
    s, gold = scores[:, 0].reshape(2, 4), np.argmax(batch["labels"].reshape(2, 4), -1)
    ref = -np.sum(s[np.arange(2), gold] - np.log(np.sum(np.exp(s), -1)))
    assert float(count) == 2 and float(total) == pytest.approx(ref, rel=1e-5)
    assert float(obj.normalizers(batch)["n"]) == 2.0  # examples of a ranking batch: its groups


def test_every_tasks_dev_metrics_are_the_same_at_another_eval_batch(minilm_tok, glue_subset):
    """finetune.eval_batch_size: each task's dev rows are padded to whole batches of that size, and score() must
    find every task's predictions at the new offsets (at the training batch's offsets it scored other rows): RTE's
    24 rows fill one padded batch of 40 where they filled three of 8 (a ranking batch holds whole groups: 40 is a
    multiple of 4)."""
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.finetune import finetune_train_config
    from ptm_jax.train.loop import compile_objective, evaluate

    names = ["rte", "stsb", "mrpc_rank"]
    mesh = make_mesh(RunConfig().mesh)
    metrics, params = {}, None
    for eval_batch in (0, 40):
        cfg = run_cfg(minilm_tok, glue_subset, tasks=names, ranking_candidates=4, eval_batch_size=eval_batch)
        obj = MultiTaskObjective(cfg.model, [read_task(cfg, n, minilm_tok) for n in names], [1.0] * 3, cfg.finetune,
                                 cfg.plugins["mtdnn"])
        tcfg = finetune_train_config(cfg, obj.num_train)
        assert tcfg.eval_batch_size == eval_batch and tcfg.batch_size == 8
        compiled = compile_objective(obj, tcfg, mesh)
        if params is None:
            params = compiled.init_fn(jax.random.key(0)).params
        metrics[eval_batch] = evaluate(obj, compiled, params, mesh, tcfg.eval_rows())
    want, got = metrics[0], metrics[40]
    assert {"rte/accuracy", "stsb/pearson", "mrpc_rank/accuracy", "mean"} <= set(want) and set(got) == set(want)
    # the same predictions up to the float rounding of another batch shape: accuracies exactly; losses and the
    # correlations of a random model's near-constant STS-B scores (0.33542 against 0.33545) to 1e-3
    for k, v in want.items():
        assert math.isfinite(v) and got[k] == (v if k.endswith("accuracy") else pytest.approx(v, rel=1e-3)), \
            (k, got[k], v)
    bad = run_cfg(minilm_tok, glue_subset, tasks=["mrpc_rank"], ranking_candidates=4, eval_batch_size=42)
    with pytest.raises(ConfigError, match=r"finetune\.eval_batch_size=42 is not a multiple of "
                                          r"mtdnn\.ranking_candidates=4 \(task mrpc_rank\)"):
        MultiTaskObjective(bad.model, [read_task(bad, "mrpc_rank", minilm_tok)], [1.0], bad.finetune,
                           bad.plugins["mtdnn"])


# ---------------------------------------------------------------------------------------------- a real job

def tiny_bert(minilm_tok) -> BertConfig:
    return BertConfig(vocab_size=minilm_tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                      intermediate_size=64, max_position_embeddings=64)


def run_cfg(minilm_tok, glue, **fine) -> RunConfig:
    """finetune.job=mtdnn; the keyword arguments that are MtdnnConfig fields go to the [mtdnn] section."""
    mt = {k: fine.pop(k) for k in list(fine) if k in MtdnnConfig.__dataclass_fields__}
    cfg = RunConfig(model=tiny_bert(minilm_tok), plugins={"mtdnn": MtdnnConfig(**mt)})
    cfg.finetune = FinetuneConfig(data_dir=str(glue), max_seq_length=32, train_subset=16,
                                  **{"job": "mtdnn", "batch_size": 8, **fine})
    cfg.train.progress_bar = False
    return cfg


@pytest.fixture(scope="module")
def glue_subset(shared_data, tmp_path_factory):
    """RTE, STS-B and MRPC with their real train files and the first 24 (MRPC: 48) dev rows."""
    out = tmp_path_factory.mktemp("glue")
    for d, rows in (("RTE", 24), ("STS-B", 24), ("MRPC", 48)):
        (out / d).mkdir()
        shutil.copy(shared_data / "glue" / d / "train.tsv", out / d / "train.tsv")
        lines = (shared_data / "glue" / d / "dev.tsv").read_text(encoding="utf-8").splitlines(True)
        (out / d / "dev.tsv").write_text("".join(lines[: rows + 1]), encoding="utf-8")
    return out


def save_random_bert(minilm_tok, minilm_vocab, out) -> BertConfig:
    """A tiny BERT encoder with random weights, without compiling an init: N(0, 0.02) kernels and embeddings,
    LayerNorm 1 / 0, zero biases; saved as a params directory with all-MiniLM-L6-v2's vocabulary."""
    from ptm_jax.export.params import save_params
    from ptm_jax.families.bert.model import BertModel

    mc = tiny_bert(minilm_tok)
    ids = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: nn.meta.unbox(BertModel(mc, name="bert").init(jax.random.key(0), ids, ids + 1,
                                                                                   ids)))["params"]
    rng = np.random.default_rng(0)
    init = jax.tree_util.tree_map_with_path(
        lambda path, s: (np.ones if path[-1].key == "scale" else np.zeros)(s.shape, np.float32)
        if path[-1].key in ("scale", "bias") else rng.normal(0, 0.02, s.shape).astype(np.float32), shapes)
    save_params(out, {"bert": init}, mc, "encoder", tokenizer_files=[minilm_vocab])
    return mc


def test_multitask_job_trains_every_head_resumes_exactly_and_keeps_a_best_model_per_task(
        minilm_tok, minilm_vocab, glue_subset, tmp_path):
    from ptm_jax.export.params import load_params
    from ptm_jax.train.evaluation import evaluate_task
    from ptm_jax.train.finetune import finetune

    mc = save_random_bert(minilm_tok, minilm_vocab, tmp_path / "init")
    # mtdnn.answer=san: RTE (pair classification) gets the SAN answer module, STS-B and the ranking task keep
    # their linear heads (Liu et al. 2019 Sec. 3.1)
    cfg = run_cfg(minilm_tok, glue_subset, tasks=["rte", "stsb", "mrpc_rank"], ranking_candidates=2,
                  init=str(tmp_path / "init"), epochs=10.0, learning_rate=2e-3, warmup_proportion=0.0, eval_every=40,
                  finetune_epochs=0.0, answer="san")
    cfg.output_dir = str(tmp_path / "run")
    cfg.train.log_every = 1
    first = finetune(cfg, stop_after=13)  # stopped inside the multi-task stage (a checkpoint at step 13) ...
    assert first["step"] == 13 and not first["complete"]
    summary = finetune(cfg)  # ... and the same command goes on from it
    # 16 examples per task, batches of 8 rows: 2 + 2 + 4 batches (16 MRPC groups of 2 candidates) per epoch
    assert summary["plan"] == {"rte": 2, "stsb": 2, "mrpc_rank": 4} and summary["steps"] == 80
    assert summary["complete"] and summary["step"] == 80
    assert summary["answers"] == {"rte": "san", "stsb": "linear", "mrpc_rank": "linear"}
    stage = tmp_path / "run" / "mtdnn" / "multitask"
    rows = [json.loads(x) for x in (stage / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    # resumed exactly: every step logged once, each with the task the plan gives that step
    plan = TaskPlan([2, 2, 4], cfg.finetune.seed)
    assert [r["step"] for r in train] == list(range(1, 81))
    assert [round(r["task"]) for r in train] == plan.tasks(0, 80).tolist()
    # ... and the resumed data stream is the uninterrupted one from step 13 on
    objective = MultiTaskObjective(mc, [read_task(cfg, t, minilm_tok) for t in cfg.plugins["mtdnn"].tasks],
                                   [1.0] * 3, cfg.finetune, cfg.plugins["mtdnn"])
    whole, resumed = objective.train_batches(0, 8, 0, 1), objective.train_batches(13 * 8, 8, 0, 1)
    for s in range(30):
        a = next(whole)
        if s >= 13:
            b = next(resumed)
            assert all(np.array_equal(a[k], b[k]) for k in a), s
    # every head trains (RTE's SAN module too): each task's mean loss over its last five steps is below 0.8 x
    # that of its first five
    for i, name in enumerate(["rte", "stsb", "mrpc_rank"]):
        losses = [r["loss"] for r in train if round(r["task"]) == i]
        assert all(math.isfinite(x) for x in losses)
        assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), (name, losses)
    evals = [r for r in rows if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [40, 80]
    assert {"rte/accuracy", "stsb/spearman", "stsb/pearson", "mrpc_rank/accuracy", "mean"} <= set(evals[-1])
    # a best model per task, a single-task classifier that `ptm eval` scores to the figure kept with it (RTE's:
    # head san_classification, which `ptm eval` rebuilds as models/san.EncoderWithSAN from its ptm.json)
    for name, metric, labels, head in (("rte", "accuracy", 2, "san_classification"),
                                       ("stsb", "spearman", 1, "sequence_classification")):
        best = json.loads((tmp_path / "run" / "mtdnn" / name / "best.json").read_text())
        assert best["value"] == max(r[f"{name}/{metric}"] for r in evals)
        params, _, info, _ = load_params(tmp_path / "run" / "mtdnn" / name / "best")
        assert info["head"] == head and info["num_labels"] == labels
        assert set(params) == {"bert", "classifier"}
        assert (set(params["classifier"]) == SAN_KEYS and info["san"] == {"steps": 5, "step_dropout": 0.1}
                ) if head == "san_classification" else set(params["classifier"]) == {"dense"}
        if name == "rte":
            ecfg = run_cfg(minilm_tok, glue_subset, job="task", task="rte")
            got = evaluate_task(ecfg, str(tmp_path / "run" / "mtdnn" / name / "best"))
            assert got["metrics"]["accuracy"] == pytest.approx(best["metrics"]["rte/accuracy"], abs=1e-9)
    assert summary["best_per_task"]["mrpc_rank"]["accuracy"] == max(r["mrpc_rank/accuracy"] for r in evals)


def test_san_head_goes_whole_into_per_task_finetuning_and_is_kept_as_the_best_model(
        minilm_tok, minilm_vocab, glue_subset, tmp_path):
    """MRPC alone with mtdnn.answer=san (one task: the multi-task and per-task stages compile to the
    same program): the per-task stage starts from the multi-task stage's SAN head exactly and trains it."""
    from ptm_jax.export.params import load_params
    from ptm_jax.train.finetune import finetune
    from ptm_jax.jobs.mtdnn.job import _from_multitask

    mc = save_random_bert(minilm_tok, minilm_vocab, tmp_path / "init")
    cfg = run_cfg(minilm_tok, glue_subset, tasks=["mrpc"], answer="san", init=str(tmp_path / "init"),
                  epochs=4.0, learning_rate=2e-3, warmup_proportion=0.0, finetune_epochs=1.0)
    cfg.output_dir = str(tmp_path / "run")
    summary = finetune(cfg)
    root = tmp_path / "run" / "mtdnn"
    assert summary["answers"] == {"mrpc": "san"} and summary["complete"] and summary["step"] == 8
    assert summary["finetune"]["mrpc"]["step"] == 2
    shared, _, _, _ = load_params(root / "multitask")
    assert set(shared["head_0"]) == SAN_KEYS
    # the per-task model takes the multi-task encoder and SAN head, whole and exact ...
    single = MultiTaskObjective(mc, [read_task(cfg, "mrpc", minilm_tok)], [1.0], cfg.finetune, cfg.plugins["mtdnn"])
    fresh = nn.meta.unbox(jax.eval_shape(single.init, jax.random.key(0), single.example_batch(8)))
    merged = _from_multitask({"params": shared}, "bert", 0)(fresh)
    assert jax.tree.structure(merged) == jax.tree.structure(fresh)
    jax.tree.map(np.testing.assert_array_equal, merged["params"], {"bert": shared["bert"], "head_0": shared["head_0"]})
    # ... and the per-task stage trains from it: after its 2 steps (lr 2e-3 then 1e-3) every SAN tensor has moved,
    # by at most what two steps of BERT's Adam without bias correction can move a weight from where the stage
    # started (0.1 / 0.001**0.5 x 2e-3 + 0.19 / 0.001999**0.5 x 1e-3 = 0.01057; weight decay adds < 1e-6).
    # A fresh N(0, 0.02) head, or the pre-multi-task weights, would be ~0.04 away
    tuned, _, _, _ = load_params(root / "mrpc" / "finetune")
    moved = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), tuned["head_0"],
                         shared["head_0"])
    # the summary's bias gets no gradient but rounding (a softmax does not see a shift): it stays put
    assert moved["summary"]["dense"].pop("bias") < 1e-5
    assert all(1e-3 < m < 0.01058 for m in jax.tree.leaves(moved)), moved
    # the best of both stages: a san_classification model with its settings
    params, _, info, _ = load_params(root / "mrpc" / "best")
    assert info["head"] == "san_classification" and info["san"] == {"steps": 5, "step_dropout": 0.1}
    assert set(params["classifier"]) == SAN_KEYS
    # `ptm predict --pairs` reads the kept SAN model: its probabilities are the exp of the objective's outputs
    import argparse

    from ptm_jax.data.tasks.glue import get_task, read_glue
    from ptm_jax.commands import export as commands
    from ptm_jax.objectives.san_classification import SanClassificationObjective

    dev = read_glue(glue_subset, "mrpc", "dev")[0][:6]
    (tmp_path / "pairs.tsv").write_text("".join(f"{e.text_a}\t{e.text_b}\n" for e in dev), encoding="utf-8")
    parser = argparse.ArgumentParser()
    commands.register(parser.add_subparsers(dest="command"))
    best = root / "mrpc" / "best"
    args = parser.parse_args(["predict", str(best), str(tmp_path / "pairs.tsv"), "--pairs", "--max-length", "32",
                              "--out", str(tmp_path / "p.tsv")])
    assert args.handler(args) == 0
    rows = [r.split("\t") for r in (tmp_path / "p.tsv").read_text().splitlines()]
    assert rows[0][:2] == ["index", "prediction"] and len(rows) == 7
    probs = np.array([[float(x) for x in r[2:]] for r in rows[1:]])
    obj = SanClassificationObjective(mc, get_task("mrpc"), None, dev, minilm_tok, cfg.finetune, info)
    want = np.exp(np.asarray(obj.predict({"params": params}, {k: jnp.asarray(v) for k, v in obj.dev.items()})
                             ["logits"], np.float64))
    np.testing.assert_allclose(probs, want, atol=2e-6)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    args = parser.parse_args(["predict", str(best), str(tmp_path / "pairs.tsv")])
    with pytest.raises(ConfigError, match="give --pairs"):
        args.handler(args)
