"""objective name -> builder. A new family plugs in here; the loop never changes."""
from __future__ import annotations

from typing import Any, Callable

from ptm_jax.config import RunConfig
from ptm_jax.errors import ConfigError


def _mlm_nsp(cfg: RunConfig, corpus: Any):
    from ptm_jax.objectives.mlm_nsp import MlmNspObjective

    return MlmNspObjective(cfg, corpus.train, corpus.eval, corpus.special)


def _causal_lm(cfg: RunConfig, corpus: Any):
    from ptm_jax.objectives.causal_lm import CausalLmObjective

    tok = corpus.tokenizer
    eos = getattr(tok, "eos_id", None)
    eos = tok.sep_id if eos is None else eos  # WordPiece/SentencePiece vocabularies: [SEP] ends a document
    return CausalLmObjective(cfg, corpus.train, corpus.eval, eos_id=eos, pad_id=tok.pad_id)


def _plm(cfg: RunConfig, corpus: Any):
    from ptm_jax.objectives.plm import PlmObjective

    return PlmObjective(cfg, corpus.train, corpus.eval, corpus.special)


OBJECTIVES: dict[str, Callable[[RunConfig, Any], Any]] = {
    "mlm_nsp": _mlm_nsp,
    "mlm": _mlm_nsp,
    "causal_lm": _causal_lm,
    "plm": _plm,
}


def build_objective(cfg: RunConfig, corpus: Any):
    if cfg.objective not in OBJECTIVES:
        raise ConfigError(f"objective={cfg.objective!r} is not one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[cfg.objective](cfg, corpus)
