"""The ``[consert]`` config section (``finetune.job = "consert"``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class ConsertConfig:
    """ConSERT, contrastive sentence embeddings (Yan et al. 2021; ``ptm_jax/jobs/consert``)."""

    views: str = "feature_cutoff:0.2,shuffle"
    """The augmentation of each of the two views, 'name[:strength]' with name none, shuffle, token_cutoff,
    feature_cutoff, dropout (rates in (0, 1)) or adversarial (perturbation norm) (objectives/augmentations.py;
    the default is ConSERT's best unsupervised pair)."""
    temperature: float = 0.1
    """NT-Xent temperature (Yan et al. 2021: 0.1)."""
    supervised: Literal["none", "positive_pairs", "nli", "joint", True, False] = "none"
    """'none' (unsupervised: each sentence twice); 'positive_pairs' (the positive pairs of a GLUE pair TSV, STS-B
    score >= 4, MRPC paraphrases, entailment, as the two views of NT-Xent); 'nli' (SBERT's softmax classification
    over (u, v, |u - v|) of a labelled GLUE pair TSV, e.g. MNLI/train.tsv); 'joint' (that loss + alpha x NT-Xent on
    the same batch) (objectives/consert_nli.py). true/false (older configs) mean 'positive_pairs'/'none'."""
    alpha: float = 0.15
    """joint: weight of the contrastive loss, L = L_ce + alpha * L_con (Yan et al. 2021 Sec. 4.4: 0.15, with L_con
    at the reference implementation's scale, objectives/consert_nli.py)."""
    eval_data_dir: str = ""
    """The GLUE folder holding STS-B/dev.tsv (the evaluation pairs) when finetune.data_dir is not inside one."""
