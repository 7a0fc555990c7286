"""benchmarks/install_time.py: the install steps it times are the README test command's, up to pytest, and side B
adds its pip options to every pip install and nothing else."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import install_time  # noqa: E402


def test_the_steps_are_the_readme_test_command_before_pytest():
    readme = (ROOT / "README.md").read_text()
    steps = install_time.install_steps(readme)
    command = [c for c in re.findall(r"```bash\n(python3 -m venv .*?)\n```", readme) if "pytest" in c][0]
    assert " && ".join(steps) + " && python -m pytest -n 2 --dist loadfile" == command
    assert steps[0] == "python3 -m venv .venv" and steps[1] == ". .venv/bin/activate"
    assert all(s.startswith("pip install ") for s in steps[2:]) and len(steps) > 4


def test_side_b_adds_its_options_to_every_pip_install_only():
    steps = ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -q -r a.lock",
             "pip install -q --target .venv/x 'y==1'"]
    assert install_time.with_pip_args(steps, "--no-compile") == [
        "python3 -m venv .venv", ". .venv/bin/activate", "pip install --no-compile -q -r a.lock",
        "pip install --no-compile -q --target .venv/x 'y==1'"]
