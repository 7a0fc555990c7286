"""node2vec's corpus (``Pretraining.corpus``): the graph read once, its transition tables, the walks as the train
and eval sources, and the node vocabulary saved as the run's word tokenizer (``<output_dir>/tokenizer/vocab.tsv``:
the node names after ``<pad>``, ``<unk>``, ``<eos>``, with how often each occurs in one pass of walks), so the
word-vector commands (``ptm neighbors``, ``ptm export --format text_vectors``) read a node2vec run as any other.

The counts are word2vec's (subsampling, unigram^0.75 negatives) as gensim counts them over the walk corpus
(the reference code and PecanPy train gensim's Word2Vec on the walks). Process p of P walks the p-th contiguous
share of one pass's walks and counts them; the partial counts meet through files beside the vocabulary and every
process adds them in process order, so the vocabulary is the same on any host count.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError
from ptm_jax.families.node2vec.alias import build_tables
from ptm_jax.families.node2vec.graph import load_graph
from ptm_jax.families.node2vec.walks import SPECIALS, Walks, node_counts

log = logging.getLogger(__name__)


class WalkSource:
    """The walks as the corpus's source (``Corpus.train``/``eval``/``cache``): documents are walks."""

    def __init__(self, walks: Walks):
        self.walks = walks
        self.num_docs = self.num_sentences = walks.per_pass
        self.num_tokens = walks.per_pass * walks.length

    def stream(self, seed: int):
        return self.walks.stream(seed)


def build_corpus(cfg: Any) -> Any:
    """The ``Corpus`` of a node2vec run (module doc)."""
    import jax

    from ptm_jax.data.word_vocab import EOS, PAD, UNK, VOCAB_FILE, WordVocab, write_vocab
    from ptm_jax.families import registry
    from ptm_jax.parallel.distributed import barrier
    from ptm_jax.train.stages import Corpus, special_ids

    d = cfg.data
    cfg.model.validate()
    d.validate_node2vec()
    graph = load_graph(d)
    if cfg.model.vocab_size < graph.num_nodes + SPECIALS:
        raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the graph's {graph.num_nodes} "
                          f"nodes + {SPECIALS} specials; set model.vocab_size={graph.num_nodes + SPECIALS}")
    walks = Walks(graph, build_tables(graph, float(d.p), float(d.q)), d.walk_length, d.walks_per_node)
    pi, pc = jax.process_index(), jax.process_count()
    total = walks.per_pass
    counts = node_counts(walks, int(d.seed), range(pi * total // pc, (pi + 1) * total // pc))
    out = fs.makedirs(cfg.output_dir)
    if pc > 1:
        shares = out / "tokenizer" / "walk_counts"
        fs.makedirs(shares)
        buf = counts.astype("<i8").tobytes()
        fs.write_bytes_atomic(shares / f"{pi}.bin", buf)
        barrier("node2vec_walk_counts")
        counts = sum(np.frombuffer(fs.read_bytes(shares / f"{p}.bin"), "<i8").astype(np.int64) for p in range(pc))
    path = out / "tokenizer" / VOCAB_FILE
    if pi == 0:
        write_vocab([(PAD, 0), (UNK, 0), (EOS, 0)] + list(zip(graph.names, counts.tolist())), path)
    barrier("node2vec_vocabulary")
    tok = WordVocab(path)
    words = total * (d.walk_length + 1)
    log.info("node2vec: %d nodes, %d stored edges; a pass is %d walks = %d running words = %d steps of %d",
             graph.num_nodes, graph.num_edges, total, words, math.ceil(words / cfg.train.batch_size),
             cfg.train.batch_size)
    source = WalkSource(walks)
    family = registry.family_of_objective(cfg.objective)
    return Corpus(tok, source, source, source, special_ids(tok, family, cfg.objective))
