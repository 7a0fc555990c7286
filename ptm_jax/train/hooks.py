"""The side work of the training loop, as hooks: non-finite streak check, loss-spike rollback, metrics and log
lines, periodic evaluation, checkpointing with the preemption stop, a profiler trace of chosen steps.

``loop.fit`` runs one jitted call at a time (one step, or ``train.steps_per_call`` of them) and hands it to its
hooks, in order; each hook is one concern and keeps its own state. The design follows levanter's
``trainer.add_hook(fn, every=N)``: the loop stays short; side work is hooks. The protocol (every
method optional, the base class does nothing):

- ``after_step(run, metrics)``: after each call, in hook order; ``metrics`` are its (last) step's device values.
  A hook that moves the run back (``SpikeRollback``) returns ``ROLLED_BACK``: the later hooks skip that step and
  every hook's ``on_rollback(run)`` drops what it holds about steps after ``run.step``.
- ``on_eval(run, metrics)``: after each periodic evaluation, with its host metrics (finetuning keeps its best
  parameters here).
- ``before_save(run)``: before a checkpoint is written: store whatever must be stored with it.
- ``on_stop(run)``: once after the last step of this call (the end, ``stop_after`` or SIGTERM), in reverse hook
  order (the hook that saw a step last finishes first); not after an exception.

Hooks share ``Run``: the state, the step, the checkpointer, the writer and the counters a checkpoint stores.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.config import TrainConfig
from ptm_jax.errors import ConfigError, NumericalError
from ptm_jax.parallel.feed import host_value
from ptm_jax.train.metrics import MetricsWriter, reduce_terms, term_value

ROLLED_BACK = "rolled back"
"""What ``after_step`` returns when it moved ``run.state`` and ``run.step`` back to a checkpoint."""


@dataclasses.dataclass
class Run:
    """The loop's shared, mutable state during one ``fit`` call."""

    tcfg: TrainConfig
    stage_dir: Path
    state: Any
    step: int
    start: int
    """The step this call started at (0, or the restored checkpoint's)."""
    ckpt: Checkpointer
    writer: MetricsWriter
    abstract_state: Any
    """Shapes and shardings to restore a checkpoint into."""
    checkpoint_info: dict[str, Any]
    """Stored with every checkpoint besides step, cursor and rollbacks (objective name, config, ...)."""
    skipped: int = 0
    """Examples the data stream skipped (loss-spike rollbacks; the unused batches of a shorter last call of
    ``train.steps_per_call``): the cursor is step * batch + skipped."""
    rollbacks: int = 0
    hooks: list["Hook"] = dataclasses.field(default_factory=list)
    last_train: dict[str, float] = dataclasses.field(default_factory=dict)
    last_eval: dict[str, float] = dataclasses.field(default_factory=dict)
    stop: str | None = None
    """Why this call stops before ``train.steps``: "SIGTERM" or "stop_after"."""
    advanced: int = 1
    """Steps the last call ran (``train.steps_per_call``; 1 a call by default)."""
    input_wait_s: float = 0.0
    """Seconds the loop has spent blocked on the feed for its next batch (``MetricsLog``'s input-wait share)."""

    def reached(self, every: int) -> bool:
        """Whether the last call reached a multiple of ``every`` (> 0): with one step a call, ``step % every == 0``;
        with several, at the end of the call that passed it."""
        return every > 0 and self.step // every > (self.step - self.advanced) // every

    @property
    def preempted(self) -> bool:
        return self.stop == "SIGTERM"

    def save(self) -> None:
        """A checkpoint of the current step, after every hook's ``before_save``."""
        for hook in self.hooks:
            hook.before_save(self)
        self.writer.flush()
        info = {"step": self.step, "cursor": self.step * self.tcfg.batch_size + self.skipped,
                "rollbacks": self.rollbacks, **self.checkpoint_info}
        self.ckpt.save(self.step, self.state, info)


