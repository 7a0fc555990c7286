"""The README's two set-up commands exist, and .ci/run runs exactly the README's test command."""
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


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [ln.strip() for ln in (REPO / ".ci/run").read_text().splitlines()]
    assert _commands()[1] in ci_lines
