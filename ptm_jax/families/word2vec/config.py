"""The ``[model]`` and ``[data]`` sections of the word2vec family (Mikolov et al. 2013; word2vec.c's options)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError


@dataclass
class Word2VecConfig:
    """Two tables of word vectors: the input vectors (word2vec.c ``syn0``, the exported word vectors) and the
    output vectors of negative sampling (``syn1neg``) and/or of the hierarchical softmax's inner nodes
    (``syn1``). Which output tables exist follows ``data.negative`` and ``data.hs``."""

    family: str = "word2vec"
    vocab_size: int = 30000
    """|V|: the word vocabulary (``data/word_vocab.py``; ``<pad>``, ``<unk>``, ``<eos>`` included)."""
    dim: int = 100
    """word2vec.c ``-size``: the dimension of the word vectors."""
    duplicate_cap: int = 64
    """A table row occurring n times in one step gets the sum of its n pair updates scaled by
    min(1, duplicate_cap / n), so the commonest words do not take hundreds of stale steps at once (0: the
    plain gradient of the summed loss); see ``model.py`` ``Word2VecTables``."""
    sparse_update: bool = True
    """Train by SGD on the rows each batch reads (a scatter-add into the tables, ``train/step.py``
    ``sparse_sgd_step``) when ``train.optimizer='sgd'`` with no weight decay, clipping, parameter groups or
    accumulation; False, or any other optimizer: autodiff through the tables and the optimizer over all rows
    (the same step, at the cost of dense [V, dim] gradients)."""
    kernel: str = "auto"
    """The sparse SGD step's implementation: 'auto' runs the fused CPU kernel (``cpu_kernel.py``: gather, scores,
    sigmoid, row gradients and scatter in one pass, compiled with the system's C++ compiler at first use) where
    it applies - the CPU backend, a one-device mesh, ``sparse_update`` - and the XLA path elsewhere (or where no
    compiler is found, with a warning); 'xla': the XLA path always; 'cpu': the kernel, an error where it cannot
    run. Both give the same step to float rounding (``tests/test_word2vec.py``)."""
    updates: str = "batch"
    """How the sparse SGD step applies a batch's pair updates. 'batch': every gradient at the tables as they were
    before the batch, summed per row with ``duplicate_cap`` (the XLA path's semantics; any mesh, any backend, the
    same result on every device count). 'sequential': word2vec.c's order, one pair after another in stream order
    with each row updated in place before the next pair reads it (``sequential.h``; no duplicate cap); only the
    fused CPU kernel does this, so it needs the CPU backend and a one-device mesh (``model.kernel`` 'auto' or
    'cpu') and plain sparse SGD, and runs on one thread (``sequential_parts``: on several). The batch size then
    sets only the rate's decay steps (16384 running words a step lose nothing, docs/benchmarks.md); ``grad_norm``
    is the norm of the per-pair gradients as they were applied, and a pair with a non-finite score is skipped and
    its step counted in ``nonfinite_total``."""
    sequential_parts: int = 1
    """With ``updates='sequential'``: the batch split into this many contiguous parts of the stream (the first,
    which moves the tables in place, a little shorter), run side by side on the kernel's threads
    (``sequential_parts.h``). Each part runs word2vec.c's order from the tables as
    they were before the batch and sees the other parts' moves at the batch's end, as word2vec.c's threads see
    each other's moves late (there, whenever a write lands). The result depends on this number, not on the thread
    count: reruns and resumes stay bit-equal. 1: one thread, one order."""
    init_vectors: str = ""
    """A word2vec text/binary or GloVe text vector file (``export/vector_files.py``) whose vectors initialise the
    input table (word2vec.c ``syn0``) for the vocabulary's words it holds (the coverage is logged); the other
    rows keep word2vec.c's initialisation. '' : none. Its dimension must be ``dim``."""

    def validate(self, where: str = "model") -> None:
        own = type(self).family   # a family that trains through word2vec's objective subclasses this section
        if self.family != own:
            raise ConfigError(f"{where}.family={self.family!r}: this section is the {own} family's")
        for name, low in (("vocab_size", 4), ("dim", 1), ("duplicate_cap", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if self.kernel not in ("auto", "xla", "cpu"):
            raise ConfigError(f"{where}.kernel={self.kernel!r} must be 'auto', 'xla' or 'cpu'")
        check_updates(self.updates, self.kernel, self.sequential_parts, where)
        if not isinstance(self.init_vectors, str):
            raise ConfigError(f"{where}.init_vectors={self.init_vectors!r} must be a path to a vector file or ''")


def check_updates(updates: str, kernel: str, parts: int = 1, where: str = "model") -> None:
    """``model.updates`` (word2vec's and fastText's): 'batch', or 'sequential' where the kernel may run, in
    ``model.sequential_parts`` parts."""
    if updates not in ("batch", "sequential"):
        raise ConfigError(f"{where}.updates={updates!r} must be 'batch' or 'sequential'")
    if not isinstance(parts, int) or isinstance(parts, bool) or not 1 <= parts <= 64:
        raise ConfigError(f"{where}.sequential_parts={parts!r} must be an integer from 1 to 64")
    if parts > 1 and updates != "sequential":
        raise ConfigError(f"{where}.sequential_parts={parts} splits the sequential updates; set "
                          f"{where}.updates='sequential' or {where}.sequential_parts=1")
    if updates == "sequential" and kernel == "xla":
        raise ConfigError(f"{where}.updates='sequential' runs in the fused CPU kernel only; set {where}.kernel "
                          f"to 'auto' or 'cpu', or {where}.updates='batch' for the XLA path")


@dataclass
class Word2VecDataConfig(DataConfig):
    """word2vec.c's example options. One training step reads ``train.batch_size`` running words of the token
    stream (the centers); ``train.steps`` = epochs x words per pass / batch_size (``steps_for_epochs``)."""

    window: int = 5
    """word2vec.c ``-window``: the largest distance of a context word; each center draws b uniform in
    [0, window) and uses window - b (the dynamic window)."""
    sample: float = 1e-3
    """word2vec.c ``-sample``: subsampling threshold of frequent words (0: no subsampling)."""
    negative: int = 5
    """word2vec.c ``-negative``: negative samples per (input, target) pair, from unigram^0.75 (0: none)."""
    shared_negatives: bool = True
    """Skip-gram: the ``negative`` draws of a center serve all its (context, center) pairs, instead of a draw per
    pair as in word2vec.c. The same distribution; 2 x window times fewer output rows gathered and updated per
    step, the step's largest cost (docs/benchmarks.md "word2vec"). CBOW has one pair per center either way."""
    hs: bool = False
    """word2vec.c ``-hs 1``: hierarchical softmax over a Huffman tree of the counts."""
    pack_rows: int = 512
    """Rows (centers) of a packing block: a block's real (context, center) pairs fill its ``rows x slots`` pair
    slots (``data.py``). The block is the largest divisor of ``train.batch_size`` up to this; each process's rows
    must be whole blocks."""
    pair_slots: int = 0
    """Pair slots per row of a block (0: the expected pairs per running word x 1.3, ``data.py`` ``pair_slots``). Pairs
    of a block beyond its slots are dropped, counted in the metric ``w2v_dropped_pairs`` and logged."""
    margin: int = 0
    """Running words read on each side of a batch to find the window's kept neighbours after subsampling
    (0: 8 x window). A context word further than this from its center is not used (see ``data.py``)."""

    def validate(self, where: str = "data") -> None:
        """The shared fields (``DataConfig.validate``) and word2vec's own (``config.validate`` calls it)."""
        super().validate(where)
        self.validate_word2vec(where)

    def validate_word2vec(self, where: str = "data") -> None:
        for name, low in (("window", 1), ("negative", 0), ("margin", 0), ("pack_rows", 1), ("pair_slots", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if not isinstance(self.sample, (int, float)) or self.sample < 0:
            raise ConfigError(f"{where}.sample={self.sample!r} must be a number >= 0 (0: no subsampling)")
        if self.negative == 0 and not self.hs:
            raise ConfigError(f"{where}.negative=0 and {where}.hs=false leave word2vec without an output layer; "
                              f"set {where}.negative (word2vec.c uses 5) or {where}.hs=true")
        if 0 < self.margin < self.window:
            raise ConfigError(f"{where}.margin={self.margin} must be 0 or at least {where}.window={self.window}")

    @property
    def reach(self) -> int:
        return self.margin or 8 * self.window


def steps_for_epochs(epochs: float, pass_words: int, batch_size: int) -> int:
    """Train steps that read ``epochs`` passes over ``pass_words`` running words (eos included)."""
    return max(1, -(-int(round(epochs * pass_words)) // int(batch_size)))