class Hook:
    """Does nothing at every point of the protocol (module docstring); a hook overrides what it needs."""

    def after_step(self, run: Run, metrics: dict[str, Any]) -> str | None:
        return None

    def on_rollback(self, run: Run) -> None:
        pass

    def on_eval(self, run: Run, metrics: dict[str, float]) -> None:
        pass

    def before_save(self, run: Run) -> None:
        pass

    def on_stop(self, run: Run) -> None:
        pass


class NonFiniteStreak(Hook):
    """Stops with a NumericalError after ``train.max_nonfinite_steps`` steps in a row whose update the jitted step
    skipped (non-finite loss or gradient; train/step.py counts them in the state). With
    ``train.metrics_one_step_late`` it reads the previous step's counter while this step runs (no stall);
    otherwise this step's, and the host waits for the step."""

    def __init__(self, tcfg: TrainConfig):
        self.limit = tcfg.max_nonfinite_steps
        self.late = int(tcfg.metrics_one_step_late)
        self.previous = None  # the last step's counter (device value)

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        self._check(run, self.previous if self.late else metrics["nonfinite_streak"], run.step - self.late)
        self.previous = metrics["nonfinite_streak"]

    def on_rollback(self, run: Run) -> None:
        self.previous = None

    def on_stop(self, run: Run) -> None:
        if self.late and not run.preempted:
            self._check(run, self.previous, run.step)  # the last step's counter

    def _check(self, run: Run, counter: Any, counted_step: int) -> None:
        if counter is None or self.limit <= 0:
            return
        streak = int(host_value(counter))
        if streak >= self.limit:
            raise NumericalError(
                f"{run.stage_dir}: {streak} consecutive steps up to step {counted_step} had a non-finite loss "
                f"or gradient (their updates were skipped). The last good checkpoint is step "
                f"{run.ckpt.latest_step()} in {run.ckpt.directory}. Lower train.learning_rate, check the data, "
                "or raise train.max_nonfinite_steps.")


class SpikeGuard:
    """Loss-spike detection for rollback (Chowdhery et al. 2022, PaLM Sec. 5.1): a loss above
    ``spike_factor`` x the median of the previous ``spike_window`` losses. Reading the loss costs one
    device-to-host transfer per step, so it runs only when ``train.spike_factor > 0``."""

    def __init__(self, tcfg: TrainConfig):
        self.enabled = tcfg.spike_factor > 0
        self.factor, self.window = tcfg.spike_factor, tcfg.spike_window
        self.history: list[float] = []
        self.last = self.median = float("nan")

    def is_spike(self, loss: Any) -> bool:
        self.last = term_value(host_value(loss))   # a (num, den) term or a scalar
        if len(self.history) >= self.window:
            self.median = float(np.median(self.history[-self.window:]))
            if np.isfinite(self.last) and self.last > self.factor * self.median:
                return True  # non-finite losses are the update-skipping guard's business (step.py)
        if np.isfinite(self.last):
            self.history.append(self.last)
        return False


class SpikeRollback(Hook):
    """On a loss spike (``SpikeGuard``): restore the latest checkpoint and go on with the data stream, so the
    batches since that checkpoint are skipped; at most ``train.max_rollbacks`` times (docs/reliability.md). The
    loss history before the spike stays."""

    def __init__(self, tcfg: TrainConfig):
        self.tcfg = tcfg
        self.guard = SpikeGuard(tcfg)

    def after_step(self, run: Run, metrics: dict[str, Any]) -> str | None:
        if not self.guard.enabled or not self.guard.is_spike(metrics["loss"]):
            return None
        g, tcfg, step = self.guard, self.tcfg, run.step
        back = run.ckpt.latest_step()
        if back is None or run.rollbacks >= tcfg.max_rollbacks:
            raise NumericalError(
                f"{run.stage_dir}: loss spike at step {step} ({g.last:.4g} > {tcfg.spike_factor} x median "
                f"{g.median:.4g}) and " + ("no checkpoint to roll back to" if back is None
                                           else f"{run.rollbacks} rollbacks already (train.max_rollbacks="
                                                f"{tcfg.max_rollbacks})"))
        run.ckpt.wait()
        run.state, _ = run.ckpt.restore(run.abstract_state, back)
        run.skipped += (step - back) * tcfg.batch_size  # the data stream goes on: those batches are skipped
        run.rollbacks += 1
        run.writer.log(f"loss spike at step {step}: {g.last:.4g} > {tcfg.spike_factor} x median {g.median:.4g}; "
                       f"rolled back to step {back}, skipping {step - back} batches "
                       f"(rollback {run.rollbacks} of at most {tcfg.max_rollbacks})")
        run.writer.write(step, "rollback", {"to_step": back, "skipped_batches": step - back, "loss": g.last})
        run.step = back
        return ROLLED_BACK


