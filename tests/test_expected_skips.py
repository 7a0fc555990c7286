"""The skip check of tests/expected_skips.py, run in real pytest sessions of their own (pytester, a subprocess each):
with two xdist workers it sees every worker's skips once, in the controller; a skip that is not listed, one for
another reason, and a listed test that ran each fail the session; a listed test that was not selected does not."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from expected_skips import EXPECTED_SKIPS

pytest_plugins = ["pytester"]

CONFTEST = f"""
import json, os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from expected_skips import SkipCheck

def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipCheck(json.loads(os.environ["EXPECTED"])), "expected_skips")
"""
LISTED = {"test_a.py::test_listed": "needs the frobnicator", "test_b.py": "no_such_module_for_the_skip_check"}


@pytest.fixture
def session(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a="""
        import pytest

        def test_listed():
            pytest.skip("needs the frobnicator")

        def test_runs():
            assert 1 + 1 == 2

        @pytest.mark.xfail(strict=True, reason="a known bug: an xfail, not a skip")
        def test_known_bug():
            assert False
        """, test_b="""
        import pytest
        pytest.importorskip("no_such_module_for_the_skip_check")

        def test_never_collected():
            pass
        """)

    def run(expected: dict[str, str], *args: str):
        monkeypatch.setenv("EXPECTED", json.dumps(expected))
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # xdist only: a third of the start-up CPU time
        return pytester.runpytest_subprocess("-p", "xdist.plugin", "-p", "no:cacheprovider", *args)

    return run


def test_listed_skips_pass_in_the_xdist_controller_over_both_workers(session):
    result = session(LISTED, "-n", "2", "-rs")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    result.stdout.fnmatch_lines(["*skips as expected: 2 (tests/expected_skips.py)*"])


def test_an_unlisted_skip_a_changed_reason_and_a_listed_test_that_ran_fail_the_session(session):
    expected = {"test_a.py::test_listed": "needs the widget", "test_a.py::test_runs": "needs nothing"}
    result = session(expected, "-n", "2")
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)  # every test passed or skipped: the check failed it
    result.stdout.fnmatch_lines([
        "*skips against tests/expected_skips.py*",
        "skipped for another reason: test_a.py::test_listed: needs the frobnicator (expected a reason with "
        "'needs the widget')",
        "unexpected skip: test_b.py: could not import 'no_such_module_for_the_skip_check'*",
        "expected to skip ('needs nothing') but ran: test_a.py::test_runs; remove it from tests/expected_skips.py",
    ])


def test_a_listed_test_that_was_not_selected_is_not_a_failure(session):
    result = session(LISTED, "-n", "0", "-k", "test_runs")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=1)  # test_b.py still skips as a module at collection


def test_each_listed_skip_names_a_test_of_this_suite_and_a_reason():
    """A misspelt node id would never match (and a test not selected is no failure), so each must name a test."""
    for nodeid, reason in EXPECTED_SKIPS.items():
        path = Path(__file__).parent.parent / nodeid.split("::")[0]
        assert path.is_file() and reason, nodeid
        name = nodeid.split("::")[1].split("[")[0] if "::" in nodeid else None
        assert name is None or f"def {name}(" in path.read_text() or f" {name}," in path.read_text(), nodeid
