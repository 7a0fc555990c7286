"""XLNet (Yang et al. 2019) as one family package: the Transformer-XL encoder with two-stream relative
attention (``model.py``, ``two_stream.py``), the permutation-LM objective (``plm.py``) and its tf.data builder
(``plm_data.py``, ``permutation.py``), sequence classification (``classification.py``) and Hugging Face interop
(``hf.py``) and FLOPs (``flops.py``). Importing this package
registers it (``ptm_jax/families/registry.py``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.families.xlnet.config import XlnetConfig, XlnetDataConfig
from ptm_jax.families.registry import (
    Bench, Family, Finetuning, HfConverter, Inspection, Interop, ParamLayout, Pretraining, lazy, register)

HF = "ptm_jax.families.xlnet.hf"


def _plm(cfg: Any, corpus: Any):
    from ptm_jax.families.xlnet.plm import PlmObjective

    return PlmObjective(cfg, corpus.train, corpus.eval, corpus.special)


def _infer_head(params: dict) -> str:
    if "classifier" in params:
        return "sequence_classification"
    if "qa_outputs" in params or "start_logits" in params:
        return "question_answering"
    return "plm"


def _classifier(fcfg: Any) -> type:
    from ptm_jax.families.xlnet.classification import XLNetClassificationObjective

    return XLNetClassificationObjective


def _task(name: str):
    def build(*args, **kw):
        from ptm_jax.objectives.finetune_registry import TASK_BUILDERS

        return TASK_BUILDERS[name](*args, **kw)

    return build


NO_DECAY = r"(^|/)norm/|(^|/)(?!r_[wrs]_bias$)[^/]*bias$"
"""zihangdai/xlnet model_utils.py AdamWeightDecayOptimizer: no weight decay on LayerNorms and biases
(``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``), but the relative-attention biases r_w, r_r and
r_s are decayed (``include_in_weight_decay``), as are ``mask_emb`` and ``seg_embed``."""


def _param_groups(model_cfg: Any = None, stage: str = "pretrain") -> list:
    """XLNet's weight-decay rule, pretraining and finetuning alike (run_classifier.py and run_squad.py call the same
    ``get_train_op``)."""
    from ptm_jax.train.param_groups import Rule

    return [Rule(NO_DECAY, weight_decay=0.0, where="XLNet: no weight decay on LayerNorms and biases other than "
                 "r_w/r_r/r_s (zihangdai/xlnet model_utils.py)", must_match=False)]


def _qa_model() -> type:
    from ptm_jax.families.xlnet.model import XLNetForQuestionAnswering

    return XLNetForQuestionAnswering


FAMILY = register(Family(
    name="xlnet",
    model_config=XlnetConfig,
    pretraining=Pretraining(
        objectives={"plm": _plm},
        data_config=XlnetDataConfig,
        specials=("pad", "cls", "sep", "mask"),
    ),
    layout=ParamLayout(
        trunk="xlnet",
        stack="encoder",
        heads=("plm", "sequence_classification", "question_answering"),
        infer_head=_infer_head,
        param_groups=_param_groups,
    ),
    finetuning=Finetuning(
        classifier=_classifier,
        tasks={"squad": _task("squad"), "squad_v2": _task("squad_v2")},
        task_heads={"question_answering": _qa_model},
        qa_layout="document_first",
    ),
    interop=Interop(
        hf=HfConverter(model_types=("xlnet",), import_dir=lazy(HF, "import_hf_xlnet_to_params_dir"),
                       export_dir=lazy(HF, "export_hf_xlnet"), load=lazy(HF, "import_hf_xlnet")),
    ),
    inspection=Inspection(
        word_features=lazy("ptm_jax.families.xlnet.features", "word_features"),
        word_encoder=lazy("ptm_jax.families.xlnet.features", "word_encoder"),
        attention_maps=lazy("ptm_jax.families.xlnet.features", "attention_maps"),
    ),
    bench=Bench(
        flops=lazy("ptm_jax.families.xlnet.flops", "step_flops"),
        synthetic_batch=lazy("ptm_jax.bench.harness", "packed_lm_batch"),
    ),
    tiny_preset="xlnet_tiny",
))
