"""The conformance checks of tests/test_conformance.py for every registered family that is not a Transformer
(static vectors, NNLM, the recurrent LMs, and any family registered later): see that module's docstring."""

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


@pytest.fixture(scope="module", params=objective_params(False, TRANSFORMER_FAMILIES))
def runs(request, shared_data, tmp_path_factory):
    return objective_runs(request.param, shared_data, tmp_path_factory)
