"""The tests that may skip, each with the reason it skips, checked at the end of every test session.

A skip is how a missing install hides: ``importorskip`` turns a whole interop module into skips, and a count of
"12 skipped" looks the same whatever skipped. So every skip must be listed here with its reason, and the session
fails when a test skips that is not listed (or skips for another reason), and when a listed test ran instead of
skipping (the list is then out of date: drop its line). A listed test that was not selected at all (``-k``, one
file) is not a failure. The check runs once, in the process that gathers every test's report (the xdist
controller, or the only process), after the last test: ``SkipCheck``, registered by tests/conftest.py.

``EXPECTED_SKIPS`` maps a test's node id (a module's path for a module that skips as a whole) to a piece of the
reason pytest prints for it (``-rs``)."""
from __future__ import annotations

import pytest

NO_HF = "has no Hugging Face counterpart"
"""The objective conformance check's Hugging Face round trip, for a family with no Hugging Face model class."""

EXPECTED_SKIPS: dict[str, str] = {
    **{f"tests/test_conformance_lineage.py::test_hugging_face_round_trip_is_bit_equal[{objective}]": NO_HF
       for objective in ("awd_lstm_lm", "cbow", "elmo_bilm", "fasttext_cbow", "fasttext_skipgram", "glove", "nnlm",
                         "skipgram", "flair_char_lm", "node2vec", "poincare", "cove_translation")},
    # flair imports transformers and a dozen packages of its own in each of the check's two processes (minutes of
    # CPU on the 2-core CI machine): not installed by the test command; tests/test_flair.py checks the same
    # embeddings against a PyTorch re-implementation of flair's LanguageModel on every run (tests/flair_env.py
    # says how to install flair and run this check)
    "tests/test_flair.py::test_word_embeddings_equal_flairs_own_flair_embeddings": "flairNLP/flair is not installed",
}


def skip_reason(report) -> str:
    """The reason of a skipped report as pytest prints it (``longrepr`` is (path, line, 'Skipped: reason'))."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def mismatches(skipped: dict[str, str], ran: set[str], expected: dict[str, str]) -> list[str]:
    """One line per disagreement between the skips that happened (node id -> reason), the node ids that ran (any
    phase reported not skipped) and ``expected``."""
    out = []
    for nodeid, reason in sorted(skipped.items()):
        if nodeid not in expected:
            out.append(f"unexpected skip: {nodeid}: {reason}")
        elif expected[nodeid] not in reason:
            out.append(f"skipped for another reason: {nodeid}: {reason} (expected a reason with "
                       f"{expected[nodeid]!r})")
    for nodeid, reason in sorted(expected.items()):
        if nodeid in skipped:
            continue
        if nodeid in ran or any(r.startswith(nodeid + "::") for r in ran):
            out.append(f"expected to skip ({reason!r}) but ran: {nodeid}; remove it from tests/expected_skips.py")
    return out


class SkipCheck:
    """Gathers the skips and the tests that ran from every report, compares them with ``EXPECTED_SKIPS`` at the end
    of the session, and fails the session on any mismatch (exit status 1, the list printed in the summary)."""

    def __init__(self, expected: dict[str, str] | None = None):
        self.expected = EXPECTED_SKIPS if expected is None else expected
        self.skipped: dict[str, str] = {}
        self.ran: set[str] = set()
        self.problems: list[str] = []

    def _record(self, report) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):  # an xfail is reported as skipped: not a skip
            self.skipped.setdefault(report.nodeid, skip_reason(report))
        elif report.when == "call" or report.failed:
            self.ran.add(report.nodeid)

    def pytest_runtest_logreport(self, report) -> None:
        self._record(report)

    def pytest_collectreport(self, report) -> None:  # a module skipped as a whole (module-level importorskip)
        if report.skipped:
            self._record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        self.problems = mismatches(self.skipped, self.ran, self.expected)
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.problems:
            terminalreporter.section("skips against tests/expected_skips.py", sep="=", red=True, bold=True)
            for line in self.problems:
                terminalreporter.line(line, red=True)
        else:
            terminalreporter.line(f"skips as expected: {len(self.skipped)} (tests/expected_skips.py)")
