"""MT-DNN: one shared encoder, a head per task, one task's mini-batch per step (Liu et al. 2019, "Multi-Task
Deep Neural Networks for Natural Language Understanding", Sec. 3-4; namisan/mt-dnn for facts).

Tasks (``mtdnn.tasks``; the ``[mtdnn]`` section, ``jobs/mtdnn/config.py``):

- classification (a GLUE task with labels: CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE, WNLI): pooled [CLS] ->
  dropout -> linear -> softmax cross-entropy (Sec. 3, "single-sentence" and "pairwise text classification"
  output layers; mt-dnn's ``answer_opt 0``). ``mtdnn.answer=san`` gives every sentence-pair
  classification task (MRPC, QQP, MNLI, QNLI, RTE, WNLI) the paper's output layer for pairwise text
  classification instead: the stochastic answer network over the encoder's last layer (``models/san.py``:
  K = ``mtdnn.san_steps`` steps, stochastic prediction dropout ``mtdnn.san_step_dropout``; mt-dnn's
  ``answer_opt 1``). Single-sentence tasks, STS-B and ranking tasks keep their linear heads, as in Sec. 3.1;
- pairwise similarity regression (STS-B): pooled [CLS] -> linear score, squared error;
- pairwise ranking (``<pair task>_rank``, e.g. ``mrpc_rank``, ``rte_rank``, ``qnli_rank``): QNLI in the paper
  ranks a question's candidate sentences. The GLUE copy of QNLI pairs a question with one sentence and is not
  local here, so a ranking task is built from a GLUE pair task: each positive pair (paraphrase, entailment)
  becomes a group of ``mtdnn.ranking_candidates`` candidates, its own second sentence and C - 1 second
  sentences of other positive pairs of the split (drawn and ordered with a seeded generator keyed on
  (``finetune.subset_seed``, group)); the loss is the softmax cross-entropy of the true candidate over the
  group's scores (mt-dnn's ``RankCeCriterion``, gamma = 1); the metric is the accuracy of ranking it first.

Task sampling (the paper's Algorithm 1): each epoch is the multiset of every task's mini-batches, shuffled, so
task t gets ``k_t = ceil(n_t / B)`` of the epoch's steps (``n_t`` its training examples; groups x C rows for
a ranking task), i.e. steps in proportion to the task's size. ``mtdnn.task_weights`` scales them:
``k_t = max(1, round(w_t * ceil(n_t / B)))`` (0 drops the task from training; it is still evaluated). The
order of epoch e is a permutation keyed on (``finetune.seed``, e), so the task of a step, and how many batches
every task has had before it, are functions of the step and the seed alone: a resumed run samples the same
tasks and continues every task's own data stream (``task_data.shuffled_stream``) where it stopped.

One jitted step serves every task: the batch carries its task id (``task``, one value per row), the encoder
runs once, every head's output is computed (each a [hidden, <= 3] product, or a SAN head's K small GRU and
attention steps over the sequence, small beside the encoder) and
``lax.switch`` on the id takes the task's loss, so only that head and the encoder get gradients. The other
heads get zero gradients, as in mt-dnn (PyTorch 1.x ``zero_grad`` left zero tensors, so its Adam moved them by
their moments too). One step instead of one per head keeps the one loop (``train/loop.py``) and one compile.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ptm_jax import config_loading as config_lib
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.registry import PRIMARY, RANK_SUFFIX, take_subset
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.evaluate.glue_metrics import task_metrics
from ptm_jax.objectives.san_classification import SAN_HEAD, san_settings
from ptm_jax.objectives.task_data import padded_batches, shuffled_stream, task_head

# ---------------------------------------------------------------------------------------------- the task list

def task_names(value: Any, where: str = "mtdnn.tasks") -> list[str]:
    """``mtdnn.tasks`` as a list of names: a list, or the bare override text ``[rte,mrpc]`` / ``rte,mrpc``."""
    if isinstance(value, str):
        value = [v for v in value.strip().strip("[]").replace(" ", "").split(",") if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}={value!r}: give a list of task names, e.g. {where}=[rte,mrpc,stsb]")
    names = [v.lower().replace("-", "") for v in value]
    if not names:
        raise ConfigError(f"{where} is empty: finetune.job=mtdnn trains the tasks listed there, e.g. "
                          f"{where}=[rte,mrpc,stsb]")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where} names {', '.join(dup)} more than once; list each task once")
    from ptm_jax.data.tasks.glue import GLUE_TASKS

    for n in names:
        base = n.removesuffix(RANK_SUFFIX)
        if base not in GLUE_TASKS or base == "ax":
            raise ConfigError(f"{where}: {n!r} is not a GLUE task ({', '.join(t for t in GLUE_TASKS if t != 'ax')}) "
                              f"or a ranking task '<pair task>{RANK_SUFFIX}'")
        if n != base and (not GLUE_TASKS[base].is_pair or GLUE_TASKS[base].labels is None):
            raise ConfigError(f"{where}: {n!r} needs a labelled sentence-pair task with a positive class "
                              "(mrpc, rte, qnli, qqp, wnli, mnli)")
    return names


def task_weights(weights: Sequence[Any], n: int, where: str = "mtdnn.task_weights") -> list[float]:
    """One non-negative weight per task (empty: all 1); negative, non-numeric or all-zero weights are refused."""
    if isinstance(weights, str):  # an override that is not a list literal, e.g. [1,x]
        raise ConfigError(f"{where}={weights!r}: give a list of numbers, one per task, e.g. {where}=[1,0.5]")
    if weights is None or len(weights) == 0:
        return [1.0] * n
    if len(weights) != n:
        raise ConfigError(f"{where} has {len(weights)} values for {n} tasks in mtdnn.tasks; give one weight per "
                          "task, in the same order (or none: every task weighted 1)")
    out = []
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise ConfigError(f"{where}[{i}]={w!r} is not a finite number")
        if w < 0:
            raise ConfigError(f"{where}[{i}]={w} is negative; a task's weight scales its share of the steps and "
                              "must be >= 0 (0 leaves the task out of training)")
        out.append(float(w))
    if not any(out):
        raise ConfigError(f"{where}={list(weights)} are all zero: no task would be trained; give at least one "
                          "task a positive weight")
    return out


# ---------------------------------------------------------------------------------------------- sampling

class TaskPlan:
    """Algorithm 1 of Liu et al. 2019: epoch e is ``k_t`` copies of every task t, in an order keyed on
    (seed, e); step s belongs to epoch s // L (L = sum of k_t)."""

    def __init__(self, batches_per_epoch: Sequence[int], seed: int):
        self.k = np.asarray(batches_per_epoch, np.int64)
        if self.k.ndim != 1 or np.any(self.k < 0) or self.k.sum() == 0:
            raise ValueError(f"batches per epoch must be >= 0 and not all 0, got {list(batches_per_epoch)}")
        self.length = int(self.k.sum())
        self.seed = int(seed)
        self._cache: dict[int, np.ndarray] = {}

    @classmethod
    def from_sizes(cls, units: Sequence[int], units_per_batch: Sequence[int], weights: Sequence[float],
                   seed: int) -> TaskPlan:
        k = [0 if w == 0 else max(1, round(w * math.ceil(n / b))) for n, b, w in zip(units, units_per_batch, weights)]
        return cls(k, seed)

    def epoch(self, e: int) -> np.ndarray:
        if e not in self._cache:
            order = np.random.default_rng([self.seed, int(e), 0x6D74]).permutation(self.length)
            self._cache = {e: np.repeat(np.arange(len(self.k)), self.k)[order]}
        return self._cache[e]

    def task_of(self, step: int) -> int:
        return int(self.epoch(step // self.length)[step % self.length])

    def counts_before(self, step: int) -> np.ndarray:
        """Batches every task had in steps [0, step)."""
        e, r = divmod(int(step), self.length)
        return e * self.k + np.bincount(self.epoch(e)[:r], minlength=len(self.k))

    def tasks(self, start: int, stop: int) -> np.ndarray:
        """The task of every step in [start, stop)."""
        return np.asarray([self.task_of(s) for s in range(start, stop)], np.int64)


# ---------------------------------------------------------------------------------------------- task data

@dataclasses.dataclass
class TaskData:
    """One task's featurised rows. Ranking: ``candidates`` consecutive rows per group, label 1 on the true one."""

    name: str
    kind: str  # 'classification' | 'regression' | 'ranking'
    num_outputs: int
    candidates: int
    train: dict[str, np.ndarray] | None
    dev: dict[str, np.ndarray]
    dev_labels: np.ndarray  # per example (class / score) or, ranking, the true candidate of every group
    labels: list[str] | None
    primary: str
    description: str
    pair: bool = False  # a sentence-pair task (text_a, text_b)

    @property
    def units(self) -> int:
        """Training examples (ranking: groups)."""
        return 0 if self.train is None else len(self.train["weights"]) // self.candidates


def _ranking_groups(rows: list, positive: int, candidates: int, seed: int, where: str):
    """(text_a, candidates, index of the true one) per positive pair of ``rows``."""
    pos = [e for e in rows if e.label == positive]
    if len(pos) < candidates:
        raise DataError(f"{where}: {len(pos)} positive pairs, fewer than mtdnn.ranking_candidates="
                        f"{candidates}; lower it or use more data")
    groups = []
    for g, e in enumerate(pos):
        rng = np.random.default_rng([seed, g, 0x72616E6B])
        others = rng.choice(len(pos) - 1, candidates - 1, replace=False)
        others = [pos[o + (o >= g)].text_b for o in others]  # any positive pair but g's own
        order = rng.permutation(candidates)
        texts = [e.text_b, *others]
        groups.append((e.text_a, [texts[i] for i in order], int(np.argmax(order == 0))))
    return groups


def read_task(cfg: Any, name: str, tokenizer, *, train: bool = True) -> TaskData:
    """Task ``name`` of ``mtdnn.tasks`` from ``finetune.data_dir`` (a GLUE folder or 'tfds'): train (after
    ``finetune.train_subset``: examples, or groups of a ranking task) and dev, featurised as the single-task
    classifier does (``objectives/classification.featurize``)."""
    from ptm_jax.data.tasks.glue import Example, get_task
    from ptm_jax.objectives.classification import featurize

    f = cfg.finetune
    ranking = name.endswith(RANK_SUFFIX)
    base = name[: -len(RANK_SUFFIX)] if ranking else name
    spec = get_task(base)
    train_rows = tasks.read(base, f.data_dir, "train")[0] if train else None
    dev_rows = tasks.read(base, f.data_dir, "dev")[0]
    max_len = f.max_seq_length
    if not ranking:
        if train:
            train_rows = take_subset(train_rows, f.train_subset, f.subset_seed)
            if not train_rows:
                raise DataError(f"task {name}: no training examples")
        feats = [None if r is None else featurize(r, tokenizer, max_len, spec.is_regression)
                 for r in (train_rows, dev_rows)]
        for x in feats:
            if x is not None:
                x["labels"] = x["labels"].astype(np.float32)
        kind = "regression" if spec.is_regression else "classification"
        return TaskData(name, kind, spec.num_labels, 1, feats[0], feats[1], feats[1]["labels"].copy(), spec.labels,
                        PRIMARY.get(base, "accuracy"),
                        f"{spec.name} {kind}: {len(train_rows) if train else 0} train / {len(dev_rows)} dev",
                        spec.is_pair)
    c = int(config_lib.section(cfg, "mtdnn").ranking_candidates)
    if c < 2:
        raise ConfigError(f"mtdnn.ranking_candidates={c}: a ranking group needs at least 2 candidates")
    positive = spec.labels.index("entailment" if "entailment" in spec.labels else "1")

    def rows_of(groups):
        ex = [Example(f"{name}-{g}-{j}", a, cand, float(j == true), 0)
              for g, (a, cands, true) in enumerate(groups) for j, cand in enumerate(cands)]
        return featurize(ex, tokenizer, max_len, True), np.asarray([t for _, _, t in groups], np.int64)

    tr = None
    if train:
        groups = _ranking_groups(train_rows, positive, c, f.subset_seed, f"{f.data_dir} {spec.dirname} train")
        groups = take_subset(groups, f.train_subset, f.subset_seed)
        tr, _ = rows_of(groups)
    dev_groups = _ranking_groups(dev_rows, positive, c, f.subset_seed, f"{f.data_dir} {spec.dirname} "
                                                                  f"{tasks.glue_split(base, 'dev')}")
    dev, true = rows_of(dev_groups)
    return TaskData(name, "ranking", 1, c, tr, dev, true, None, "accuracy",
                    f"{spec.name} ranking of {c} candidates: {0 if tr is None else len(tr['weights']) // c} train / "
                    f"{len(dev_groups)} dev groups")


# ---------------------------------------------------------------------------------------------- model

def answer_of(task: TaskData, mcfg: Any) -> str:
    """'san' for a sentence-pair classification task when ``mtdnn.answer=san``; 'linear' otherwise
    (single-sentence classification, STS-B regression and ranking keep their heads: Liu et al. 2019 Sec. 3.1)."""
    san_settings(mcfg)
    return "san" if mcfg.answer == "san" and task.kind == "classification" and task.pair else "linear"


class MultiTaskModel(nn.Module):
    """The family's encoder (``Finetuning.task_heads['encoder']``, named as its trunk so pretrained weights merge)
    with its pooler, one dropout, and a head per task (``head_<i>`` for the i-th task; numbered, not named, so
    one-task models of different tasks compile to the same program) -> a tuple of float32 [B, outputs] per
    task. A head is the single-task classifier's ``Dense`` on the pooled [CLS] ('linear'), or the SAN answer
    module on the last layer ('san', ``models/san.SANAnswer``: log-probabilities), as ``answers`` says."""

    encoder: Any
    cfg: Any
    trunk: str
    outputs: tuple[tuple[str, int], ...]
    dropout: float = 0.1
    answers: tuple[str, ...] = ()
    san_steps: int = 5
    san_step_dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids, input_mask, segment_ids, *, deterministic: bool = True):
        from ptm_jax.models.dropout import Dropout
        from ptm_jax.models.layers import Dense
        from ptm_jax.models.san import SANAnswer

        seq, pooled = self.encoder(self.cfg, name=self.trunk)(input_ids, input_mask, segment_ids,
                                                              deterministic=deterministic)
        pooled = seq[:, 0] if pooled is None else pooled
        pooled = Dropout(self.dropout)(pooled, deterministic=deterministic)
        answers = self.answers or ("linear",) * len(self.outputs)
        out = []
        for i, ((_, n), answer) in enumerate(zip(self.outputs, answers)):
            if answer == "san":
                out.append(SANAnswer(n, self.san_steps, self.dropout, self.san_step_dropout,
                                     self.cfg.initializer_range, name=f"head_{i}")(
                    seq, input_mask, segment_ids, deterministic=deterministic))
            else:
                out.append(Dense(n, ("embed", "classes"), self.cfg.initializer_range, name=f"head_{i}")(pooled)
                           .astype(jnp.float32))
        return tuple(out)


# ---------------------------------------------------------------------------------------------- objective

class MultiTaskObjective:
    """``tasks`` share the encoder; ``weights`` scale their share of the steps (module docstring). Batches
    hold ``input_ids``, ``input_mask``, ``segment_ids``, ``labels`` (float), ``weights`` and ``task``."""

    head = "sequence_classification"
    grad_accum = False  # a ranking group is consecutive rows; microbatches take rows i::k (finetuning uses 1)

    def __init__(self, model_cfg: Any, tasks: Sequence[TaskData], weights: Sequence[float], fcfg: Any, mcfg: Any,
                 name: str = "mtdnn"):
        from ptm_jax.families import registry

        self.name, self.fcfg, self.tasks = name, fcfg, list(tasks)
        self.batch_size = fcfg.batch_size
        self.eval_batch_size = fcfg.eval_rows()  # the dev batches' rows (score's offsets)
        for t in self.tasks:
            for field, rows in (("batch_size", self.batch_size), ("eval_batch_size", self.eval_batch_size)):
                if rows % t.candidates:
                    raise ConfigError(f"finetune.{field}={rows} is not a multiple of mtdnn.ranking_candidates="
                                      f"{t.candidates} (task {t.name}): a batch holds whole candidate groups")
        self.trunk = registry.get(model_cfg.family).layout.trunk
        san = san_settings(mcfg)
        self.answers = tuple(answer_of(t, mcfg) for t in self.tasks)
        self.model = MultiTaskModel(task_head(model_cfg, "encoder"), model_cfg, self.trunk,
                                    tuple((t.name, t.num_outputs) for t in self.tasks), fcfg.classifier_dropout,
                                    self.answers, san["steps"], san["step_dropout"])
        self.width = max(t.num_outputs for t in self.tasks)
        self.cands = np.asarray([t.candidates for t in self.tasks], np.float32)
        self.weights = list(weights)
        self.trained = [t for t, w in zip(self.tasks, self.weights) if t.train is not None]
        self.plan = TaskPlan.from_sizes([t.units for t in self.tasks],
                                        [self.batch_size // t.candidates for t in self.tasks], self.weights, fcfg.seed)
        self.num_train = self.plan.length * self.batch_size  # rows per epoch of the plan: steps = epochs x L
        self.primary_metric = f"{self.tasks[0].name}/{self.tasks[0].primary}" if len(self.tasks) == 1 else "mean"
        self.dev_batches = [math.ceil(len(t.dev["weights"]) / self.eval_batch_size) for t in self.tasks]

    # ---- data
    def _fields(self, feats: dict[str, np.ndarray], idx: np.ndarray, task: int) -> dict[str, np.ndarray]:
        out = {k: feats[k][idx] for k in ("input_ids", "input_mask", "segment_ids", "labels", "weights")}
        out["task"] = np.full(len(idx), task, np.int32)
        return out

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        ref = self.tasks[0].dev
        out = {k: np.zeros((batch_size,) + ref[k].shape[1:], ref[k].dtype)
               for k in ("input_ids", "input_mask", "segment_ids")}
        out.update(labels=np.zeros(batch_size, np.float32), weights=np.zeros(batch_size, np.float32),
                   task=np.zeros(batch_size, np.int32))
        return out

    def _stream(self, i: int, start_batch: int, global_batch: int, process_index: int, process_count: int):
        t = self.tasks[i]
        units = global_batch // t.candidates
        if units % process_count:
            raise ConfigError(f"finetune.batch_size={global_batch}: task {t.name} has {units} groups of "
                              f"{t.candidates} candidates per batch, which do not split into {process_count} equal "
                              "shares; make batch_size a multiple of ranking_candidates x the number of shares")
        seed = int(self.fcfg.seed) * 1009 + i + 1  # each task its own permutation per epoch
        for unit_idx in shuffled_stream(t.units, seed, start_batch * units, units, process_index, process_count,
                                        shuffle=self.fcfg.shuffle):
            rows = (unit_idx[:, None] * t.candidates + np.arange(t.candidates)).reshape(-1)
            yield self._fields(t.train, rows, i)

    def train_batches(self, start_example: int, global_batch: int, process_index: int, process_count: int
                      ) -> Iterator[dict[str, np.ndarray]]:
        if not self.trained:
            raise DataError(f"{self.name}: no training features (evaluation-only objective)")
        if start_example % global_batch:
            raise ValueError(f"start_example={start_example} is not a whole number of batches of {global_batch}")
        step = start_example // global_batch
        done = self.plan.counts_before(step)
        streams: dict[int, Iterator] = {}
        while True:
            i = self.plan.task_of(step)
            if i not in streams:
                streams[i] = self._stream(i, int(done[i]), global_batch, process_index, process_count)
            yield next(streams[i])
            step += 1

    def eval_batches(self, global_batch: int, process_index: int, process_count: int):
        for i, t in enumerate(self.tasks):
            for b in padded_batches(t.dev, global_batch, process_index, process_count):
                yield self._fields(b, np.arange(len(b["weights"])), i)

    def summarize(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics

    # ---- model and loss
    def init(self, rng, batch):
        b = {k: jnp.asarray(v[:1]) for k, v in batch.items()}
        return self.model.init(rng, b["input_ids"], b["input_mask"], b["segment_ids"])

    def normalizers(self, batch):
        """Examples in the batch (a ranking batch: groups)."""
        return {"n": jnp.sum(batch["weights"]) / jnp.asarray(self.cands)[batch["task"][0]]}

    def _outputs(self, params, batch, rng, train: bool):
        rngs = {"dropout": rng} if train and rng is not None else None
        return self.model.apply(params, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
                                deterministic=not train, rngs=rngs)

    def _branch(self, i: int):
        t = self.tasks[i]

        def loss(outputs, batch):
            out, y, w = outputs[i], batch["labels"], batch["weights"]
            if t.kind == "regression":
                return jnp.sum(jnp.square(out[:, 0] - y) * w), jnp.sum(w)
            if t.kind == "classification":
                per = optax.softmax_cross_entropy_with_integer_labels(out, y.astype(jnp.int32))
                return jnp.sum(per * w), jnp.sum(w)
            c = t.candidates
            scores, gold = out[:, 0].reshape(-1, c), jnp.argmax(y.reshape(-1, c), axis=-1)
            gw = w.reshape(-1, c)[:, 0]
            return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(scores, gold) * gw), jnp.sum(gw)

        return loss

    def loss(self, params, batch, rng, normalizers, train: bool):
        outputs = self._outputs(params, batch, rng, train)
        task = batch["task"][0]
        total, count = jax.lax.switch(task, [self._branch(i) for i in range(len(self.tasks))], outputs, batch)
        terms = {"loss": (total, count)}
        if train:
            terms["task"] = (task.astype(jnp.float32) * count, count)  # the step's task in the train records
        else:  # per-task held-out losses: batches of one task at a time, summed over the evaluation
            for i, t in enumerate(self.tasks):
                on = task == i
                terms[f"{t.name}/loss"] = (jnp.where(on, total, 0.0), jnp.where(on, count, 0.0))
        return total / normalizers["n"], terms

    def predict(self, params, batch) -> dict[str, jax.Array]:
        """The batch's task head: [B, widest head] (narrower heads zero-padded)."""
        outputs = self._outputs(params, batch, None, False)
        stacked = jnp.stack([jnp.pad(o, ((0, 0), (0, self.width - o.shape[1]))) for o in outputs])
        return {"scores": stacked[batch["task"][0]]}

    def score(self, outputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Every task's GLUE metrics (``glue_metrics.task_metrics``; ranking: top-1 accuracy of the groups), as
        '<task>/<metric>', and 'mean': the mean of the tasks' primary metrics."""
        scores, out, start = outputs["scores"], {}, 0
        for t, nb in zip(self.tasks, self.dev_batches):
            n = len(t.dev["weights"])
            s = scores[start:start + n, : t.num_outputs]
            start += nb * self.eval_batch_size
            base = t.name[: -len(RANK_SUFFIX)] if t.kind == "ranking" else t.name
            if t.kind == "ranking":
                m = {"accuracy": float(np.mean(np.argmax(s[:, 0].reshape(-1, t.candidates), -1) == t.dev_labels))}
            elif np.any(t.dev_labels < 0):
                m = {}
            else:
                m = task_metrics(base, s[:, 0] if t.kind == "regression" else s,
                                 t.dev_labels if t.kind == "regression" else t.dev_labels.astype(np.int64))
            out.update({f"{t.name}/{k}": v for k, v in m.items()})
        prim = [out[f"{t.name}/{t.primary}"] for t in self.tasks if f"{t.name}/{t.primary}" in out]
        if prim:
            out["mean"] = float(np.mean(prim))
        return out


@dataclasses.dataclass
class TaskView:
    """What ``train/finetune.KeepBest`` reads of an objective, for one task of a multi-task objective: the
    best model of that task is kept by its own primary metric and saved as a single-task classifier (a SAN
    task's: head ``san_classification``, with its settings in ``extra_info``)."""

    primary_metric: str
    spec: Any
    num_labels: int
    head: str = "sequence_classification"
    extra_info: dict = dataclasses.field(default_factory=dict)


def task_view(task: TaskData, mcfg: Any) -> TaskView:
    labels = dataclasses.make_dataclass("Labels", [("labels", Any)])(task.labels)
    if answer_of(task, mcfg) == "san":
        return TaskView(f"{task.name}/{task.primary}", labels, task.num_outputs, SAN_HEAD, {"san": san_settings(mcfg)})
    return TaskView(f"{task.name}/{task.primary}", labels, task.num_outputs)


def single_task_params(params: Any, trunk: str, index: int) -> dict:
    """{trunk, 'classifier'}: the model of task ``index`` as the single-task classifier lays it out
    (``BertForSequenceClassification``: ``ptm eval`` and ``ptm predict`` read it; a SAN task's head is the
    'classifier' of ``models/san.EncoderWithSAN``, which ``ptm eval`` reads)."""
    p = params.get("params", params)
    return {"params": {trunk: p[trunk], "classifier": p[f"head_{index}"]}}
