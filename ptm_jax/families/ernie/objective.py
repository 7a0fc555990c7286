"""ERNIE 1.0 pretraining objectives (Sun et al. 2019 Sec. 3.2): BERT's masked LM (``ernie_mlm``) or MLM + NSP
(``ernie_mlm_nsp``), the loss and metrics of ``families/bert/mlm_nsp.py``, over knowledge-masked examples
(``data.py``) and the "ernie"-keyed network (``model.py``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.families.bert.mlm_nsp import MlmNspObjective
from ptm_jax.families.ernie.model import ErnieForPreTraining


class ErnieObjective(MlmNspObjective):
    def __init__(self, cfg: Any, corpus: Any):
        super().__init__(cfg, corpus.train, corpus.eval, corpus.special,
                         plan=getattr(corpus, "artifacts", {}).get("pairing_plan"))
        from ptm_jax.data.pretraining.source import SubsetSource

        self.with_nsp = cfg.objective == "ernie_mlm_nsp"
        self.model = ErnieForPreTraining(cfg.model, with_nsp=self.with_nsp)
        units = getattr(corpus, "artifacts", {}).get("units")
        if units is None:   # a corpus built without prepare_corpus (an in-memory source): annotate it here
            from ptm_jax.families.ernie.units import in_memory_units

            train_units, eval_units = in_memory_units(cfg, corpus)
        else:               # the artifact covers the whole token cache; train/eval are subsets of it
            train_units = SubsetSource(units, corpus.train.doc_indices)
            eval_units = None if corpus.eval is None else SubsetSource(units, corpus.eval.doc_indices)
        self.unit_sources = {id(corpus.train): train_units, id(corpus.eval): eval_units}

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        from ptm_jax.families.ernie.data import ernie_dataset

        return ernie_dataset(source, self.unit_sources[id(source)], self.special, self.cfg.data,
                             seed=self.cfg.data.seed, start_index=start, global_batch=global_batch,
                             process_index=pi, process_count=pc, repeat=repeat,
                             plan=self.plan if source is self.train_source else None, grouped=True,
                             rows=rows)
