"""ERNIE 1.0 (Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge Integration") as one family
package: BERT's network with knowledge masking, i.e. whole phrase and entity units masked in three stages
(basic, phrase, entity). ``config.py`` the sections, ``units.py`` the unit annotations (lexicon, word2phrase PMI
phrases, span file) built once beside the token cache (``Pretraining.artifacts["units"]``), ``data.py`` the tf.data
stream (BERT's, via ``families/bert/mlm_nsp_data.py``), ``model.py`` the network (BERT's modules under the trunk
key "ernie"), ``objective.py`` the objectives ``ernie_mlm`` and ``ernie_mlm_nsp``.

``hf.py`` imports and exports transformers' ``model_type = "ernie"`` folders (BERT's tensors under the prefix
"ernie."): task-type embeddings off for ERNIE 1.0, on (``use_task_id``) for ERNIE 2.0, whose folders it imports
as "ernie2". ``task_heads.py`` the finetuning heads of both families: BERT's, re-keyed to the trunk, with BERT's
sentence classifier objective and tasks (GLUE, CoNLL-2003, SQuAD, SWAG, ConSERT).

The dialogue LM (Sec. 3.3), objective ``ernie_dlm``: ``dialogue.py`` (dialogue files, roles, the tokenized
dialogues artifact), ``dialogue_data.py`` (the examples), ``dialogue_objective.py``. ERNIE 2.0 (Sun et al. 2020)
registers as a second family, "ernie2", objective ``ernie2``: ``continual.py`` (config sections, the task
schedule), ``case.py`` (capitalisation labels artifact), ``continual_data.py``, ``continual_model.py``,
``continual_objective.py``.
Importing this package registers it (``ptm_jax/families/registry.py``).
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families import bert as _bert
from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig
from ptm_jax.families.ernie.continual import Ernie2Config, Ernie2DataConfig
from ptm_jax.families.ernie.continual_model import TRUNK as TRUNK_2
from ptm_jax.families.ernie.model import TRUNK
from ptm_jax.families.registry import (
    Bench, Family, Finetuning, HfConverter, Inspection, Interop, ParamLayout, Pretraining, lazy, register)

HF = "ptm_jax.families.ernie.hf"
HEADS = ("encoder", "pretraining", "masked_lm", "sequence_classification", "token_classification",
         "question_answering", "multiple_choice")


def _objective(cfg: Any, corpus: Any):
    from ptm_jax.families.ernie.objective import ErnieObjective

    return ErnieObjective(cfg, corpus)


def _dialogue_lm(cfg: Any, corpus: Any):
    from ptm_jax.families.ernie.dialogue_objective import DialogueLmObjective

    return DialogueLmObjective(cfg, corpus)


def _dialogues(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.ernie.dialogue import build_dialogues

    return build_dialogues(cfg, corpus, directory)


def _units(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.ernie.units import build_units

    return build_units(cfg, corpus, directory)


def _hf(model_types: tuple[str, ...]) -> HfConverter:
    """``hf.py`` serves both families: a ``model_type = "ernie"`` folder (claimed by "ernie") becomes an
    ``ernie2`` model when it has ``use_task_id``; "ernie2" claims no model type of its own, so it only exports."""
    return HfConverter(model_types=model_types, import_dir=lazy(HF, "import_dir"), export_dir=lazy(HF, "export_dir"),
                       load=lazy(HF, "load"))


def _infer_head_of(trunk: str, pretraining: str):
    """params tree -> head, for a tree whose encoder is ``params[trunk]``; ``pretraining``: the key that tells
    the family's pretraining heads from a bare masked LM."""

    def infer(params: dict) -> str:
        if "mlm" in params:
            return "pretraining" if pretraining in params else "masked_lm"
        if "qa_outputs" in params:
            return "question_answering"
        if "classifier" in params:
            return "sequence_classification" if "pooler" in params[trunk] else "token_classification"
        return "encoder"

    return infer


def _head(name: str):
    def get() -> type:
        from ptm_jax.families.bert.model import BertModel
        from ptm_jax.families.ernie import task_heads
        from ptm_jax.families.ernie.continual_model import Ernie2Model

        return {"encoder": BertModel, "encoder_2": Ernie2Model}.get(name) or getattr(task_heads, name)

    return get


