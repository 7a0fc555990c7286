"""ptm report: the HTML page of a real (tiny) pretraining run, read back with html.parser (no browser)."""
from __future__ import annotations

import base64
import html
import json
from html.parser import HTMLParser

import pytest

from ptm_jax.errors import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Collects each img's src and each table's cell texts."""

    def __init__(self):
        super().__init__()
        self.imgs: list[str] = []
        self.tables: list[list[str]] = []
        self.scripts = 0
        self.external: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "table":
            self.tables.append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag == "script":
            self.scripts += 1
        for key in ("href", "src"):
            if a.get(key, "data:").split(":")[0] in ("http", "https", "file") or (key == "href" and a.get(key)):
                self.external.append(a[key])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1].append("".join(self._cell))
            self._cell = None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from ptm_jax.config_loading import load_config
    from ptm_jax.train.stages import pretrain

    out = tmp_path_factory.mktemp("report") / "nnlm_run"
    cfg = load_config("nnlm_tiny", [f"output_dir={str(out)!r}", "train.steps=6", "train.log_every=2",
                                    "train.eval_every=3", "train.checkpoint_every=6"])
    pretrain(cfg)
    return out


def test_report_inlines_png_curves_and_tables_hold_the_run_metrics(run_dir, tmp_path):
    from ptm_jax.cli import main

    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "-o", str(out)]) == 0
    page = Page()
    page.feed(out.read_text())
    assert page.imgs, "the curves image is missing"
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert page.external == []  # nothing loaded from the network or disk
    assert page.scripts == 1  # the render check only
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    cells = page.tables[0]
    assert summary["step"] == 6
    # the final figures table holds the run's final train and eval figures, as formatted by the page
    for key in ("train.lm_loss", "eval.lm_loss", "step"):
        section, _, name = key.rpartition(".")
        value = summary[section][name] if section else summary[name]
        i = cells.index(key)
        assert cells[i + 1] == (f"{value:.4g}" if isinstance(value, float) else str(value))
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["objective"] == "nnlm" and html.escape('"objective": "nnlm"') in out.read_text()


def test_report_of_a_folder_without_a_run_is_a_config_error(tmp_path):
    from ptm_jax.evaluate.report import build_report

    with pytest.raises(ConfigError, match="no config.json"):
        build_report(tmp_path)
