"""The one metrics writer: TensorBoard scalars (tensorboardX event files), a JSONL log, a progress bar, and a curves plot at the end.

Only process 0 writes. On the console: a tqdm progress bar when ``train.progress_bar`` is on and stderr is
a terminal; otherwise (``progress_bar=false``, or output to a file / pipe: batch jobs, SLURM logs, TPU pod
workers) one plain line per logged train record (every ``train.log_every`` steps): step, loss, the
objective's metrics, model TFLOP/s, MFU, the share of time waiting for input, learning rate, examples/s and an ETA, never carriage-return redraws
(``format_line``). Scalars arrive as host floats (the loop fetches them one step late by default, so logging
never stalls the device: train.metrics_one_step_late).

The directory may be local or ``gs://`` (ptm_jax/fs.py). An object store cannot append, so on ``gs://`` the
writer keeps the records and rewrites ``metrics.jsonl`` whole (it first reads the records a previous, resumed
run left there): at most every ``REMOTE_FLUSH_SECS`` for train records, at once for eval records, and at
close, and whenever the loop saves a checkpoint (``flush``). TensorBoard event files are written to local
scratch (``fs.scratch_dir()``) and uploaded to ``<dir>/tb/`` whole at each of those flushes (tensorboardX's own
GCS writer re-uploads from its destructor at exit, which hangs once the store is gone). So every record up to
the latest checkpoint is stored with it; a crash loses only records of steps after it, and a resume trains and
logs those steps again.
"""
from __future__ import annotations

import datetime
import hashlib
import io
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import jax

from ptm_jax import fs

REMOTE_FLUSH_SECS = 10.0
LINE_SKIP = ("tokens_per_sec", "examples_per_sec", "learning_rate", "grad_norm", "model_flops_per_sec", "mfu",
             "input_wait_share")
"""Train scalars that ``format_line`` shows in its own way or leaves to metrics.jsonl (so do per-layer grad
norms and the non-finite step counters)."""


_WRITERS_OPENED = 0
"""TensorBoard writers opened by this process (a unique event-file suffix each)."""

def use_progress_bar(requested: bool, stream=None) -> bool:
    """The bar only on a terminal: a file or pipe gets plain lines (tqdm would write carriage-return redraws)."""
    stream = sys.stderr if stream is None else stream
    return bool(requested) and bool(getattr(stream, "isatty", lambda: False)())


def format_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    return str(datetime.timedelta(seconds=int(round(seconds))))


def format_line(step: int, total: int, scalars: dict[str, float], eta_seconds: float) -> str:
    """``step 20/100 | loss 0.6931 | accuracy 0.5 | 0.31 TFLOP/s | MFU 41.2% | input wait 2% | lr 1.00e-04 |
    812.3 examples/s | ETA 0:01:05`` (TFLOP/s and MFU where the family has a FLOPs formula and the device a
    known peak)."""
    parts = [f"step {step}/{total}"]
    for k, v in scalars.items():
        if k in LINE_SKIP or k.startswith(("grad_norm/", "nonfinite")) or not isinstance(v, (int, float)):
            continue
        parts.append(f"{k} {v:.4g}" if k != "loss" else f"loss {v:.4f}")
    if "model_flops_per_sec" in scalars:
        parts.append(f"{scalars['model_flops_per_sec'] / 1e12:.3g} TFLOP/s")
    if "mfu" in scalars:
        parts.append(f"MFU {100 * scalars['mfu']:.1f}%")
    if "input_wait_share" in scalars:
        parts.append(f"input wait {100 * scalars['input_wait_share']:.0f}%")
    if "learning_rate" in scalars:
        parts.append(f"lr {scalars['learning_rate']:.3g}")
    if "examples_per_sec" in scalars:
        parts.append(f"{scalars['examples_per_sec']:.1f} examples/s")
    elif "tokens_per_sec" in scalars:
        parts.append(f"{scalars['tokens_per_sec']:.0f} tokens/s")
    parts.append(f"ETA {format_eta(eta_seconds)}")
    return " | ".join(parts)


def term_value(v: Any) -> float:
    """A (num, den) term -> num/den (nan where den is 0); a plain scalar -> itself. A step's ``loss`` is either:
    an objective whose optimised loss is a sum (word2vec, fastText, GloVe) reports the mean as a ``loss`` term."""
    if isinstance(v, tuple):
        num, den = float(v[0]), float(v[1])
        return num / den if den else float("nan")
    return float(v)