def _task_heads(prefix: str, encoder: str) -> dict:
    return {"encoder": _head(encoder), **{h: _head(prefix + c) for h, c in (
        ("sequence_classification", "ForSequenceClassification"), ("token_classification", "ForTokenClassification"),
        ("question_answering", "ForQuestionAnswering"), ("multiple_choice", "ForMultipleChoice"))}}


FAMILY = register(Family(
    name="ernie",
    model_config=ErnieConfig,
    pretraining=Pretraining(
        objectives={"ernie_mlm": _objective, "ernie_mlm_nsp": _objective, "ernie_dlm": _dialogue_lm},
        data_config=ErnieDataConfig,
        specials=("pad", "cls", "sep", "mask"),
        artifacts={"units": _units, "dialogues": _dialogues, "pairing_plan": _bert._pairing_plan},
    ),
    layout=ParamLayout(
        trunk=TRUNK,
        stack="encoder",
        heads=HEADS,
        infer_head=_infer_head_of(TRUNK, "nsp"),
    ),
    finetuning=Finetuning(
        classifier=_bert.FAMILY.finetuning.classifier,
        tasks=dict(_bert.FAMILY.finetuning.tasks),
        task_heads=_task_heads("Ernie", "encoder"),
    ),
    interop=Interop(
        hf=_hf(("ernie",)),
    ),
    inspection=Inspection(
        # BERT's network: the hooks read the trunk key of model.family
        word_features=_bert.FAMILY.inspection.word_features,
        word_encoder=_bert.FAMILY.inspection.word_encoder,
        attention_maps=_bert.FAMILY.inspection.attention_maps,
    ),
    bench=Bench(
        corpus="configured",  # knowledge units and dialogues come from real text
    ),
    tiny_preset="ernie_tiny",
))


def _continual(cfg: Any, corpus: Any):
    from ptm_jax.families.ernie.continual_objective import ContinualObjective

    return ContinualObjective(cfg, corpus)


def _case(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.ernie.case import build_case

    return build_case(cfg, corpus, directory)


def _prepare_finetune_2(model_cfg: Any, tokenizer: Any) -> Any:
    """The finetuning task id must name a row of the pretrained task table (``model.task_id``)."""
    from ptm_jax.families.ernie.continual import check_task_id

    check_task_id(model_cfg)
    return model_cfg


FAMILY_2 = register(Family(
    name="ernie2",
    model_config=Ernie2Config,
    pretraining=Pretraining(
        objectives={"ernie2": _continual},
        data_config=Ernie2DataConfig,
        tokenizer_kinds=("wordpiece",),
        specials=("pad", "cls", "sep", "mask"),
        artifacts={"units": _units, "case": _case},
    ),
    layout=ParamLayout(
        trunk=TRUNK_2,
        stack="encoder",
        heads=HEADS,
        infer_head=_infer_head_of(TRUNK_2, "capitalisation"),
    ),
    finetuning=Finetuning(
        classifier=_bert.FAMILY.finetuning.classifier,
        tasks=dict(_bert.FAMILY.finetuning.tasks),
        task_heads=_task_heads("Ernie2", "encoder_2"),
        prepare_finetune=_prepare_finetune_2,
    ),
    interop=Interop(
        hf=_hf(()),
    ),
    bench=Bench(
        corpus="configured",  # capitalisation and sentence tasks read the real text
    ),
    tiny_preset="ernie2_tiny",
))
"""ERNIE 2.0 (``continual*.py``, ``case.py``) is a family of its own: its encoder adds the task embedding to
ERNIE 1.0's (``continual_model.Ernie2Model``) and its pretraining carries five task heads. Finetuning uses BERT's
heads on that encoder with the fixed task id ``model.task_id`` (``task_heads.py``); Hugging Face interop is
transformers' ERNIE with ``use_task_id`` (``hf.py``: the pretraining model exports as ``ErnieForMaskedLM``, the
four other task heads left out)."""
