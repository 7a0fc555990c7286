"""`ptm report RUN_OR_COMPARE_DIR [-o report.html]`: one self-contained HTML page of a run or a comparison.

The page holds the resolved config (``config.json``, or ``compare.json``'s config), each training stage's curves
(drawn from the ``metrics.jsonl`` that the loop's one metrics writer, ``train/metrics.py`` MetricsWriter,
writes, by its own ``plot_curves``), each stage's final figures (``summary.json``), the comparison table and plot
of a ``ptm compare`` folder (``evaluate/compare.py``) and any attention pictures found under the folder
(``ptm attention --out``: ``evaluate/attention_maps.py``). Every image is inlined as a ``data:image/png;base64``
URI (RFC 2397), the page loads nothing from the network, and a small script at its end writes whether every image
decoded (``HTMLImageElement.complete`` and ``naturalWidth > 0``) into ``document.title`` and ``#render-check``,
which ``benchmarks/report_in_browser.py`` reads from headless Chromium.
"""
from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path
from typing import Any

from ptm_jax.errors import ConfigError

STYLE = ("body{font-family:sans-serif;max-width:1400px;margin:2em auto;color:#222}"
         "table.comparison,table.comparison-all{font-size:12px}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
         "th{background:#eee}td:first-child{text-align:left}img{max-width:100%}"
         "pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px;font-size:12px}")

CHECK_SCRIPT = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var msg = bad.length ? 'report-bad ' + bad.length + ' of ' + imgs.length + ' images failed'
                       : 'report-ok ' + imgs.length + ' images';
  document.title = msg;
  document.getElementById('render-check').textContent = msg;
});
</script>"""


def png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _img(data: bytes, alt: str) -> str:
    return f'<figure><img src="{png_data_uri(data)}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}' \
           "</figcaption></figure>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Scalar leaves of a nested dict as 'a.b.c' -> value (lists and strings of more than 80 chars dropped)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (int, float, bool)) or (isinstance(v, str) and len(v) <= 80):
            out[key] = v
    return out


def table(header: list[str], rows: list[list[Any]], css_class: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in r) + "</tr>" for r in rows)
    cls = f' class="{css_class}"' if css_class else ""
    return f"<table{cls}><tr>{head}</tr>{body}</table>"


def _curves_png(jsonl: Path) -> bytes | None:
    from ptm_jax.train.metrics import plot_curves

    with tempfile.TemporaryDirectory() as tmp:
        out = plot_curves(jsonl, Path(tmp) / "curves.png")
        return Path(out).read_bytes() if out else None


def _stage_section(stage_dir: Path, root: Path) -> str:
    """Curves and final figures of one training stage folder (one that holds metrics.jsonl)."""
    name = str(stage_dir.relative_to(root)) if stage_dir != root else stage_dir.name
    parts = [f"<h3>{html.escape(name)}</h3>"]
    png = _curves_png(stage_dir / "metrics.jsonl")
    if png:
        parts.append(_img(png, f"training curves: {name}"))
    summary = stage_dir / "summary.json"
    if summary.is_file():
        figures = flatten(json.loads(summary.read_text()))
        parts.append(table(["final figure", "value"], [[k, v] for k, v in figures.items()], "metrics"))
    return "\n".join(parts)


def _compare_section(d: Path) -> str:
    """The comparison's table in the seeds' terms (``compare.json`` columns and headers: each finetuned entry with
    its from-scratch row, then the majority-class row; a mean over seeds with their range), what pretraining added
    (finetuned minus from scratch), its plot, and every figure of every entry (each row's remaining fields)."""
    from ptm_jax.evaluate.compare_table import cell_text

    data = json.loads((d / "compare.json").read_text())
    parts = ["<h2>Comparison</h2>", f"<p>{html.escape(data.get('budget', ''))}</p>"]
    cols = data["columns"]
    rows = [*data["rows"], *([data["baseline"]] if data.get("baseline") else [])]
    parts.append(table(data.get("headers", cols), [[cell_text(r, c) for c in cols] for r in rows], "comparison"))
    added = data.get("added") or []
    if added:
        keys = ["entry", *(c for c in cols if c.startswith("finetune_"))]
        parts.append("<h3>What pretraining added</h3><p>The finetuned figure minus the same network's, finetuned "
                     "the same way from a random initialisation (mean over the finetuning seeds); * where the "
                     "gain exceeds the larger of the two seed ranges.</p>")
        parts.append(table(data.get("added_headers", keys), [[r.get(k, "") for k in keys] for r in added],
                           "comparison pretraining-added"))
    for png in sorted(d.glob("compare*.png")):
        parts.append(_img(png.read_bytes(), f"comparison plot: {png.name}"))
    rest = [k for k in dict.fromkeys(k for r in data["rows"] for k in r) if k not in cols]
    if rest:
        parts.append("<h3>Every figure per entry</h3>")
        parts.append(table(["entry", *rest], [[r["entry"], *(r.get(k, "") for k in rest)] for r in data["rows"]],
                           "comparison-all"))
    return "\n".join(parts)


def build_report(directory: str | Path) -> str:
    """The HTML page of a run folder (``ptm pretrain``/``run``/``finetune`` output_dir) or a ``ptm compare``
    folder; a ConfigError when the folder holds neither a config nor any metrics."""
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"ptm report: {d} is not a folder; pass a run's output_dir or a ptm compare folder")
    stages = sorted(p.parent for p in d.rglob("metrics.jsonl"))
    config = d / "config.json"
    is_compare = (d / "compare.json").is_file()
    if not stages and not config.is_file() and not is_compare:
        raise ConfigError(f"ptm report: {d} has no config.json, compare.json or metrics.jsonl; pass the output_dir "
                          "of a ptm pretrain/run/finetune or ptm compare")
    title = f"ptm report: {d.resolve().name}"
    head = f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
    parts = [head + f"<style>{STYLE}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             "<p id='render-check'>not checked</p>"]
    if is_compare:
        parts.append(_compare_section(d))
    if stages:
        parts.append("<h2>Training stages</h2>")
        parts.extend(_stage_section(s, d) for s in stages)
    attention = sorted(p for p in d.rglob("*.png") if "attention" in str(p.relative_to(d)).lower())
    if attention:
        parts.append("<h2>Attention</h2>")
        parts.extend(_img(p.read_bytes(), str(p.relative_to(d))) for p in attention)
    cfg_text = config.read_text() if config.is_file() else (
        json.dumps(json.loads((d / "compare.json").read_text()).get("config", {}), indent=2) if is_compare else "")
    if cfg_text:
        parts.append(f"<h2>Config</h2><pre>{html.escape(cfg_text)}</pre>")
    parts.append(CHECK_SCRIPT + "</body></html>")
    return "\n".join(parts)
