"""`ptm attention MODEL "text"`: attention maps of chosen layers and heads, as a PNG grid and as an interactive,
self-contained HTML head view.

The probabilities come from the family's ``Inspection.attention_maps`` hook (BERT, GPT, XLNet's content stream):
each model's attention sows its softmax into Flax's ``intermediates`` collection when the caller makes it
mutable (``models/attention.py:sow_probs``, ``families/xlnet/two_stream.py``), and :func:`sown_probs` reads
them back in layer order. Row ``[l, h, i]`` is query token i's distribution over the keys of head h in layer
l (Vaswani et al. 2017 Sec. 3.2.1); rows sum to 1 over the keys the query may see (padding blocked; GPT:
causal). The head view draws, for one layer, a line from each token on the left to each token on the right
with an opacity equal to the weight, one colour per head, as bertviz's head view (Vig 2019, "A Multiscale
Visualization of Attention in the Transformer Model"), written here from scratch in plain inline JavaScript:
no CDN, no network.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax.errors import ConfigError, DataError

_COMPILED: dict[str, Any] = {}


def sown_probs(model: Any, params: Any, *args: Any) -> np.ndarray:
    """Applies ``model`` with a mutable 'intermediates' collection; returns the ``attention_probs`` every layer
    sowed, float32 [layers, B, heads, T, S], in layer order (``layers_0``, ``layers_1``, ...)."""
    import jax
    import jax.numpy as jnp

    key = repr(model)  # a Flax module's repr lists its config: one compiled function per model
    if key not in _COMPILED:
        _COMPILED[key] = jax.jit(lambda p, *a: model.apply({"params": p}, *a, mutable=["intermediates"])[1])
    state = _COMPILED[key](params, *args)
    found = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(state["intermediates"])[0]:
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        if "attention_probs" in keys:
            layer = next((int(m.group(1)) for k in keys if (m := re.fullmatch(r"layers_(\d+)", k))), 0)
            found.append((layer, np.asarray(jnp.asarray(leaf, jnp.float32))))
    if not found:
        raise ConfigError(f"{type(model).__name__} sowed no attention probabilities")
    return np.stack([a for _, a in sorted(found, key=lambda t: t[0])])


def _pick(values: Sequence[int] | None, n: int, what: str) -> list[int]:
    if not values:
        return list(range(n))
    out = []
    for v in values:
        if not -n <= int(v) < n:
            raise ConfigError(f"--{what} {v}: the model has {what} 0..{n - 1}")
        out.append(int(v) % n)
    return out


def attention_maps(params: dict, model_cfg: Any, tokenizer: Any, text: str, *, layers: Sequence[int] | None = None,
                   heads: Sequence[int] | None = None) -> tuple[list[str], np.ndarray, list[int], list[int]]:
    """(tokens, float32 [len(layers), len(heads), S, S], layer numbers, head numbers) of one text."""
    from ptm_jax.families import registry

    if not text.strip():
        raise DataError("ptm attention: the text is empty; give a sentence")
    fam = registry.get(model_cfg.family)
    if fam.inspection.attention_maps is None:
        able = sorted(n for n, f in registry.families().items() if f.inspection.attention_maps is not None)
        raise ConfigError(f"model.family={model_cfg.family!r} has no attention maps; the families that do: "
                          f"{', '.join(able)}")
    lay, hd = _pick(layers, model_cfg.num_layers, "layers"), _pick(heads, model_cfg.num_heads, "heads")
    tokens, probs = fam.inspection.attention_maps(params, model_cfg, tokenizer, text)
    probs = np.asarray(probs, np.float32)
    return list(tokens), probs[lay][:, hd], lay, hd


# ----------------------------------------------------------------------------------------------------
# Pictures


def save_png(tokens: list[str], probs: np.ndarray, layers: list[int], heads: list[int], path: str | Path,
             title: str = "") -> Path:
    """A grid of heatmaps, one per (layer, head): rows are queries, columns keys."""
    from ptm_jax.evaluate.plots import pyplot

    plt = pyplot()
    nl, nh = len(layers), len(heads)
    size = max(1.6, min(4.0, 0.22 * len(tokens)))
    fig, axes = plt.subplots(nl, nh, figsize=(size * nh + 1.0, size * nl + 0.8), squeeze=False)
    labels = tokens if len(tokens) <= 40 else None
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i][j]
            ax.imshow(probs[i, j], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(f"layer {layer + 1} head {head}", fontsize=8)
            if labels:
                ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
                ax.set_yticks(range(len(labels)), labels, fontsize=6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:sans-serif;margin:16px;color:#222}
#controls{margin-bottom:8px}
.head{display:inline-block;width:16px;height:16px;margin:2px;border:2px solid #fff;cursor:pointer;opacity:.9}
.head.off{opacity:.15}
svg text{font-size:13px;cursor:default}
svg text.hi{font-weight:bold}
</style></head><body>
<h3>__TITLE__</h3>
<div id="controls">Layer: <select id="layer"></select>
 &nbsp; Heads (click to toggle, double-click for one): <span id="heads"></span></div>
<svg id="view" xmlns="http://www.w3.org/2000/svg"></svg>
<p style="font-size:12px;color:#666">Lines go from each query token (left) to the keys it attends to (right);
opacity = attention weight. Hover a token to see only its attention.</p>
<script>
"use strict";
const DATA = __DATA__;
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22",
                "#17becf","#393b79","#637939","#8c6d31","#843c39","#7b4173","#3182bd"];
const T = DATA.tokens, LH = 20, W = 520, X0 = 150, X1 = 370;
let layer = 0, on = DATA.heads.map(() => true), focus = null;
const svg = document.getElementById("view"), NS = "http://www.w3.org/2000/svg";
svg.setAttribute("width", W); svg.setAttribute("height", LH * T.length + 20);
const sel = document.getElementById("layer");
DATA.layers.forEach((l, i) => { const o = document.createElement("option"); o.value = i;
  o.textContent = "layer " + (l + 1); sel.appendChild(o); });
sel.onchange = () => { layer = +sel.value; draw(); };
const hs = document.getElementById("heads");
DATA.heads.forEach((h, i) => { const b = document.createElement("span"); b.className = "head";
  b.style.background = COLORS[i % COLORS.length]; b.title = "head " + h;
  b.onclick = () => { on[i] = !on[i]; draw(); };
  b.ondblclick = () => { on = on.map((_, j) => j === i); draw(); }; hs.appendChild(b); });
function el(name, attrs) { const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]); return e; }
function draw() {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  Array.from(hs.children).forEach((b, i) => b.classList.toggle("off", !on[i]));
  const P = DATA.probs[layer], n = on.filter(Boolean).length || 1;
  P.forEach((rows, h) => { if (!on[h]) return;
    rows.forEach((row, i) => { if (focus !== null && focus !== i) return;
      row.forEach((w, j) => { if (w < 0.01) return;
        svg.appendChild(el("line", {x1: X0 + 4, y1: 14 + LH * i, x2: X1 - 4, y2: 14 + LH * j,
          stroke: COLORS[h % COLORS.length], "stroke-width": 2, "stroke-opacity": Math.min(1, w / Math.sqrt(n))}));
      }); }); });
  T.forEach((t, i) => {
    const a = el("text", {x: X0, y: 18 + LH * i, "text-anchor": "end"}); a.textContent = t;
    if (focus === i) a.setAttribute("class", "hi");
    a.onmouseenter = () => { focus = i; draw(); }; a.onmouseleave = () => { focus = null; draw(); };
    svg.appendChild(a);
    const b = el("text", {x: X1, y: 18 + LH * i}); b.textContent = t; svg.appendChild(b); });
}
draw();
</script></body></html>
"""


def head_view_html(tokens: list[str], probs: np.ndarray, layers: list[int], heads: list[int], path: str | Path,
                   title: str = "attention") -> Path:
    """One self-contained HTML file (inline CSS and JavaScript, the weights as inline JSON, rounded to 4
    decimals): a layer selector, one toggle per head, the lines of the head view."""
    data = {"tokens": tokens, "layers": layers, "heads": heads,
            "probs": np.round(probs.astype(np.float64), 4).tolist()}
    text = (_HTML.replace("__TITLE__", html.escape(title))
            .replace("__DATA__", json.dumps(data, separators=(",", ":")).replace("</", "<\\/")))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
