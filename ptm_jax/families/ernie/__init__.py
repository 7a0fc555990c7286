"""ERNIE 1.0 (Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge Integration") as one family
package: BERT's network with knowledge masking, i.e. whole phrase and entity units masked in three stages
(basic, phrase, entity). ``config.py`` the sections, ``units.py`` the unit annotations (lexicon, word2phrase PMI
phrases, span file) built once beside the token cache (``Family.artifacts["units"]``), ``data.py`` the tf.data
stream (BERT's, via ``families/bert/mlm_nsp_data.py``), ``model.py`` the network (BERT's modules under the trunk
key "ernie"), ``objective.py`` the objectives ``ernie_mlm`` and ``ernie_mlm_nsp``.

``hf.py`` imports and exports transformers' ``model_type = "ernie"`` folders (BERT's tensors under the prefix
"ernie.", task-type embeddings off). ``task_heads.py`` the finetuning heads: BERT's, re-keyed to the trunk, with
BERT's sentence classifier objective and tasks (GLUE, CoNLL-2003, SQuAD, SWAG, ConSERT).

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
from ptm_jax.families.registry import Family, HfConverter, register


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


def _hf() -> HfConverter:
    def import_dir(hf_dir, out, head=None, overwrite=False):
        from ptm_jax.families.ernie import hf

        return hf.import_dir(hf_dir, out, head=head, overwrite=overwrite)

    def export_dir(src, out, overwrite=False):
        from ptm_jax.families.ernie import hf

        return hf.export_dir(src, out, overwrite=overwrite)

    def load(hf_dir):
        from ptm_jax.families.ernie import hf

        return hf.load(hf_dir)

    return HfConverter(model_types=("ernie",), import_dir=import_dir, export_dir=export_dir, load=load)


def _infer_head(params: dict) -> str:
    if "mlm" in params:
        return "pretraining" if "nsp" in params else "masked_lm"
    if "qa_outputs" in params:
        return "question_answering"
    if "classifier" in params:
        return "sequence_classification" if "pooler" in params[TRUNK] else "token_classification"
    return "encoder"


def _head(name: str):
    def get() -> type:
        from ptm_jax.families.bert.model import BertModel
        from ptm_jax.families.ernie import task_heads

        return BertModel if name == "encoder" else getattr(task_heads, name)

    return get


FAMILY = register(Family(
    name="ernie",
    model_config=ErnieConfig,
    data_config=ErnieDataConfig,
    objectives={"ernie_mlm": _objective, "ernie_mlm_nsp": _objective, "ernie_dlm": _dialogue_lm},
    specials=("pad", "cls", "sep", "mask"),
    artifacts={"units": _units, "dialogues": _dialogues},
    trunk=TRUNK,
    stack="encoder",
    heads=("encoder", "pretraining", "masked_lm", "sequence_classification", "token_classification",
           "question_answering", "multiple_choice"),
    infer_head=_infer_head,
    classifier=_bert.FAMILY.classifier,
    tasks=dict(_bert.FAMILY.tasks),
    task_heads={"encoder": _head("encoder"),
                "sequence_classification": _head("ErnieForSequenceClassification"),
                "token_classification": _head("ErnieForTokenClassification"),
                "question_answering": _head("ErnieForQuestionAnswering"),
                "multiple_choice": _head("ErnieForMultipleChoice")},
    capabilities=frozenset({"embed", "classify", "word_features", "attention_maps"}),
    word_features=_bert.FAMILY.word_features,  # BERT's network: the hooks read the trunk key of model.family
    word_encoder=_bert.FAMILY.word_encoder,
    attention_maps=_bert.FAMILY.attention_maps,
    hf=_hf(),
    tiny_preset="ernie_tiny",
))


def _continual(cfg: Any, corpus: Any):
    from ptm_jax.families.ernie.continual_objective import ContinualObjective

    return ContinualObjective(cfg, corpus)


def _case(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.ernie.case import build_case

    return build_case(cfg, corpus, directory)


def _infer_head_2(params: dict) -> str:
    return "pretraining" if "mlm" in params else "encoder"


FAMILY_2 = register(Family(
    name="ernie2",
    model_config=Ernie2Config,
    data_config=Ernie2DataConfig,
    objectives={"ernie2": _continual},
    tokenizer_kinds=("wordpiece",),
    specials=("pad", "cls", "sep", "mask"),
    artifacts={"units": _units, "case": _case},
    trunk=TRUNK_2,
    stack="encoder",
    heads=("encoder", "pretraining"),
    infer_head=_infer_head_2,
    tiny_preset="ernie2_tiny",
))
"""ERNIE 2.0 (``continual*.py``, ``case.py``) is a family of its own: its network adds the task embedding to
ERNIE 1.0's and carries five task heads, which transformers' ERNIE classes have no place for (no ``hf``)."""
