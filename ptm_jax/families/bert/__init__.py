"""BERT (Devlin et al. 2019) as one family package: the encoder (``model.py``), pretraining heads
(``heads.py``), task heads (``task_heads.py``), the MLM / MLM+NSP objectives (``mlm.py``, ``nsp.py``,
``mlm_nsp.py``) and their tf.data builder (``mlm_nsp_data.py``), Hugging Face interop (``hf.py``), FLOPs
(``flops.py``) and the bench batch (``bench.py``). Importing this package registers it
(``ptm_jax/families/registry.py``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.families.bert.config import BertConfig, BertDataConfig
from ptm_jax.families.registry import (
    Bench, Family, Finetuning, HfConverter, Inspection, Interop, ParamLayout, Pretraining, lazy, register)

HF = "ptm_jax.families.bert.hf"
BENCH = "ptm_jax.families.bert.bench"


def _mlm_nsp(cfg: Any, corpus: Any):
    from ptm_jax.families.bert.mlm_nsp import MlmNspObjective

    return MlmNspObjective(cfg, corpus.train, corpus.eval, corpus.special,
                           plan=getattr(corpus, "artifacts", {}).get("pairing_plan"))


PLAN_OBJECTIVES = ("mlm_nsp", "mlm", "ernie_mlm", "ernie_mlm_nsp")
"""The objectives whose stream is ``mlm_nsp_data.local_batches`` (they read the stored pairing plan)."""


def _pairing_plan(cfg: Any, corpus: Any, directory: Any):
    if cfg.objective not in PLAN_OBJECTIVES:
        return None
    from ptm_jax.data.pretraining.plan_store import run_artifact

    return run_artifact(cfg, corpus, directory)


def _infer_head(params: dict) -> str:
    if "mlm" in params:
        return "pretraining" if "nsp" in params else "masked_lm"
    if "qa_outputs" in params:
        return "question_answering"
    if "classifier" in params:
        return "sequence_classification" if "pooler" in params["bert"] else "token_classification"
    return "encoder"


def _head(name: str):
    def get() -> type:
        from ptm_jax.families.bert import model, task_heads

        return getattr(model if name == "BertModel" else task_heads, name)

    return get


def _task(name: str):
    """The spine's builder of task ``name`` (``objectives/finetune_registry.py``), imported when called."""
    def build(*args, **kw):
        from ptm_jax.objectives.finetune_registry import TASK_BUILDERS

        return TASK_BUILDERS[name](*args, **kw)

    return build


FAMILY = register(Family(
    name="bert",
    model_config=BertConfig,
    pretraining=Pretraining(
        objectives={"mlm_nsp": _mlm_nsp, "mlm": _mlm_nsp},
        data_config=BertDataConfig,
        specials=("pad", "cls", "sep", "mask"),
        artifacts={"pairing_plan": _pairing_plan},
    ),
    layout=ParamLayout(
        trunk="bert",
        stack="encoder",
        heads=("encoder", "pretraining", "masked_lm", "sequence_classification", "token_classification",
               "question_answering", "multiple_choice"),
        infer_head=_infer_head,
    ),
    finetuning=Finetuning(
        classifier=lazy("ptm_jax.objectives.classification", "sequence_classifier"),
        tasks={t: _task(t) for t in ("squad", "squad_v2", "conll2003", "swag")},
        task_heads={"encoder": _head("BertModel"),
                    "sequence_classification": _head("BertForSequenceClassification"),
                    "token_classification": _head("BertForTokenClassification"),
                    "question_answering": _head("BertForQuestionAnswering"),
                    "multiple_choice": _head("BertForMultipleChoice")},
        qa_layout="question_first",
        packs_examples=True,
    ),
    interop=Interop(
        hf=HfConverter(model_types=("bert",), import_dir=lazy(HF, "import_hf_to_params_dir"),
                       export_dir=lazy(HF, "export_hf"), load=lazy(HF, "import_hf"), fallback=True),
    ),
    inspection=Inspection(
        word_features=lazy("ptm_jax.families.bert.features", "word_features"),
        word_encoder=lazy("ptm_jax.families.bert.features", "word_encoder"),
        attention_maps=lazy("ptm_jax.families.bert.features", "attention_maps"),
    ),
    bench=Bench(
        flops=lazy("ptm_jax.families.bert.flops", "step_flops"),
        synthetic_batch=lazy(BENCH, "synthetic_batch"),
        variants={"dense": lazy(BENCH, "DenseMlmHead")},
    ),
    tiny_preset="bert_tiny",
))
