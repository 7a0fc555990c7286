"""Fuzzing every reader and tokenizer: on any input each returns normally (with a sane result) or raises
ptm_jax.errors.PtmError -- never another exception, never a hang (10 s deadline per input).

The targets and input strategies live in benchmarks/fuzz_readers.py (which runs >= 10,000 inputs); here each
target gets 150 derandomized Hypothesis inputs, so the suite is deterministic and fast. A target marked xfail
has a known crash in code this suite does not own; the reason names it, and ``strict`` turns the mark into a
failure once the crash is fixed, so the mark cannot outlive the bug.
"""
from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from ptm_jax.data.corpus import read_documents
from ptm_jax.errors import DataError

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = 150


def _load_harness():
    spec = importlib.util.spec_from_file_location("fuzz_readers", REPO / "benchmarks" / "fuzz_readers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_readers", module)
    spec.loader.exec_module(module)
    return module


fuzz = _load_harness()

KNOWN_CRASHES = {
    "glue.read_glue": "glue.py read_glue: invalid UTF-8 raises UnicodeDecodeError and a field over 128 KiB "
                      "raises _csv.Error instead of DataError(file:line)",
    "squad.read_squad": "squad.py read_squad: invalid UTF-8 raises UnicodeDecodeError (only JSONDecodeError is "
                        "caught)",
    "conll.read_conll": "conll.py read_conll: invalid UTF-8 raises UnicodeDecodeError instead of DataError",
    "hf_bert.model_config_from_hf": "hf_bert.py model_config_from_hf: wrong JSON types raise TypeError/ValueError, "
                                    "num_attention_heads=0 raises ZeroDivisionError, sizes <= 0 are accepted",
    "hf_bert.import_hf(dir)": "hf_bert.py import_hf: a config.json/modules.json of the wrong shape raises "
                              "TypeError/JSONDecodeError (model_config_from_hf, sentence_transformers_info); "
                              "num_hidden_layers=2.5e16 loops ~forever in all_rules",
}


def _param(name: str):
    if name in KNOWN_CRASHES:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CRASHES[name]))
    return name


@pytest.fixture(scope="module")
def tools(shared_data, tmp_path_factory):
    return fuzz.make_tools(tmp_path_factory.mktemp("fuzz_tools"), shared_data / "corpus/tinyshakespeare/input.txt")


@pytest.mark.parametrize("name", [_param(n) for n in fuzz.TARGETS])
def test_reader_returns_or_raises_ptm_error_on_fuzzed_input(name, tools, tmp_path):
    outcomes: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(fuzz.STRATEGIES[name])
    def prop(value):
        out = fuzz.check(name, value, tools, tmp_path, seconds=10.0)
        outcomes[out.kind] += 1
        assert out.kind in ("ok", "rejected"), f"{name}: {out.kind} on {value!r:.300}\n{out.detail}"

    prop()
    assert outcomes["crash"] == outcomes["wrong"] == outcomes["hang"] == 0
    assert sum(outcomes.values()) >= EXAMPLES // 2, outcomes  # Hypothesis may stop early on a small space
    # the inputs reach both sides of the contract: some are accepted, and (except for the tokenizers,
    # which accept any text) some are refused
    assert outcomes["ok"] > 0, outcomes
    if not name.endswith(".encode"):
        assert outcomes["rejected"] > 0, outcomes


def test_a_huge_line_is_refused_with_its_file_and_line_number(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_bytes(b"first line.\n" + b"x" * 2_000_000 + b"\nlast line.\n")
    with pytest.raises(DataError, match=rf"{path.name}:2: line is longer than data.max_line_bytes=1000000"):
        list(read_documents(path))


def test_nul_bytes_and_invalid_utf8_are_refused_with_their_line(tmp_path):
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"a.\nb.\nc\x00d.\n")
    with pytest.raises(DataError, match=rf"{nul.name}:3: binary file"):
        list(read_documents(nul))
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"one.\ntwo.\ncaf\xe9.\n")
    with pytest.raises(DataError, match=rf"{latin.name}:3: not valid UTF-8"):
        list(read_documents(latin))


def test_the_deadline_turns_a_hang_into_a_reported_outcome():
    import time

    out = fuzz.attempt(lambda: time.sleep(5), seconds=0.2)
    assert out.kind == "hang"
    assert fuzz.attempt(lambda: int("x"), seconds=1).kind == "crash"
    assert fuzz.attempt(lambda: (_ for _ in ()).throw(DataError("f:1: bad")), seconds=1).kind == "rejected"
