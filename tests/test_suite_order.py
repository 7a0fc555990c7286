"""tests/suite_order.py: an xdist worker with ``--dist loadfile`` takes the listed heavy files first, heaviest first,
then the others by their number of tests, each file whole and in its own order (a real pytest session of its own,
pytester in a subprocess); every listed file is a test file of this suite."""
from __future__ import annotations

import json
import re
from pathlib import Path

import suite_order

pytest_plugins = ["pytester"]

CONFTEST = f"""
import json, os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import suite_order
suite_order.FILE_COST_S = json.loads(os.environ["FILE_COST_S"])

def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False

def pytest_collection_modifyitems(config, items):
    suite_order.heaviest_first(items)
"""


def test_a_worker_takes_the_heaviest_listed_file_first_then_the_others_by_test_count(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a="def test_a1(): pass\ndef test_a2(): pass\ndef test_a3(): pass\n",
                        test_b="def test_b1(): pass\n",
                        test_c="def test_c1(): pass\ndef test_c2(): pass\n",
                        test_d="def test_d2(): pass\ndef test_d1(): pass\n",
                        test_e="def test_e1(): pass\n")
    monkeypatch.setenv("FILE_COST_S", json.dumps({"test_b.py": 300.0, "test_e.py": 500.0}))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess("-p", "xdist.plugin", "-p", "no:cacheprovider", "-n", "1", "--dist",
                                           "loadfile", "-v")
    assert result.ret == 0, result.stdout.str()
    ran = re.findall(r"PASSED (test_\w+\.py::test_\w+)", result.stdout.str())
    # e, b: listed, heaviest first; then a (3 tests), c and d (2 each, collection order); d's own order kept
    assert ran == ["test_e.py::test_e1", "test_b.py::test_b1", "test_a.py::test_a1", "test_a.py::test_a2",
                   "test_a.py::test_a3", "test_c.py::test_c1", "test_c.py::test_c2", "test_d.py::test_d2",
                   "test_d.py::test_d1"], result.stdout.str()


def test_every_listed_file_is_a_test_file_of_this_suite():
    root = Path(__file__).parent.parent
    assert all((root / path).is_file() and path.startswith("tests/test_") for path in suite_order.FILE_COST_S)
