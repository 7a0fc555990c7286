"""The ``[mtdnn]`` config section (``finetune.job = "mtdnn"``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class MtdnnConfig:
    """MT-DNN, multi-task learning then per-task finetuning (Liu et al. 2019; ``ptm_jax/jobs/mtdnn``)."""

    tasks: list[str] = field(default_factory=list)
    """The tasks trained together (objectives/multi_task.py): GLUE names, and '<pair task>_rank' for a
    pairwise-ranking task built from a GLUE pair task (mrpc_rank, rte_rank). On the command line
    mtdnn.tasks=[rte,mrpc,stsb]."""
    task_weights: list[float] = field(default_factory=list)
    """One weight per task of mtdnn.tasks (empty: all 1); a task's steps per epoch = weight x its mini-batches.
    None negative, not all zero."""
    finetune_epochs: float = 1.0
    """Epochs of per-task finetuning from the multi-task model, after the multi-task stage (0: none)."""
    ranking_candidates: int = 4
    """Ranking tasks: candidates per group (the true one and C - 1 others); finetune.batch_size must be a
    multiple."""
    answer: Literal["linear", "san"] = "linear"
    """The output layer of the sentence-pair classification tasks (MRPC, QQP, MNLI, QNLI, RTE, WNLI): 'linear'
    (a linear head on the pooled [CLS], mt-dnn's answer_opt 0) or 'san' (the stochastic answer network over the
    last layer, models/san.py; Liu et al. 2019 Sec. 3.1). Other tasks keep their heads."""
    san_steps: int = 5
    """answer=san: reasoning steps K (Liu et al. 2018: 5)."""
    san_step_dropout: float = 0.1
    """answer=san: stochastic prediction dropout, the probability of dropping a step's prediction from the
    training average (one step of every example is always kept); inference averages all K (0.1 in the paper)."""
