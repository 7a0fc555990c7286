"""The ``[model]`` and ``[data]`` sections of the fastText family (facebookresearch/fastText ``src/args.cc``
options for ``skipgram`` and ``cbow``)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError
from ptm_jax.families.fasttext.ngrams import check_range
from ptm_jax.families.word2vec.config import Word2VecDataConfig, check_updates


@dataclass
class FastTextConfig:
    """Two tables: the input table (fastText's ``input`` matrix, [vocab_size + bucket, dim]: one row per
    vocabulary word, then one per hash bucket of character n-grams) and the output table of negative sampling
    ([vocab_size, dim])."""

    family: str = "fasttext"
    vocab_size: int = 30000
    """|V|: the word vocabulary (``data/word_vocab.py``; ``<pad>``, ``<unk>``, ``<eos>`` included)."""
    dim: int = 100
    """fastText ``-dim``."""
    minn: int = 3
    """fastText ``-minn``: the shortest character n-gram (characters, ``<`` and ``>`` counted)."""
    maxn: int = 6
    """fastText ``-maxn``: the longest character n-gram."""
    bucket: int = 2000000
    """fastText ``-bucket``: hash buckets of the n-grams (rows of the input table past the words)."""
    duplicate_cap: int = 128
    """As word2vec's ``model.duplicate_cap`` (``families/word2vec/model.py`` ``Word2VecTables``): a row taking
    part in n > cap updates of one batch gets their sum scaled by cap / n (0: the plain summed gradient). n
    counts pair updates (``model.row_ids``): in skip-gram a center's unit rows take its whole error, the sum of
    its pairs', so each of their reads counts that center's pairs, and a negative counts the pairs it serves.
    128: skip-gram on Gutenberg (2.0M words, dim 100, 2M buckets, batch 4096, alpha 0.025, the presets' rate)
    trains 3 epochs at 64 and 128 and diverges at 256 (and at 64 when reads, not pairs, were counted). What
    bounds it is cap x learning rate: at fastText's lr 0.05 cap 128 diverges and 64 and 32 train, so halve the
    cap when doubling the rate (docs/benchmarks.md)."""
    init_vectors: str = ""
    """A fastText ``.vec``, word2vec text/binary or GloVe text vector file (``export/vector_files.py``) whose
    vectors initialise the vocabulary words' own rows of the input table, as fastText's ``-pretrainedVectors``
    does (the n-gram rows keep their fresh initialisation; the coverage is logged). '' : none. Its dimension
    must be ``dim``."""
    kernel: str = "auto"
    """As word2vec's ``model.kernel``: 'auto' runs the fused CPU kernel (``families/word2vec/cpu_kernel.py``)
    where it applies (CPU backend, one-device mesh, sparse SGD), the XLA path elsewhere; 'xla'; 'cpu'."""
    updates: str = "batch"
    """As word2vec's ``model.updates``: 'batch' (every gradient at the tables before the batch, the duplicate cap;
    any mesh) or 'sequential' (fastText's own order: each pair's update applied in place before the next pair,
    ``families/word2vec/sequential.h``; the fused CPU kernel on one CPU device only)."""
    sequential_parts: int = 1
    """As word2vec's ``model.sequential_parts``: the sequential updates of a batch in this many parts of the
    stream, side by side on the kernel's threads (``families/word2vec/sequential_parts.h``)."""
    sparse_update: bool = True
    """With plain SGD (no weight decay, clipping, parameter groups or accumulation) a step scatter-adds the
    gradient of the rows it read into the tables (``train/step.py`` ``SparseRows``), as fastText updates only
    those rows, instead of a dense gradient of the (vocab_size + bucket) x dim input table; the same update."""

    def validate(self, where: str = "model") -> None:
        if self.family != "fasttext":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the fastText family's")
        for name, low in (("vocab_size", 4), ("dim", 1), ("duplicate_cap", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= {low}")
        if self.kernel not in ("auto", "xla", "cpu"):
            raise ConfigError(f"{where}.kernel={self.kernel!r} must be 'auto', 'xla' or 'cpu'")
        check_updates(self.updates, self.kernel, self.sequential_parts, where)
        if not isinstance(self.init_vectors, str):
            raise ConfigError(f"{where}.init_vectors={self.init_vectors!r} must be a path to a vector file or ''")
        check_range(self.minn, self.maxn, self.bucket, where)

    @property
    def input_rows(self) -> int:
        return self.vocab_size + self.bucket


@dataclass
class FastTextDataConfig(Word2VecDataConfig):
    """word2vec's example options (``families/word2vec/config.py``: window, subsampling, negatives, margin) with
    fastText's defaults: ``-t 1e-4`` subsampling and negatives from unigram^0.5 (fastText's
    ``NegativeSamplingLoss`` table; word2vec.c and gensim use 0.75). Negatives are drawn per center and shared by
    its pairs, or with ``shared_negatives=false`` per skip-gram pair (fastText's and gensim's way; CBOW always per
    center); fastText has no hierarchical softmax for word vectors here (``hs`` must stay false)."""

    sample: float = 1e-4
    ns_exponent: float = 0.5
    """The power of the unigram counts that negatives are drawn from (fastText 0.5, gensim ``ns_exponent``)."""

    unit_slots: int = 0
    """Input-unit slots per row of a packing block (``data.py``; 0: the expected units per running word x 1.3).
    A center whose units do not fit its block trains nothing (counted in ``ft_dropped_pairs`` and logged). With
    ``model.updates='sequential'`` only the evaluation batches have unit slots: the kernel reads the training
    batches' units from the subword table."""

    def validate_word2vec(self, where: str = "data") -> None:
        super().validate_word2vec(where)
        if not isinstance(self.unit_slots, int) or isinstance(self.unit_slots, bool) or self.unit_slots < 0:
            raise ConfigError(f"{where}.unit_slots={self.unit_slots!r} must be an integer >= 0")
        if self.hs:
            raise ConfigError(f"{where}.hs=true: the fastText family trains with negative sampling only; set "
                              f"{where}.hs=false and {where}.negative >= 1")
        if self.negative < 1:
            raise ConfigError(f"{where}.negative={self.negative}: the fastText family needs negatives >= 1")
        if not isinstance(self.ns_exponent, (int, float)) or not 0 <= self.ns_exponent <= 1:
            raise ConfigError(f"{where}.ns_exponent={self.ns_exponent!r} must be a number in [0, 1] "
                              "(fastText 0.5, word2vec 0.75)")
