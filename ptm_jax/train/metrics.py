"""The one metrics writer: TensorBoard scalars (tensorboardX event files), a JSONL log, a progress bar, and a curves plot at the end.

Only process 0 writes. Scalars arrive as host floats (the loop fetches them one step late by default, so logging
never stalls the device: train.metrics_one_step_late).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import jax


def reduce_terms(metrics: dict[str, Any]) -> dict[str, float]:
    """{'x': (num, den)} -> {'x': num/den}; plain scalars pass through."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, tuple):
            num, den = float(v[0]), float(v[1])
            out[k] = num / den if den else float("nan")
        else:
            out[k] = float(v)
    return out


class MetricsWriter:
    def __init__(self, directory: str | Path, total_steps: int, progress_bar: bool = True, initial_step: int = 0):
        self.directory = Path(directory)
        self.enabled = jax.process_index() == 0
        self._tb = None
        self._bar = None
        self._jsonl = None
        if not self.enabled:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.directory / "metrics.jsonl", "a", encoding="utf-8")
        from tensorboardX import SummaryWriter

        self._tb = SummaryWriter(str(self.directory / "tb"))
        if progress_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=initial_step, dynamic_ncols=True, leave=True)
        self._last_step = initial_step
        self._t0 = time.time()

    def write(self, step: int, split: str, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, "time": round(time.time() - self._t0, 3), **scalars}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for k, v in scalars.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, global_step=step)
        self._tb.flush()
        if self._bar is not None and split == "train":
            self._bar.update(step - self._last_step)
            self._last_step = step
            show = {k: f"{v:.4g}" for k, v in scalars.items() if k in ("loss", "mlm_accuracy", "accuracy",
                                                                        "tokens_per_sec")}
            self._bar.set_postfix(show, refresh=False)

    def log(self, message: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        self._jsonl.close()
        self._tb.close()
        plot_curves(self.directory / "metrics.jsonl", self.directory / "curves.png")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; a line cut by a crash (the run was killed mid-write) is skipped."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def plot_curves(jsonl: Path, out: Path) -> Path | None:
    """Loss and accuracy curves (train and eval) saved as a PNG."""
    if not jsonl.exists():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(jsonl)
    keys = [k for k in ("loss", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "accuracy") if any(k in r for r in rows)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for split, style in (("train", "-"), ("eval", "o-")):
            pts = [(r["step"], r[key]) for r in rows if r.get("split") == split and key in r]
            if pts:
                ax.plot(*zip(*pts), style, label=split, markersize=3)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
