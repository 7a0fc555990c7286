"""The CoVe family's corpus (``Pretraining.corpus``): the parallel corpus read and checked
(``parallel.load_pairs``), the target-side word vocabulary saved as the run's word tokenizer
(``<output_dir>/tokenizer/vocab.tsv``: <pad>, <unk>, <eos>, then the target words by count, at most
``model.vocab_size`` entries, words seen fewer than ``data.target_min_count`` times left out); the tokenized pairs
are the train and eval sources."""
from __future__ import annotations

import collections
import logging
from typing import Any

from ptm_jax import fs

log = logging.getLogger(__name__)


def build_corpus(cfg: Any) -> Any:
    import jax

    from ptm_jax.data.word_vocab import VOCAB_FILE, WordVocab, ordered_entries, write_vocab
    from ptm_jax.families import registry
    from ptm_jax.families.cove.parallel import load_pairs
    from ptm_jax.parallel.distributed import barrier
    from ptm_jax.train.stages import Corpus, special_ids

    cfg.model.validate()
    cfg.data.validate_cove()
    train, held = load_pairs(cfg.data, "train"), load_pairs(cfg.data, "eval")
    lower = bool(cfg.tokenizer.lower_case)
    counts = collections.Counter(w.lower() if lower else w for t in train.target for w in t)
    entries = ordered_entries(counts, cfg.data.target_min_count, cfg.model.vocab_size)
    path = fs.makedirs(cfg.output_dir) / "tokenizer" / VOCAB_FILE
    if jax.process_index() == 0:
        write_vocab(entries, path)
    barrier("cove_vocabulary")
    tok = WordVocab(path, lower_case=lower)
    log.info("cove: %d training pairs (%d words), %d eval pairs; target vocabulary %d", train.num_docs,
             train.num_tokens, 0 if held is None else held.num_docs, tok.vocab_size)
    family = registry.family_of_objective(cfg.objective)
    return Corpus(tok, train, train, held, special_ids(tok, family, cfg.objective))
