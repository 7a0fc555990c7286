"""The table updates that word2vec and fastText share (``train/step.py`` ``SparseRows``): the whole sparse SGD
step in the fused CPU kernel (``cpu_kernel.py``) where ``model.kernel`` lets it run, and the XLA path's scatter
of row gradients. An objective mixes this in and names its parameters' top-level key in ``trunk``."""
from __future__ import annotations

from ptm_jax.errors import ConfigError
from ptm_jax.train.step import add_to_rows


def sparse_rows(cfg) -> bool:
    """Whether the tables train by the sparse SGD step (``train/step.py`` ``SparseRows``): ``model.sparse_update``
    and plain SGD (no weight decay, clipping, parameter groups or accumulation). ``model.updates='sequential'``
    lives in that step's kernel, so it is a ConfigError anywhere else."""
    t = cfg.train
    sparse = bool(cfg.model.sparse_update and t.optimizer == "sgd" and not t.weight_decay and not t.clip_norm
                  and not t.param_groups and t.grad_accum_steps == 1)
    if cfg.model.updates == "sequential" and not sparse:
        raise ConfigError("model.updates='sequential' runs in the sparse SGD step's kernel, which needs "
                          "model.sparse_update=true and train.optimizer='sgd' with no weight_decay, clip_norm, "
                          "param_groups or grad_accum_steps; change those, or set model.updates='batch'")
    return sparse


class TableSteps:
    """``fused_rows`` and ``apply_rows`` over ``params['params'][self.trunk]``; the objective gives ``cfg``
    (``model.kernel``, ``model.duplicate_cap``), ``name``, ``block`` and ``loss_terms``."""

    trunk: str
    kernel_mode: str | None = None
    """The fused kernel's objective (``cpu_kernel.MODES``); None: the objective's own name (node2vec trains
    skip-gram's)."""

    def fused_rows(self, params, batch, normalizers, step_size):
        """The whole sparse step in the fused CPU kernel where ``model.kernel`` lets it run, else None (the XLA
        path: ``row_gradients`` + ``apply_rows``, the same step)."""
        from ptm_jax.families.word2vec import cpu_kernel

        sequential = self.cfg.model.updates == "sequential"
        needs = (("cpu", "model.updates='sequential'", "set model.updates='batch' for the portable step")
                 if sequential else (self.cfg.model.kernel,))
        if not cpu_kernel.applies(*needs):
            return None
        tables = params["params"][self.trunk]
        new, loss, sumsq, finite = cpu_kernel.fused_step(self.kernel_mode or self.name, dict(tables), batch, step_size,
                                                         block=self.block,
                                                         cap=float(self.cfg.model.duplicate_cap),
                                                         sequential=sequential,
                                                         parts=self.cfg.model.sequential_parts,
                                                         subwords=self.kernel_subwords() if sequential else 0)
        _, terms = self.loss_terms(loss, batch, normalizers)
        return {**params, "params": {**params["params"], self.trunk: {**tables, **new}}}, loss, terms, sumsq, finite

    def kernel_subwords(self) -> int:
        """The key of the subword table the kernel's sequential updates read units from (fastText's;
        ``cpu_kernel.register_subwords``), or 0: none."""
        return 0

    def apply_rows(self, params, rows, step_size):
        """``params`` with ``-step_size x grads`` added to the rows of each table (duplicates add up)."""
        tables = add_to_rows(dict(params["params"][self.trunk]), rows, step_size)
        return {**params, "params": {**params["params"], self.trunk: tables}}