def reduce_terms(metrics: dict[str, Any]) -> dict[str, float]:
    """{'x': (num, den)} -> {'x': num/den}; plain scalars pass through."""
    return {k: term_value(v) for k, v in metrics.items()}


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported without PyTorch: tensorboardX imports torch when it is installed, only
    to accept torch tensors (2.5-8 s of a process start; benchmarks/startup_imports.py), and this writer passes
    floats. A torch that is already imported is left as it is."""
    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError, which tensorboardX catches
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class MetricsWriter:
    def __init__(self, directory: str | Path, total_steps: int, progress_bar: bool = True, initial_step: int = 0):
        self.directory = fs.path(directory)
        self.enabled = jax.process_index() == 0
        self._tb = None
        self._bar = None
        self._jsonl = None
        self._remote = fs.is_remote(self.directory)
        self._lines: list[str] = []
        self._flushed = 0.0
        if not self.enabled:
            return
        fs.makedirs(self.directory)
        jsonl = self.directory / "metrics.jsonl"
        if self._remote:
            if jsonl.exists():
                self._lines = [line + "\n" for line in fs.read_text(jsonl).splitlines() if line]
        else:
            self._jsonl = open(jsonl, "a", encoding="utf-8")
        SummaryWriter = _summary_writer_class()

        self._tb_local = None
        if self._remote:  # event files are written locally and uploaded whole at each flush
            key = hashlib.sha256(str(self.directory).encode()).hexdigest()[:16]
            self._tb_local = fs.scratch_dir() / f"tb-{key}-{os.getpid()}"
        # event files are named by the second they open in: a writer reopened within that second (a resume, a
        # later stage of one process) would overwrite its predecessor's file without a suffix of its own
        global _WRITERS_OPENED
        _WRITERS_OPENED += 1
        self._tb = SummaryWriter(str(self._tb_local) if self._remote else fs.to_str(self.directory / "tb"),
                                 filename_suffix=f".{os.getpid()}.{_WRITERS_OPENED}")
        if use_progress_bar(progress_bar):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=initial_step, dynamic_ncols=True, leave=True)
        self._total = total_steps
        self._last_step = initial_step
        self._t0 = time.time()
        self._first: tuple[int, float] | None = None  # (step, time) of the first train record: the rate after it
        self._prev = (initial_step, self._t0)  # excludes compilation

    def write(self, step: int, split: str, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, "time": round(time.time() - self._t0, 3), **scalars}
        for k, v in scalars.items():
            if isinstance(v, (int, float)) and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, global_step=step)
        if self._remote:
            self._lines.append(json.dumps(record) + "\n")
            if split != "train" or time.time() - self._flushed >= REMOTE_FLUSH_SECS:
                self._flush_remote()
        else:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
            self._tb.flush()
        if self._bar is not None and split == "train":
            self._bar.update(step - self._last_step)
            self._last_step = step
            show = {k: f"{v:.4g}" for k, v in scalars.items() if k in ("loss", "mlm_accuracy", "accuracy",
                                                                        "tokens_per_sec")}
            self._bar.set_postfix(show, refresh=False)
        elif split == "train":
            print(format_line(step, self._total, scalars, self._eta(step)), flush=True)

    def _eta(self, step: int) -> float:
        """Seconds left at the mean step rate since the first train record (before it: the last interval's)."""
        now = time.time()
        (s0, t0) = self._first or self._prev
        if self._first is None:
            self._first = (step, now)
        self._prev = (step, now)
        rate = (step - s0) / max(now - t0, 1e-9)
        return (self._total - step) / rate if rate > 0 else math.inf

    def flush(self) -> None:
        """Makes every record written so far durable (on gs:// the paced upload happens now)."""
        if self.enabled and self._remote:
            self._flush_remote()

    def _flush_remote(self) -> None:
        fs.write_text_atomic(self.directory / "metrics.jsonl", "".join(self._lines))
        self._tb.flush()
        fs.upload_tree(self._tb_local, self.directory / "tb", marker=None)
        self._flushed = time.time()

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
        self._tb.close()
        if self._remote:
            self._flush_remote()
            shutil.rmtree(self._tb_local, ignore_errors=True)
        else:
            self._jsonl.close()
        plot_curves(self.directory / "metrics.jsonl", self.directory / "curves.png")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; a line cut by a crash (the run was killed mid-write) is skipped."""
    rows = []
    for line in fs.read_bytes(path).decode("utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def plot_curves(jsonl: str | Path, out: str | Path) -> Path | None:
    """Loss and accuracy curves (train and eval) saved as a PNG (local or gs://)."""
    if not fs.exists(jsonl):
        return None
    # matplotlib's object API with the Agg canvas, not pyplot: no global figure state to close (safe off the main
    # thread) and no pyplot import or backend switch
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(jsonl)
    keys = [k for k in ("loss", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "accuracy") if any(k in r for r in rows)]
    if not keys:
        return None
    width, height = 4.0 * len(keys), 3.2
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    # fixed margins in inches (room for 7-character tick labels and the titles), not tight_layout: that lays the
    # figure out by drawing it once more before the save draws it
    left, right, gap = 0.75, 0.15, 0.9
    axis_width = (width - left - right - gap * (len(keys) - 1)) / len(keys)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=0.5 / height, top=1 - 0.35 / height,
                        wspace=gap / axis_width)
    axes = fig.subplots(1, len(keys), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for split, style in (("train", "-"), ("eval", "o-")):
            pts = [(r["step"], r[key]) for r in rows if r.get("split") == split and key in r]
            if pts:
                ax.plot(*zip(*pts), style, label=split, markersize=3)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.legend()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    fs.write_bytes_atomic(out, png.getvalue())
    return out
