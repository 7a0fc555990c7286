"""GPT (Radford et al. 2018, 2019) as one family package: the decoder (``model.py``), task heads
(``task_heads.py``), the causal-LM objective (``causal_lm.py``) and its tf.data builder (``causal_lm_data.py``),
finetuning through input transformations (``transforms.py``, ``classification.py``), KV-cached decoding
(``decode.py``), Hugging Face GPT-2 and GPT-1 interop (``hf.py``) and FLOPs (``flops.py``). Importing this package
registers it (``ptm_jax/families/registry.py``)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ptm_jax.families.gpt.config import GptConfig, GptFinetuneConfig
from ptm_jax.families.registry import (
    Bench, ConfigSection, Family, Finetuning, HfConverter, Inspection, Interop, ParamLayout, Pretraining, lazy,
    register)


def _causal_lm(cfg: Any, corpus: Any):
    from ptm_jax.families.gpt.causal_lm import CausalLmObjective

    tok = corpus.tokenizer
    eos = getattr(tok, "eos_id", None)
    eos = tok.sep_id if eos is None else eos  # WordPiece/SentencePiece vocabularies: [SEP] ends a document
    return CausalLmObjective(cfg, corpus.train, corpus.eval, eos_id=eos, pad_id=tok.pad_id)


def _infer_head(params: dict) -> str:
    if "classifier" in params:
        return "sequence_classification"
    if "qa_outputs" in params or "start_logits" in params:
        return "question_answering"
    return "causal_lm"


def _hf() -> HfConverter:
    def import_dir(hf_dir, out, head=None, overwrite=False):
        from ptm_jax.errors import ConfigError
        from ptm_jax.families.gpt.hf import import_hf_to_params_dir

        if head not in (None, "causal_lm"):
            raise ConfigError(f"--head {head}: a GPT-2 or OpenAI GPT folder imports as head causal_lm "
                              "(GPT2LMHeadModel, OpenAIGPTLMHeadModel)")
        return import_hf_to_params_dir(hf_dir, out, overwrite=overwrite)

    def load(hf_dir):
        from pathlib import Path

        from ptm_jax.families.gpt.hf import import_hf

        params, cfg, info = import_hf(hf_dir)
        return params, cfg, info, Path(info["tokenizer_dir"])  # tokenizer.json's files are in a scratch folder

    return HfConverter(model_types=("gpt2", "openai-gpt"), import_dir=import_dir,
                       export_dir=lazy("ptm_jax.families.gpt.hf", "export_hf"), load=load)


def _classifier(fcfg: Any) -> type:
    from ptm_jax.families.gpt.classification import GptClassificationObjective

    return GptClassificationObjective


def _multiple_choice() -> type:
    from ptm_jax.families.gpt.classification import GptMultipleChoiceObjective

    return GptMultipleChoiceObjective


def _prepare_finetune(model_cfg: Any, tokenizer: Any) -> Any:
    """GPT-2's released vocabulary lacks the start/delimiter/extract tokens: the tokenizer appends them."""
    if tokenizer.vocab_size > model_cfg.vocab_size:
        return dataclasses.replace(model_cfg, vocab_size=tokenizer.vocab_size)
    return model_cfg


def _swag(*args, **kw):
    from ptm_jax.objectives.finetune_registry import TASK_BUILDERS

    return TASK_BUILDERS["swag"](*args, **kw)


def _lm_model() -> type:
    from ptm_jax.families.gpt.model import GPTLMHeadModel

    return GPTLMHeadModel


FAMILY = register(Family(
    name="gpt",
    model_config=GptConfig,
    pretraining=Pretraining(
        objectives={"causal_lm": _causal_lm},
        specials=("pad", "eos"),
    ),
    layout=ParamLayout(
        trunk="gpt",
        stack="decoder",
        heads=("causal_lm", "sequence_classification", "multiple_choice"),
        infer_head=_infer_head,
    ),
    finetuning=Finetuning(
        classifier=_classifier,
        tasks={"swag": _swag},
        task_heads={"causal_lm": _lm_model},
        task_objectives={"multiple_choice": _multiple_choice},
        prepare_finetune=_prepare_finetune,
        sections=(ConfigSection("gpt_finetune", GptFinetuneConfig, "GPT's finetuning", {"lm_coef": "lm_coef"}),),
    ),
    interop=Interop(
        hf=_hf(),
    ),
    inspection=Inspection(
        generate=lazy("ptm_jax.families.gpt.decode", "generate"),
        perplexity=lazy("ptm_jax.evaluate.perplexity", "perplexity"),
        word_features=lazy("ptm_jax.families.gpt.features", "word_features"),
        word_encoder=lazy("ptm_jax.families.gpt.features", "word_encoder"),
        attention_maps=lazy("ptm_jax.families.gpt.features", "attention_maps"),
    ),
    bench=Bench(
        flops=lazy("ptm_jax.families.gpt.flops", "step_flops"),
        synthetic_batch=lazy("ptm_jax.bench.harness", "packed_lm_batch"),
    ),
    tiny_preset="gpt_tiny",
))
