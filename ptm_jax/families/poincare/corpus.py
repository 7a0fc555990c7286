"""The Poincare family's corpus (``Pretraining.corpus``): the closure read once, the node vocabulary saved as the
run's word tokenizer (``<output_dir>/tokenizer/vocab.tsv``: node names after ``<pad>``, ``<unk>``, ``<eos>``, with
their relation counts), so ``ptm neighbors`` and ``ptm export --format text_vectors`` read a run as any other;
the relations are the train and eval sources."""
from __future__ import annotations

import logging
import math
from typing import Any

from ptm_jax import fs
from ptm_jax.errors import ConfigError
from ptm_jax.families.poincare.hierarchy import SPECIALS, Hierarchy, load_hierarchy

log = logging.getLogger(__name__)


class RelationSource:
    """The hierarchy as the corpus's source and cache (documents: relations)."""

    def __init__(self, hierarchy: Hierarchy):
        self.hierarchy = hierarchy
        self.num_docs = self.num_sentences = len(hierarchy.relations)
        self.num_tokens = 2 * self.num_docs


def build_corpus(cfg: Any) -> Any:
    import jax

    from ptm_jax.data.word_vocab import EOS, PAD, UNK, VOCAB_FILE, WordVocab, write_vocab
    from ptm_jax.families import registry
    from ptm_jax.parallel.distributed import barrier
    from ptm_jax.train.stages import Corpus, special_ids

    cfg.model.validate()
    cfg.data.validate_poincare()
    h = load_hierarchy(cfg.data)
    if cfg.model.vocab_size < h.num_nodes + SPECIALS:
        raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the hierarchy's {h.num_nodes} "
                          f"nodes + {SPECIALS} specials; set model.vocab_size={h.num_nodes + SPECIALS}")
    path = fs.makedirs(cfg.output_dir) / "tokenizer" / VOCAB_FILE
    if jax.process_index() == 0:
        write_vocab([(PAD, 0), (UNK, 0), (EOS, 0)] + list(zip(h.names, h.counts.tolist())), path)
    barrier("poincare_vocabulary")
    epoch = math.ceil(len(h.relations) / cfg.train.batch_size)
    log.info("poincare: %d nodes, %d relations; an epoch is %d steps of %d (burn-in %d epochs)", h.num_nodes,
             len(h.relations), epoch, cfg.train.batch_size, cfg.data.burn_in)
    source = RelationSource(h)
    tok = WordVocab(path)
    family = registry.family_of_objective(cfg.objective)
    return Corpus(tok, source, h, h, special_ids(tok, family, cfg.objective))