class MetricsLog(Hook):
    """Train records every ``train.log_every`` steps and at the last step: the objective's reduced terms plus,
    over the interval since the previous record, tokens/s, examples/s, ``input_wait_share`` (seconds blocked on
    the feed / wall seconds) and, where the family has a FLOPs formula (``flops_per_step``), model FLOP/s and
    ``mfu`` against ``peak_flops`` (all devices; None: no ``mfu``, as on CPU). With
    ``train.metrics_one_step_late`` a record's device values are fetched after the next step was dispatched, so
    logging never stalls the device: the timings are host clocks only. Pending values are stored before a
    checkpoint, so a resume loses no record."""

    def __init__(self, tcfg: TrainConfig, tokens_per_step: int, start: int, flops_per_step: float | None = None,
                 peak_flops: float | None = None):
        self.tcfg = tcfg
        self.late = bool(tcfg.metrics_one_step_late)
        self.tokens_per_step = tokens_per_step
        self.flops_per_step, self.peak_flops = flops_per_step, peak_flops
        self.pending: tuple[int, Any] | None = None
        self.t_last, self.step_last = time.perf_counter(), start  # the first record's rate includes compilation
        self.wait_last = 0.0

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        self._flush(run)  # the previous logged step's metrics: fetched one step late
        if run.reached(self.tcfg.log_every) or run.step == self.tcfg.steps:
            self.pending = (run.step, metrics)
            if not self.late:
                self._flush(run)

    def on_rollback(self, run: Run) -> None:
        self.pending = None

    def before_save(self, run: Run) -> None:
        self._flush(run)

    def on_stop(self, run: Run) -> None:
        self._flush(run)

    def _flush(self, run: Run) -> None:
        if self.pending is None:
            return
        (step, metrics), self.pending = self.pending, None
        scalars = reduce_terms(host_value(metrics))
        now = time.perf_counter()
        elapsed = max(now - self.t_last, 1e-9)
        steps = step - self.step_last
        scalars["tokens_per_sec"] = self.tokens_per_step * steps / elapsed
        scalars["examples_per_sec"] = self.tcfg.batch_size * steps / elapsed
        scalars["input_wait_share"] = min(max((run.input_wait_s - self.wait_last) / elapsed, 0.0), 1.0)
        if self.flops_per_step is not None:
            scalars["model_flops_per_sec"] = self.flops_per_step * steps / elapsed
            if self.peak_flops:
                scalars["mfu"] = scalars["model_flops_per_sec"] / self.peak_flops
        self.t_last, self.step_last, self.wait_last = now, step, run.input_wait_s
        run.last_train = scalars
        run.writer.write(step, "train", scalars)


def parse_profile_steps(text: str) -> tuple[int, int] | None:
    """``train.profile_steps`` 'START:COUNT' -> (START, COUNT); '' -> None; anything else a ConfigError."""
    if not text.strip():
        return None
    start, sep, count = text.strip().partition(":")
    try:
        first, n = int(start), int(count)
    except ValueError:
        first = n = 0
    if not sep or first < 1 or n < 1:
        raise ConfigError(f"train.profile_steps={text!r}: expected 'START:COUNT' with START >= 1 and COUNT >= 1, "
                          "e.g. '10:5' (a trace of steps 10 to 14; START 1 includes compilation)")
    return first, n


