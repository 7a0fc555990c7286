"""ERNIE 2.0's continual multi-task pretraining (Sun et al. 2020, "ERNIE 2.0: A Continual Pre-training Framework
for Language Understanding", Sec. 3-4): the config sections and the schedule.

The tasks (Sec. 4.2; examples in ``continual_data.py``, heads in ``continual_model.py``):

* word-aware: ``knowledge_masking`` (ERNIE 1.0's phrase/entity masking, ``units.py``), ``capitalisation`` (is the
  word capitalised, ``case.py``), ``token_document`` (does the token occur in the rest of its document);
* structure-aware: ``reorder`` (a span cut into ``data.reorder_segments`` parts and shuffled: predict which of the
  k! orders), ``distance`` (two sentences: adjacent, same document, or different documents).

The continual schedule (Sec. 3.2): the tasks in ``data.tasks`` are introduced one stage at a time, task ``j`` at
step ``data.task_from_steps[j]``; from its stage on a task trains together with every earlier task. Each step
trains one task: the active tasks are sampled with probabilities proportional to ``data.task_weights`` by a
generator keyed on (seed, step) (:func:`task_at`), so the task of a step is a function of the step and the seed
alone (a resumed run trains the same tasks). Each task has its own id in the task embedding (its index in
``TASKS``), added to the input like the segment embedding.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ptm_jax.errors import ConfigError
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig

TASKS = ("knowledge_masking", "capitalisation", "token_document", "reorder", "distance")
TOKEN_TASKS = ("capitalisation", "token_document")
SCHEDULE_STREAM = 11


@dataclass
class Ernie2Config(ErnieConfig):
    """ERNIE 1.0's (BERT's) encoder plus the task embedding (transformers' ``ErnieModel`` ``use_task_id``)."""

    family: str = "ernie2"
    task_vocab_size: int = 8
    """Rows of the task embedding (>= the number of tasks, ``len(TASKS)``, to pretrain; transformers'
    ``task_type_vocab_size``)."""
    task_id: int = 0
    """The task id of every row where none is given: finetuning, ``ptm embed`` / ``predict`` and Hugging Face
    exports. 0 is the ERNIE repo's finetuning default (PaddlePaddle/ERNIE reader/task_reader.py ``task_id=0``)
    and transformers' (zeros when ``task_type_ids`` is None); pretraining's row 0 is knowledge masking. A
    finetuning run's own ``model.task_id`` replaces the checkpoint's (``run_settings``)."""

    run_settings = ("task_id",)

    def validate(self, where: str = "model") -> None:
        super().validate(where)
        check_task_id(self, where)


def check_task_id(cfg: Ernie2Config, where: str = "model") -> None:
    """``task_id`` must name a row of the task embedding: JAX would clamp an index outside the table silently."""
    if cfg.task_vocab_size < 1:
        raise ConfigError(f"{where}.task_vocab_size={cfg.task_vocab_size}: the task embedding needs at least one row")
    if not 0 <= cfg.task_id < cfg.task_vocab_size:
        raise ConfigError(f"{where}.task_id={cfg.task_id} is outside the task embedding ({where}.task_vocab_size="
                    f"{cfg.task_vocab_size} rows, ids 0..{cfg.task_vocab_size - 1}); set {where}.task_id to one "
                    "of those ids")


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


@dataclass
class Ernie2DataConfig(ErnieDataConfig):
    """The tasks and the continual schedule; the masking fields are ERNIE 1.0's (the knowledge-masking task)."""

    tasks: str = ",".join(TASKS)
    """Comma-separated tasks in the order the stages introduce them (names from ``TASKS``)."""
    task_from_steps: str = "0,0,0,0,0"
    """Comma-separated: the step from which each task of ``tasks`` trains (non-decreasing, the first 0)."""
    task_weights: str = "1,1,1,1,1"
    """Comma-separated sampling weights of the tasks (>= 0; the active tasks of every stage need one > 0)."""
    reorder_segments: int = 3
    """``reorder``: the number of parts k a span is cut into (k! classes)."""

    def task_list(self) -> list[str]:
        return _csv(self.tasks)

    def starts(self) -> list[int]:
        try:
            return [int(s) for s in _csv(self.task_from_steps)]
        except ValueError:
            raise ConfigError(f"data.task_from_steps={self.task_from_steps!r}: expected comma-separated integers "
                              "(one step per task of data.tasks)") from None

    def weights(self) -> list[float]:
        try:
            return [float(s) for s in _csv(self.task_weights)]
        except ValueError:
            raise ConfigError(f"data.task_weights={self.task_weights!r}: expected comma-separated numbers (one "
                              "weight per task of data.tasks)") from None

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        tasks, starts, weights = self.task_list(), self.starts(), self.weights()
        unknown = [t for t in tasks if t not in TASKS]
        if not tasks or unknown or len(set(tasks)) != len(tasks):
            raise ConfigError(f"{where}.tasks={self.tasks!r}: expected distinct tasks among {', '.join(TASKS)}"
                              + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
        for name, values in (("task_from_steps", starts), ("task_weights", weights)):
            if len(values) != len(tasks):
                raise ConfigError(f"{where}.{name} has {len(values)} entries but {where}.tasks has {len(tasks)}; "
                                  "give one per task")
        if starts[0] != 0 or any(b < a for a, b in itertools.pairwise(starts)):
            raise ConfigError(f"{where}.task_from_steps={self.task_from_steps!r}: the first task must start at step "
                              "0 and the starts must not decrease (each stage adds a task to the earlier ones)")
        if any(not np.isfinite(w) or w < 0 for w in weights):
            raise ConfigError(f"{where}.task_weights={self.task_weights!r}: weights must be finite and >= 0 (a "
                              "negative weight is not a sampling rate)")
        for j, start in enumerate(starts):
            if j + 1 < len(starts) and starts[j + 1] == start:
                continue   # the stage starting here also includes the next task
            if sum(weights[:j + 1]) <= 0:
                raise ConfigError(f"{where}.task_weights={self.task_weights!r}: the tasks active from step {start} "
                                  f"({', '.join(tasks[:j + 1])}) all have weight 0, so no task can be sampled; "
                                  "give one of them a positive weight")
        if not 2 <= self.reorder_segments <= 5:
            raise ConfigError(f"{where}.reorder_segments={self.reorder_segments} must be in [2, 5] (k! classes)")


def active(dcfg: Ernie2DataConfig, step: int) -> list[str]:
    """The tasks that train at ``step`` (every task whose stage has begun)."""
    return [t for t, s in zip(dcfg.task_list(), dcfg.starts()) if step >= s]


def task_at(dcfg: Ernie2DataConfig, step: int, seed: int) -> str:
    """The task of training step ``step``: one of the active tasks, drawn with probabilities proportional to their
    weights by a generator keyed on (seed, step)."""
    names = active(dcfg, step)
    w = np.asarray(dcfg.weights()[:len(names)], np.float64)
    u = np.random.default_rng([seed, step, SCHEDULE_STREAM]).random()
    return names[int(np.searchsorted(np.cumsum(w) / w.sum(), u, side="right"))]


def eval_task(dcfg: Ernie2DataConfig, batch: int) -> str:
    """The task of evaluation batch ``batch``: every task of ``data.tasks`` in turn."""
    tasks = dcfg.task_list()
    return tasks[batch % len(tasks)]
