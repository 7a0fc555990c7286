"""The NNLM objective (Bengio et al. 2003, Sec. 2): maximise the mean log-likelihood of every word given its
n-1 predecessors, L = (1/T) sum_t log P(w_t | w_{t-1}, ..., w_{t-n+1}).

It implements ``objectives/base.py`` (the loop's protocol) on the rows of ``families/nnlm/data.py``: the loss
is the mean token cross-entropy over the global batch, (sum of weighted CE) / (sum of weights), so microbatches
add up exactly; the report adds perplexity = exp(lm_loss) and a unigram baseline (``objectives/causal_lm.py``).
The paper's weight decay on the weights but not the biases is the family's parameter groups
(``families/nnlm/hooks.py``); its SGD is ``train.optimizer='sgd'``.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ptm_jax.data.pretraining.source import DocumentSource
from ptm_jax.families.nnlm.model import NnlmLanguageModel
from ptm_jax.objectives.base import RowStreams
from ptm_jax.objectives.language_model import LanguageModelReport, lm_terms


class NnlmObjective(RowStreams, LanguageModelReport):
    """``cfg``: a run config whose ``model`` is an ``NnlmConfig``; ``data.max_seq_length`` is L (predictions
    per row), ``data.seed`` keys the document order of each pass."""

    primary_metric = "lm_loss"

    def __init__(self, cfg: Any, train_source: DocumentSource, eval_source: DocumentSource | None,
                 eos_id: int, pad_id: int, initial_vectors: tuple[np.ndarray, np.ndarray] | None = None):
        cfg.model.validate()
        self.cfg = cfg
        self.name = "nnlm"
        self.model = NnlmLanguageModel(cfg.model)
        self.train_source, self.eval_source = train_source, eval_source
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)
        self.initial_vectors = initial_vectors
        """(matrix [V, m], found [V]): rows of C taken from ``model.init_vectors``."""

    @property
    def length(self) -> int:
        return int(self.cfg.data.max_seq_length)

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        L, c = self.length, self.cfg.model.context
        return {"target_weights": np.zeros((batch_size, L), np.float32),  # first: the loop counts its positions
                "window_ids": np.zeros((batch_size, L + c), np.int32)}

    def init(self, rng: jax.Array, batch: dict[str, Any]) -> Any:
        params = self.model.init(rng, jnp.asarray(batch["window_ids"][:1]))
        if self.initial_vectors is not None:
            from ptm_jax.export.vector_files import with_initial_rows

            params = with_initial_rows(params, ("nnlm", "embedding"), *self.initial_vectors)
        return params

    def normalizers(self, batch: dict[str, Any]) -> dict[str, jax.Array]:
        return {"lm": jnp.sum(batch["target_weights"].astype(jnp.float32))}

    def loss(self, params, batch, rng, normalizers, train: bool):
        scores = self.model.apply(params, batch["window_ids"])
        targets = batch["window_ids"][:, self.cfg.model.context:]
        terms = lm_terms(scores, targets, batch["target_weights"])
        return terms["lm_loss"][0] / jnp.maximum(normalizers["lm"], 1.0), terms

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        from ptm_jax.families.nnlm.data import nnlm_dataset

        return nnlm_dataset(source, self.eos_id, self.pad_id, self.length, self.cfg.model.context,
                            seed=self.cfg.data.seed, start_index=start, global_batch=global_batch,
                            process_index=pi, process_count=pc, repeat=repeat, shuffle=repeat, rows=rows,
                            grouped=True)
