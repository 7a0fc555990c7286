"""The README's two set-up commands exist, the test command installs the parity tests' reference libraries, and
.ci/run runs exactly the README's test command."""
import re

from conftest import REPO


def _commands():
    return re.findall(r"```bash\n(python3 -m venv .*?)\n```", (REPO / "README.md").read_text())


def test_readme_has_main_job_and_test_commands():
    cmds = _commands()
    assert len(cmds) == 2
    assert cmds[0].endswith("ptm run") and "pip install -e ." in cmds[0]
    # the test environment is the lock file's exact versions (requirements/compile.sh makes it from the test extra)
    assert "python -m pytest" in cmds[1] and "-r requirements/test.lock" in cmds[1]


def test_the_test_command_installs_the_reference_libraries_the_parity_tests_read():
    """fastai and AllenNLP go into their own folders (tests/reference_libs.py), with the pins the tests expect."""
    from reference_libs import INSTALL

    for command in INSTALL.values():
        assert command in _commands()[1]


def test_ci_runs_exactly_the_readme_test_command_one_step_a_line():
    """.ci/run holds the README's test command split at its `&&`s, one step a line under `set -e`, in order and
    nothing else between its two markers, so every step's failure fails CI."""
    text = (REPO / ".ci/run").read_text()
    assert "set -euo pipefail" in text and "set +e" not in text
    steps = text.split("# README test command, one step a line:\n")[1].split("# end of the README test command")[0]
    lines = steps.strip().splitlines()
    assert " && ".join(lines) == _commands()[1]
    assert len(lines) == _commands()[1].count(" && ") + 1 and not any("&&" in ln for ln in lines)
