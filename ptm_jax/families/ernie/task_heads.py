"""ERNIE 1.0's finetuning heads: BERT's (``families/bert/task_heads.py``; Sun et al. 2019 Sec. 4 finetunes
"the same as BERT" on XNLI, MSRA-NER, ...), imported and only re-keyed: the encoder sits under the trunk
``params["ernie"]`` (``model.TRUNK``) so an ``ernie_mlm`` pretraining checkpoint merges into it
(``train/finetune.py``) and ``registry.family_of_params`` still tells the tree apart from BERT's. The classifier
parameters keep BERT's (and transformers') names: ``classifier``, ``qa_outputs``."""
from __future__ import annotations

from ptm_jax.families.bert.task_heads import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from ptm_jax.families.ernie.model import TRUNK


class ErnieForSequenceClassification(BertForSequenceClassification):
    """BERT's pooled-[CLS] classifier / regressor on the "ernie" trunk."""

    trunk: str = TRUNK


class ErnieForTokenClassification(BertForTokenClassification):
    """BERT's per-token tagger (CoNLL-2003 NER) on the "ernie" trunk."""

    trunk: str = TRUNK


class ErnieForQuestionAnswering(BertForQuestionAnswering):
    """BERT's start/end span head on the "ernie" trunk."""

    trunk: str = TRUNK


class ErnieForMultipleChoice(BertForMultipleChoice):
    """BERT's one-score-per-option head on the "ernie" trunk."""

    trunk: str = TRUNK
