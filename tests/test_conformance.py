"""Every registered pretraining objective passes the same checks (docs/conformance.md:
conformance comes from the registry). The objectives come from ``ptm_jax.families.registry``; each family's
``Family.tiny_preset`` gives the config, so registering a family puts it under test.

For each objective, on its family's tiny preset (vocabulary 256, batch 8, 32 tokens, 2 steps) over a real text
(tinyshakespeare words, tests/corpus_util.py; a family with ``Pretraining.artifacts`` goes through
``train/stages.prepare_corpus`` instead, on the first 3000 lines, with its own tokenizer of 256 entries, prepared once
for all of the family's objectives):

- two steps on the (2,2,2) mesh give finite losses (the first above 1 for a token-prediction loss over 256 ids,
  above 0.1 for others such as GloVe's weighted least squares);
- a run stopped after step 1 and resumed ends with parameters bit-equal to the uninterrupted run's;
- the losses of both steps on one device equal those on the (2,2,2) mesh (rtol 1e-5, dropout included);
- the trained parameters written as a params directory load back bit-equal;
- where the family has Hugging Face interop (``Interop.hf``): exported to a Hugging Face folder and imported
  again, they are bit-equal.

The checks live in tests/conformance_checks.py. This module takes the Transformer families;
tests/test_conformance_lineage.py takes every other registered family (a new family lands there), so that the two
xdist workers of the suite can each take one file. docs/conformance.md holds the resulting table.
"""
from __future__ import annotations

import pytest
from conformance_checks import (  # noqa: F401  (the checks are collected from here)
    TRANSFORMER_FAMILIES,
    objective_params,
    objective_runs,
    test_hugging_face_round_trip_is_bit_equal,
    test_losses_on_one_device_equal_the_2_2_2_mesh,
    test_params_directory_round_trip_is_bit_equal,
    test_resume_after_a_stop_ends_bit_equal_to_the_uninterrupted_run,
    test_two_steps_give_finite_losses,
)


@pytest.fixture(scope="module", params=objective_params(True, TRANSFORMER_FAMILIES))
def runs(request, shared_data, tmp_path_factory):
    return objective_runs(request.param, shared_data, tmp_path_factory)
