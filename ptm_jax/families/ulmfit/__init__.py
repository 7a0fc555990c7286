"""ULMFiT (Howard & Ruder 2018) on the AWD-LSTM (Merity et al. 2018) as one family package.

``config.py`` the ``[model]``/``[data]`` sections, ``model.py`` the AWD-LSTM, its LM and its classifier,
``lm_data.py`` the variable-BPTT, state-carrying LM batches, ``objective.py`` the LM loss with AR/TAR,
``classification.py`` the concat-pooling classifier, ``hooks.py`` discriminative rates and gradual unfreezing as
parameter groups, ``weights.py`` the import of fastai AWD_LSTM state dicts, ``perplexity.py`` stateful held-out
perplexity, ``pipeline.py`` the three stages (general LM, target-task LM, classifier). The tokenizer is the word
vocabulary (``data/word_vocab.py``). Importing this package registers it.
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.registry import Family, lazy, register
from ptm_jax.families.ulmfit import hooks
from ptm_jax.families.ulmfit.config import UlmfitConfig, UlmfitDataConfig


def build_lm(cfg: Any, corpus: Any):
    from ptm_jax.families.ulmfit.objective import AwdLstmLmObjective

    tok = corpus.tokenizer
    return AwdLstmLmObjective(cfg, corpus.train, corpus.eval, eos_id=tok.eos_id, pad_id=tok.pad_id)


FAMILY = register(Family(
    name="ulmfit",
    model_config=UlmfitConfig,
    data_config=UlmfitDataConfig,
    objectives={"awd_lstm_lm": build_lm},
    tokenizer_kinds=("word",),
    specials=("pad", "eos"),
    trunk=hooks.TRUNK,
    heads=("language_model", "sequence_classification"),
    infer_head=hooks.infer_head,
    param_groups=hooks.param_groups,
    layer_of=hooks.layer_of,
    classifier=lazy("ptm_jax.families.ulmfit.classification", "classifier"),
    flops=hooks.step_flops,
    synthetic_batch=hooks.synthetic_batch,
    perplexity=lazy("ptm_jax.families.ulmfit.perplexity", "perplexity"),
    tiny_preset="ulmfit_tiny",
    capabilities=frozenset({"perplexity"}),
))
