"""The objective contracts of ``ptm_jax/objectives/base.py``: runtime-checkable protocols
instead of attribute probing, and the flag by which an objective refuses gradient accumulation.

- every registered pretraining objective (built through the registry on its family's tiny preset) is an
  ``Objective`` and not a ``TaskObjective``; only the permutation LM and Transformer-XL's LM (their memory) and
  the AWD-LSTM LM and Flair's character LMs (their LSTM states) are ``CarriesState`` (ELMo, which also carries
  state, builds an artifact and is not built here);
- an objective with ``grad_accum = False`` (in-batch negatives) is refused with a ConfigError naming
  ``train.grad_accum_steps`` before anything is compiled; with 1 step it passes the check.
"""
from __future__ import annotations

import jax
import pytest

from ptm_jax.bench.harness import build_bench_objective
from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.families import registry
from ptm_jax.objectives.base import (CarriesState, Objective, TaskObjective, accepts_grad_accum,
                                     check_grad_accum)
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective


def _built() -> dict:
    out = {}
    for objective, fam in registry.objective_names().items():
        family = registry.get(fam)
        if family.tiny_preset and family.bench.corpus == "synthetic":  # the others read the configured corpus
            out[objective] = build_bench_objective(load_config(family.tiny_preset, [f"objective={objective}"]))
    return out


def test_registered_objectives_satisfy_the_protocols_they_claim():
    built = _built()
    assert {"mlm_nsp", "mlm", "causal_lm", "plm"} <= set(built)
    for name, obj in built.items():
        assert isinstance(obj, Objective), name
        assert not isinstance(obj, TaskObjective), name
        assert accepts_grad_accum(obj), name
    assert {n for n, o in built.items() if isinstance(o, CarriesState)} == {"plm", "awd_lstm_lm", "transfo_xl_lm",
                                                                               "flair_char_lm"}


def test_an_objective_that_refuses_accumulation_gets_a_config_error_naming_the_field():
    cfg = load_config("gpt_tiny", ["train.grad_accum_steps=2", "train.batch_size=8"])
    base = build_bench_objective(cfg)

    class InBatchNegatives(type(base)):
        grad_accum = False

    obj = InBatchNegatives.__new__(InBatchNegatives)
    obj.__dict__.update(base.__dict__)
    assert not accepts_grad_accum(obj) and accepts_grad_accum(base)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    with pytest.raises(ConfigError, match=r"train\.grad_accum_steps=2: objective 'causal_lm' couples the rows"):
        compile_objective(obj, cfg.train, mesh)
    check_grad_accum(obj, 1)  # no error
