"""ERNIE's finetuning heads: BERT's (``families/bert/task_heads.py``; Sun et al. 2019 Sec. 4 finetunes "the same
as BERT" on XNLI, MSRA-NER, ...), imported and only re-keyed: the encoder sits under the trunk ``params["ernie"]``
(``model.TRUNK``) so an ``ernie_mlm`` pretraining checkpoint merges into it (``train/finetune.py``) and
``registry.family_of_params`` still tells the tree apart from BERT's. The classifier parameters keep BERT's (and
transformers') names: ``classifier``, ``qa_outputs``.

ERNIE 2.0 (Sun et al. 2020 Sec. 5 finetunes on GLUE with the pretrained encoder) uses the same heads on its
encoder with task embeddings (``continual_model.Ernie2Model``, trunk ``params["ernie2"]``): every row gets the
fixed task id ``model.task_id`` (default 0, as the ERNIE repo's finetuning readers)."""
from __future__ import annotations

from typing import ClassVar

from ptm_jax.families.bert.task_heads import (
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from ptm_jax.families.ernie.continual_model import TRUNK as TRUNK_2
from ptm_jax.families.ernie.continual_model import Ernie2Model
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


class Ernie2ForSequenceClassification(BertForSequenceClassification):
    """ERNIE 2.0: BERT's pooled-[CLS] classifier on the "ernie2" trunk, every row with the task id
    ``model.task_id`` (transformers' ``ErnieForSequenceClassification`` with ``use_task_id``)."""

    trunk: str = TRUNK_2
    encoder_class: ClassVar[type] = Ernie2Model


class Ernie2ForTokenClassification(BertForTokenClassification):
    """ERNIE 2.0: BERT's per-token tagger on the "ernie2" trunk, task id ``model.task_id``."""

    trunk: str = TRUNK_2
    encoder_class: ClassVar[type] = Ernie2Model


class Ernie2ForQuestionAnswering(BertForQuestionAnswering):
    """ERNIE 2.0: BERT's start/end span head on the "ernie2" trunk, task id ``model.task_id``."""

    trunk: str = TRUNK_2
    encoder_class: ClassVar[type] = Ernie2Model


class Ernie2ForMultipleChoice(BertForMultipleChoice):
    """ERNIE 2.0: BERT's one-score-per-option head on the "ernie2" trunk, task id ``model.task_id``."""

    trunk: str = TRUNK_2
    encoder_class: ClassVar[type] = Ernie2Model
