"""The table updates that word2vec and fastText share (``train/step.py`` ``SparseRows``): the whole sparse SGD
step in the fused CPU kernel (``cpu_kernel.py``) where ``model.kernel`` lets it run, and the XLA path's scatter
of row gradients. An objective mixes this in and names its parameters' top-level key in ``trunk``."""
from __future__ import annotations

from ptm_jax.train.step import add_to_rows


class TableSteps:
    """``fused_rows`` and ``apply_rows`` over ``params['params'][self.trunk]``; the objective gives ``cfg``
    (``model.kernel``, ``model.duplicate_cap``), ``name``, ``block`` and ``loss_terms``."""

    trunk: str

    def fused_rows(self, params, batch, normalizers, step_size):
        """The whole sparse step in the fused CPU kernel where ``model.kernel`` lets it run, else None (the XLA
        path: ``row_gradients`` + ``apply_rows``, the same step)."""
        from ptm_jax.families.word2vec import cpu_kernel

        sequential = getattr(self.cfg.model, "updates", "batch") == "sequential"
        if not cpu_kernel.applies("cpu" if sequential else self.cfg.model.kernel, "model.updates='sequential'"
                                  if sequential else ""):
            return None
        tables = params["params"][self.trunk]
        new, loss, sumsq, finite = cpu_kernel.fused_step(self.name, dict(tables), batch, step_size, block=self.block,
                                                         cap=float(self.cfg.model.duplicate_cap),
                                                         sequential=sequential)
        _, terms = self.loss_terms(loss, batch, normalizers)
        return {**params, "params": {**params["params"], self.trunk: {**tables, **new}}}, loss, terms, sumsq, finite

    def apply_rows(self, params, rows, step_size):
        """``params`` with ``-step_size x grads`` added to the rows of each table (duplicates add up)."""
        tables = add_to_rows(dict(params["params"][self.trunk]), rows, step_size)
        return {**params, "params": {**params["params"], self.trunk: tables}}
