"""Pure step functions: ``train_step(state, batch, rng) -> (state, metrics)`` and ``eval_step(params, batch)``.

They know nothing about meshes, files or logging; the loop jits them with shardings and donation.
Gradient accumulation scans over microbatches: microbatch i takes rows ``i::accum`` of the global batch, so
each device keeps its own rows (no communication) and the loss equals the whole-batch loss exactly.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from ptm_jax.errors import ConfigError
from ptm_jax.objectives.base import Objective, SetsStatistics, check_grad_accum
from ptm_jax.train.state import TrainState


def _microbatches(batch: dict[str, jax.Array], accum: int) -> dict[str, jax.Array]:
    def split(x):
        b = x.shape[0]
        x = x.reshape((b // accum, accum) + x.shape[1:]).swapaxes(0, 1)
        # keep every device on its own rows: [accum, micro(batch-sharded), ...]
        return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))

    return jax.tree.map(split, batch)


def layer_group(path: tuple[Any, ...]) -> str:
    """'params/<trunk>/<stack>/layers_3/...' -> 'layers_3'; '.../embeddings/...' -> 'embeddings'; heads by
    name. The trunk and stack keys are those of the registered families (``ParamLayout.trunk``, ``ParamLayout.stack``);
    a family with its own grouping gives ``ParamLayout.layer_of``."""
    from ptm_jax.families import registry

    keys = [str(getattr(k, "key", k)) for k in path if str(getattr(k, "key", k)) != "params"]
    fams = registry.families().values()
    for fam in fams:
        if fam.layout.layer_of is not None and keys and keys[0] == fam.layout.trunk:
            return fam.layout.layer_of(keys)
    for stack in {f.layout.stack for f in fams if f.layout.stack}:
        if stack in keys and keys.index(stack) + 1 < len(keys):
            return keys[keys.index(stack) + 1]
    if len(keys) > 1 and keys[0] in {f.layout.trunk for f in fams}:
        return keys[1]
    return keys[0]


def group_norms(grads: Any) -> dict[str, jax.Array]:
    """Per-layer-group gradient norms, to see vanishing or exploding gradients by depth."""
    sums: dict[str, jax.Array] = {}
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        name = f"grad_norm/{layer_group(path)}"
        sums[name] = sums.get(name, 0.0) + jnp.sum(jnp.square(g.astype(jnp.float32)))
    return {k: jnp.sqrt(v) for k, v in sums.items()}


def make_train_step(objective: Objective, tx: optax.GradientTransformation, schedule: Callable,
                    grad_accum_steps: int = 1) -> Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]:
    """A non-finite loss or gradient skips the update (params and optimizer state unchanged) and is counted
    in ``state.nonfinite_streak`` / ``state.nonfinite_total``; the loop stops after too many in a row.

    When ``state.carry`` is not None the objective's ``loss_carrying`` consumes it and returns the next one
    (``objectives.base.CarriesState``); no gradient flows through it. An objective with statistics
    (``objectives.base.SetsStatistics``: BatchNorm's running mean and variance) returns their new values beside the
    loss, and they are written into the parameters after the update."""
    if isinstance(objective, SparseRows) and objective.sparse_rows:
        return sparse_sgd_step(objective, schedule, grad_accum_steps)
    statistics = isinstance(objective, SetsStatistics)
    if statistics and grad_accum_steps != 1:
        raise ConfigError(f"train.grad_accum_steps={grad_accum_steps}: this objective's model keeps batch "
                          "statistics (BatchNorm), which need whole batches; set train.grad_accum_steps=1")

    def statistics_loss(params, batch, rng, norms):
        loss, terms, stats = objective.loss_and_statistics(params, batch, rng, norms, train=True)
        return loss, (terms, jax.lax.stop_gradient(stats))

    def grads_of(params, batch, rng, norms):
        def loss_fn(p):
            return objective.loss(p, batch, rng, norms, train=True)

        return jax.value_and_grad(loss_fn, has_aux=True)(params)

    def carrying_loss(params, batch, carry, rng, norms):
        loss, terms, new_carry = objective.loss_carrying(params, batch, carry, rng, norms, train=True)
        return loss, (terms, jax.lax.stop_gradient(new_carry))  # no gradient flows into the next step

    def train_step(state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict[str, Any]]:
        rng = jax.random.fold_in(rng, state.step)
        norms = objective.normalizers(batch)
        new_carry = stats = None
        if state.carry is not None and statistics:
            raise ConfigError("an objective cannot both carry state across steps and keep batch statistics")
        if statistics:
            (loss, (terms, stats)), grads = jax.value_and_grad(statistics_loss, has_aux=True)(
                state.params, batch, rng, norms)
        elif state.carry is not None:
            check_grad_accum(objective, grad_accum_steps, carries=True)
            (loss, (terms, new_carry)), grads = jax.value_and_grad(carrying_loss, has_aux=True)(
                state.params, batch, state.carry, rng, norms)
        elif grad_accum_steps == 1:
            (loss, terms), grads = grads_of(state.params, batch, rng, norms)
        else:
            micro = _microbatches(batch, grad_accum_steps)

            def body(carry, xs):
                mb, i = xs
                (l, t), g = grads_of(state.params, mb, jax.random.fold_in(rng, i), norms)
                return jax.tree.map(jnp.add, carry, (l, t, g)), None

            first = jax.tree.map(lambda x: x[0], micro)
            zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(lambda: grads_of(state.params, first, rng, norms)))
            (loss, terms), grads = _unpack(jax.lax.scan(body, _pack(zeros), (micro, jnp.arange(grad_accum_steps)))[0])
        grad_norm = optax.global_norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        updates, new_opt_state = tx.update(grads, state.opt_state, state.params)
        new_params = optax.apply_updates(state.params, updates)
        new_params = new_params if stats is None else set_leaves(new_params, stats)
        # a select, not a branch: the update fuses with it, while a conditional makes the TPU compiler copy the
        # state between layouts on every step (BERT-large's estimated v5e step: 12.6 of 148 ms; docs/benchmarks.md,
        # "TPU step time from the compiler's cost model")
        params, opt_state = jax.tree.map(lambda n, o: jnp.where(finite, n, o), (new_params, new_opt_state),
                                         (state.params, state.opt_state))
        if new_carry is not None:  # a skipped step keeps the memory it started from
            new_carry = jax.tree.map(lambda n, o: jnp.where(finite, n, o), new_carry, state.carry)
        streak = jnp.where(finite, 0, state.nonfinite_streak + 1)
        metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": schedule(state.step),
                   "nonfinite_streak": streak, "nonfinite_total": state.nonfinite_total + (~finite),
                   **group_norms(grads), **terms}
        new = state.replace(step=state.step + 1, params=params, opt_state=opt_state, nonfinite_streak=streak,
                            nonfinite_total=state.nonfinite_total + (~finite).astype(jnp.int32), carry=new_carry)
        return new, metrics

    return train_step


def set_leaves(tree: Any, values: Any) -> Any:
    """``tree`` with the leaves ``values`` holds (a tree of the same nesting with only those leaves) replaced,
    in the dtype of the leaf they replace."""
    if isinstance(values, dict) or hasattr(values, "items"):
        out = dict(tree)
        for k, v in values.items():
            if k not in out:
                raise KeyError(f"statistic {k!r} is not a parameter (parameters here: {', '.join(map(str, out))})")
            out[k] = set_leaves(out[k], v)
        return out
    return jnp.asarray(values, jnp.result_type(tree))


@runtime_checkable
class SparseRows(Protocol):
    """Optional: an objective whose parameters are lookup tables read a few rows a batch (word2vec), trained by
    plain SGD on those rows only when ``sparse_rows`` is True (the objective checks that the optimizer is plain
    SGD: no weight decay, clipping, parameter groups or accumulation)."""

    sparse_rows: bool

    def row_gradients(self, params: Any, batch: dict, rng: jax.Array, normalizers: dict[str, jax.Array]
                      ) -> tuple[jax.Array, dict, dict[str, tuple[jax.Array, jax.Array]]]:
        """(loss, terms, {table: (row ids [N], gradient rows [N, d])})."""

    def apply_rows(self, params: Any, rows: dict[str, tuple[jax.Array, jax.Array]], step_size: jax.Array) -> Any:
        """``params`` with ``-step_size x`` each gradient row added at its id (duplicates add up)."""



@runtime_checkable
class FusesRows(Protocol):
    """Optional, for a ``SparseRows`` objective: the whole step in one fused kernel (word2vec's ``cpu_kernel.py``)
    that applies the update only when the loss and the norms are finite."""

    def fused_rows(self, params: Any, batch: dict, normalizers: dict[str, jax.Array], step_size: jax.Array
                   ) -> tuple[Any, jax.Array, dict, dict[str, jax.Array], jax.Array] | None:
        """None (use ``row_gradients``/``apply_rows``) or (params, loss, terms, {table: squared norm of its
        gradient rows}, finite)."""


def capped_row_gradients(ids: dict[str, jax.Array], grads: dict[str, jax.Array], tables: dict[str, jax.Array],
                         cap: float, updates: dict[str, jax.Array] | None = None
                         ) -> dict[str, tuple[jax.Array, jax.Array]]:
    """``SparseRows.row_gradients``' rows: {table: (flat row ids [N], gradient rows [N, d])} from the gradients
    of the gathered rows. ``cap`` > 0 scales the rows of an id taking part in n > cap updates of the batch by
    cap / n, so that a frequent word's summed update stays bounded (word2vec's ``duplicate_cap``); n sums the
    ``updates`` of its reads (same shape as the ids: the updates each read sums, 0 for a read that trains
    nothing), one a read when ``updates`` is None."""
    out = {}
    for k, i in ids.items():
        flat = i.reshape(-1)
        g = grads[k].reshape(flat.shape[0], -1)
        if cap:
            ones = (jnp.ones(flat.shape, g.dtype) if updates is None or k not in updates
                    else updates[k].reshape(-1).astype(g.dtype))
            n = jax.ops.segment_sum(ones, flat, num_segments=tables[k].shape[0])
            g = g * jnp.minimum(1.0, cap / jnp.maximum(n[flat], 1.0))[:, None]
        out[k] = (flat, g)
    return out


def add_to_rows(tables: dict[str, jax.Array], rows: dict[str, tuple[jax.Array, jax.Array]], step_size: jax.Array
                ) -> dict[str, jax.Array]:
    """``SparseRows.apply_rows``' update: ``-step_size x`` each gradient row added at its id (duplicates add up).
    The ids and rows are replicated and the update is laid out on 'embed', so that a table sharded over the
    vocabulary is updated in place (without the constraints XLA copied every shard: 1.7 GiB of temporaries per
    device for a 3M x 300 table on (2,2,2), 0.064 GiB with them)."""
    out = dict(tables)
    for k, (flat, g) in rows.items():
        flat = nn.with_logical_constraint(flat, (None,))
        g = nn.with_logical_constraint(-step_size * g, (None, "embed"))
        out[k] = out[k].at[flat].add(g, mode="promise_in_bounds")
    return out


def sparse_sgd_step(objective: SparseRows, schedule: Callable, grad_accum_steps: int = 1
                    ) -> Callable[[TrainState, dict, jax.Array], tuple[TrainState, dict]]:
    """SGD on the rows a batch touches: a scatter-add into the (donated) tables instead of a dense [V, d]
    gradient and an optimizer pass over every row (word2vec.c updates only the rows of its pairs). An objective
    whose ``fused_rows`` answers (a fused kernel where one applies) does the whole step in it. The rate is
    ``schedule(state.step)``; ``opt_state`` stays as initialised. A non-finite loss or gradient adds zeros
    (params unchanged) and is counted as in the dense step. ``grad_norm`` is the norm of the gradient rows
    (a row read n times counted n times); ``grad_norm/<table>`` per table."""
    if grad_accum_steps != 1:
        from ptm_jax.errors import ConfigError

        raise ConfigError(f"train.grad_accum_steps={grad_accum_steps}: the sparse row updates of objective "
                          f"{objective.name!r} apply one batch at a time; set train.grad_accum_steps=1")

    def train_step(state: TrainState, batch: dict, rng: jax.Array) -> tuple[TrainState, dict[str, Any]]:
        rng = jax.random.fold_in(rng, state.step)
        lr = schedule(state.step)
        normalizers = objective.normalizers(batch)
        fused = objective.fused_rows if isinstance(objective, FusesRows) else None
        done = fused(state.params, batch, normalizers, lr) if fused is not None else None
        if done is not None:                   # one kernel: the same step, the skip decided inside it
            params, loss, terms, sumsq, finite = done
            norms = {f"grad_norm/{k}": jnp.sqrt(v) for k, v in sumsq.items()}
            grad_norm = jnp.sqrt(sum(sumsq.values()))
        else:
            loss, terms, rows = objective.row_gradients(state.params, batch, rng, normalizers)
            norms = {f"grad_norm/{k}": jnp.sqrt(jnp.sum(jnp.square(g))) for k, (_, g) in rows.items()}
            grad_norm = jnp.sqrt(sum(jnp.square(v) for v in norms.values()))
            finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
            rows = {k: (i, jnp.where(finite, g, 0.0)) for k, (i, g) in rows.items()}   # a skip adds zeros
            params = objective.apply_rows(state.params, rows, lr)
        streak = jnp.where(finite, 0, state.nonfinite_streak + 1)
        total = state.nonfinite_total + (~finite).astype(jnp.int32)
        metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": lr, "nonfinite_streak": streak,
                   "nonfinite_total": total, **norms, **terms}
        return state.replace(step=state.step + 1, params=params, nonfinite_streak=streak,
                             nonfinite_total=total), metrics

    return train_step


def _pack(zeros):
    (loss, terms), grads = zeros
    return loss, terms, grads


def _unpack(carry):
    loss, terms, grads = carry
    return (loss, terms), grads


def make_eval_step(objective: Objective) -> Callable[[Any, dict], dict]:
    def eval_step(params: Any, batch: dict) -> dict[str, Any]:
        loss, terms = objective.loss(params, batch, None, objective.normalizers(batch), train=False)
        return terms

    return eval_step
