"""node2vec's objective: word2vec's skip-gram with negative sampling (``families/word2vec/objective.py``, the same
loss, examples, sparse SGD step and fused CPU kernel) over the walks of ``walks.py`` instead of a text's token
stream, its tables under the params key ``node2vec``. Evaluation batches read walks of another seed."""
from __future__ import annotations

from ptm_jax.families.node2vec.config import TRUNK
from ptm_jax.families.word2vec.data import word2vec_batches
from ptm_jax.families.word2vec.objective import EVAL_SEED_OFFSET, Word2VecObjective


class Node2VecObjective(Word2VecObjective):
    """``train_source`` / ``eval_source``: ``corpus.WalkSource`` (its ``stream(seed)`` gives the running words)."""

    trunk = TRUNK
    kernel_mode = "skipgram"

    def batch_maker(self, source, start: int, global_batch: int, pi: int, pc: int, repeat: bool):
        d = self.cfg.data
        seed = int(d.seed) if repeat else int(d.seed) + EVAL_SEED_OFFSET
        return word2vec_batches(source, self.tables, eos_id=self.eos_id, pad_id=self.pad_id, window=d.window,
                                negative=d.negative, cbow=False, reach=d.reach, seed=seed, start_index=start,
                                global_batch=global_batch, block=self.block, slots=self.slots,
                                process_index=pi, process_count=pc, shared=d.shared_negatives,
                                stream=source.stream(seed))
