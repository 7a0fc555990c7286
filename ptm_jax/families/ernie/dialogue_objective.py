"""``ernie_dlm``: ERNIE 1.0's dialogue language model (Sun et al. 2019 Sec. 3.3). The network is ERNIE's
(``model.py``: BERT's encoder keyed "ernie", the tied MLM head and a two-way head on the pooled [CLS]); the
dialogue-role embedding is the encoder's token-type table (``type_vocab_size`` 2: query, response), which the
examples fill with roles instead of segments (``dialogue_data.py``). The loss is BERT's masked LM over the turns
plus the real/fake response cross-entropy (reported as ``response_loss`` / ``response_accuracy``)."""
from __future__ import annotations

from typing import Any

from ptm_jax.errors import ConfigError
from ptm_jax.families.bert.mlm_nsp import MlmNspObjective
from ptm_jax.families.ernie.model import ErnieForPreTraining

RENAME = {"nsp_loss": "response_loss", "nsp_accuracy": "response_accuracy"}


class DialogueLmObjective(MlmNspObjective):
    def __init__(self, cfg: Any, corpus: Any):
        dialogues = getattr(corpus, "artifacts", {}).get("dialogues")
        if dialogues is None:
            raise ConfigError("objective 'ernie_dlm' reads the dialogues artifact that train/stages.prepare_corpus "
                              "builds from data.dialogue_file; prepare the corpus with it")
        if cfg.model.type_vocab_size < 2:
            raise ConfigError(f"model.type_vocab_size={cfg.model.type_vocab_size}: the dialogue LM's role embedding "
                              "needs 2 entries (query, response)")
        n_eval = min(cfg.data.eval_documents, dialogues.num_dialogues // 2)
        cut = dialogues.num_dialogues - n_eval
        train = dialogues.subset(0, cut)
        held = dialogues.subset(cut, dialogues.num_dialogues) if n_eval else None
        super().__init__(cfg, train, held, corpus.special)
        self.with_nsp = True
        self.model = ErnieForPreTraining(cfg.model, with_nsp=True)

    def loss(self, params, batch, rng, normalizers, train: bool):
        loss, terms = super().loss(params, batch, rng, normalizers, train)
        return loss, {RENAME.get(k, k): v for k, v in terms.items()}

    def dataset(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool, rows=None):
        from ptm_jax.families.ernie.dialogue_data import dialogue_dataset

        return dialogue_dataset(source, self.special, self.cfg.data, seed=self.cfg.data.seed, start_index=start,
                                global_batch=global_batch, process_index=pi, process_count=pc, repeat=repeat,
                                rows=rows, grouped=True)

    def baseline(self, global_batch: int) -> dict[str, float]:
        out = super().baseline(global_batch)
        out["response_chance"] = float(max(self.cfg.data.fake_response_prob, 1 - self.cfg.data.fake_response_prob))
        return out
