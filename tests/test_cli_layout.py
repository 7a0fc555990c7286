"""The `ptm` subcommands live in one place: every handler (``def cmd_``) and every ``add_parser(`` is in
``ptm_jax/commands/`` (one module per group) or ``ptm_jax/cli.py``, and ``ptm --help`` lists every subcommand the
groups register, no more and no fewer than the fixed set below (a new command is added here on purpose)."""
import os
import re
import subprocess
import sys

from conftest import REPO

COMMANDS = {"run", "pretrain", "finetune", "eval", "data", "config", "presets", "families", "import-hf", "import",
            "export", "embed", "predict", "bench", "compile", "generate", "perplexity", "lm-eval", "neighbors",
            "analogy", "eval-vectors", "attention", "probe", "context-neighbors", "vector-map", "compare", "report"}
CLI_CODE = re.compile(r"def cmd_|add_parser\(|def register\(subparsers")


def test_handlers_and_parsers_live_only_in_the_commands_package_and_cli():
    stray = []
    for f in sorted((REPO / "ptm_jax").rglob("*.py")):
        rel = f.relative_to(REPO).as_posix()
        if rel == "ptm_jax/cli.py" or rel.startswith("ptm_jax/commands/"):
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if CLI_CODE.search(line):
                stray.append(f"{rel}:{n}: {line.strip()}")
    assert not stray, ("command handlers and argument parsers belong in ptm_jax/commands/ (one module per group, "
                       "with register(subparsers)); move these there and keep the logic they call where it is: "
                       + "; ".join(stray))


def test_every_group_registers_its_commands_with_a_handler():
    import argparse
    import importlib

    from ptm_jax.cli import GROUPS

    on_disk = {p.stem for p in (REPO / "ptm_jax/commands").glob("*.py") if p.stem != "__init__"}
    assert set(GROUPS) == on_disk, "ptm_jax/cli.py GROUPS must name every module of ptm_jax/commands/"
    seen: dict[str, str] = {}
    for group in GROUPS:
        sub = argparse.ArgumentParser().add_subparsers(dest="command")
        importlib.import_module(f"ptm_jax.commands.{group}").register(sub)
        assert sub.choices, f"commands/{group}.py registers no subcommand"
        for name, parser in sub.choices.items():
            assert name not in seen, f"{name} registered by both commands/{seen[name]}.py and commands/{group}.py"
            seen[name] = group
            assert callable(parser.get_default("handler")), f"ptm {name} has no handler= default"
    assert set(seen) == COMMANDS


def test_ptm_help_lists_every_registered_command():
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", USE_TF="0", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "ptm_jax.cli", "--help"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    listing = r.stdout.split("positional arguments:")[1].split("options:")[0]
    listed = {line.split()[0] for line in listing.splitlines() if re.match(r" {4}\S", line)}
    assert listed == COMMANDS, (sorted(listed - COMMANDS), sorted(COMMANDS - listed))