class Profile(Hook):
    """``train.profile_steps`` 'START:COUNT': a ``jax.profiler`` trace of the calls that run steps START ..
    START + COUNT - 1, written to ``<stage dir>/profile`` (``plugins/profile/<run>/<host>.xplane.pb``, what XProf
    and TensorBoard's profile plugin open: ``tensorboard --logdir <stage dir>/profile``). The trace starts after
    the call that reached step START - 1 (at once for START 1 or a resumed run past it) and stops after the call
    that reaches the last step, once the device has finished it (the one host sync of this hook)."""

    def __init__(self, tcfg: TrainConfig, stage_dir: Path, start: int):
        self.window = parse_profile_steps(tcfg.profile_steps)
        self.directory = stage_dir / "profile"
        self.active = False
        self.done = self.window is None
        if not self.done and start >= self.window[0] + self.window[1] - 1:
            self.done = True  # a resumed run already past the window
        elif not self.done and start >= self.window[0] - 1:
            self._start()

    def _start(self) -> None:
        import jax

        from ptm_jax import fs

        fs.makedirs(self.directory)
        jax.profiler.start_trace(fs.to_str(self.directory))
        self.active = True

    def _stop(self, run: Run) -> None:
        import jax

        jax.block_until_ready(run.state)
        jax.profiler.stop_trace()
        self.active, self.done = False, True
        run.writer.log(f"profile of steps {self.window[0]}..{run.step} written to {self.directory}")

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        if self.done:
            return
        first, n = self.window
        if self.active and run.step >= first + n - 1:
            self._stop(run)
        elif not self.active and first - 1 <= run.step < first + n - 1:
            self._start()

    def on_stop(self, run: Run) -> None:
        if self.active:
            self._stop(run)


class Evaluation(Hook):
    """Every ``train.eval_every`` steps and at the last step: ``evaluate(params)`` (held-out loss terms and
    task metrics), an eval record and a log line, then every hook's ``on_eval``."""

    def __init__(self, tcfg: TrainConfig, evaluate: Callable[[Any], dict[str, float]]):
        self.every, self.steps = tcfg.eval_every, tcfg.steps
        self.evaluate = evaluate

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        if self.every <= 0 or not (run.reached(self.every) or run.step == self.steps):
            return
        run.last_eval = self.evaluate(run.state.params)
        run.writer.write(run.step, "eval", run.last_eval)
        run.writer.log(f"step {run.step}: eval " + ", ".join(f"{k}={v:.4f}" for k, v in run.last_eval.items()))
        for hook in run.hooks:
            hook.on_eval(run, run.last_eval)


class Checkpointing(Hook):
    """A checkpoint every ``train.checkpoint_every`` steps, at the last step, and when this call stops early:
    on SIGTERM (``preemption.requested(step)``, asked at every step: with several processes it is a sync point
    all of them must reach) or after ``stop_after`` steps of this call. Stopping early ends the loop with a
    log line; the caller exits 0 and the same command resumes."""

    def __init__(self, tcfg: TrainConfig, preemption: Any, stop_after: int | None):
        self.every, self.steps = tcfg.checkpoint_every, tcfg.steps
        self.preemption = preemption
        self.stop_after = stop_after

    def after_step(self, run: Run, metrics: dict[str, Any]) -> None:
        sigterm = self.preemption.requested(run.step)
        stop_now = sigterm or (self.stop_after is not None and run.step - run.start >= self.stop_after)
        if run.reached(self.every) or run.step == self.steps or stop_now:
            run.save()
        if stop_now:
            run.stop = "SIGTERM" if sigterm else "stop_after"
            run.writer.log(f"stopping at step {run.step} ({run.stop}); checkpoint saved, resume by running the "
                           "same command")
