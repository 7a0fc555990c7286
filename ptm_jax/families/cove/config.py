"""The ``[model]`` and ``[data]`` sections of the CoVe family (McCann et al. 2017, "Learned in Translation:
Contextualized Word Vectors", Sec. 3; salesforce/cove ``cove/encoder.py`` ``MTLSTM``, whose two bidirectional
``nn.LSTM`` layers over 300-dimensional GloVe vectors the encoder fields follow)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.config import DataConfig
from ptm_jax.errors import ConfigError


@dataclass
class CoveConfig:
    """The MT-LSTM: a ``encoder_layers``-layer bidirectional LSTM encoder over fixed input word vectors, and an
    attentional ``decoder_layers``-layer LSTM decoder over trained target-word embeddings (Sec. 3). Defaults are
    the paper's (GloVe 300d inputs, 300 units per direction and layer, two layers each)."""

    family: str = "cove"
    input_vectors: str = ""
    """The fixed input vectors GloVe(w) of the source words: anything ``ptm neighbors`` reads
    (``evaluate/vector_loading.py``: a GloVe, word2vec or fastText run or params directory, or a word2vec / GloVe
    vector file), or 'random:DIM' (fixed vectors drawn per word from a hash of it: tests and a no-vector baseline).
    A word the vectors lack reads zeros. Read again by ``features.py``, so any word of a task has its vector."""
    input_dim: int = 300
    """Width of the input vectors (checked against ``input_vectors`` when they are read)."""
    lower_case: bool = True
    """Look the source words up lower-cased (the vectors' own case rule when they were trained lower-cased)."""
    hidden_size: int = 300
    """LSTM units per direction and encoder layer (CoVe: 300, so a word's CoVe vector has 600 dimensions)."""
    encoder_layers: int = 2
    decoder_layers: int = 2
    decoder_size: int = 600
    """Decoder LSTM units; the tanh context layer has this width too (CoVe: 2 x hidden_size)."""
    decoder_init: str = "encoder"
    """'encoder': decoder layer l starts from encoder layer l's final [forward; backward] (c, h) (OpenNMT-py's
    bridge; needs ``decoder_size`` = 2 x ``hidden_size`` and ``decoder_layers`` <= ``encoder_layers``); 'zeros'."""
    target_embed_dim: int = 300
    vocab_size: int = 10000
    """Target-side word vocabulary (the run's tokenizer, ``<output_dir>/tokenizer/vocab.tsv``: <pad>, <unk>,
    <eos> (also the decoder's start symbol), then the target words by count)."""
    dropout: float = 0.2
    """Dropout on the encoder's inputs and between its layers, on the decoder's inputs and on the context layer
    before the softmax (training only)."""
    lstm_impl: str = "scan"
    """The encoder LSTM: 'scan', 'cudnn' (GPU) or 'auto' (``models/lstm.py``)."""
    dtype: str = "float32"

    @property
    def num_layers(self) -> int:
        """Feature layers above the first (``evaluate/features.py`` reads ``num_layers`` + 1): one, the top
        encoder layer's states (a CoVe vector is one per word, as the paper uses it)."""
        return 0

    @property
    def feature_dim(self) -> int:
        return 2 * self.hidden_size

    def validate(self, where: str = "model") -> None:
        if self.family != "cove":
            raise ConfigError(f"{where}.family={self.family!r}: this section is the CoVe family's ('cove')")
        for name in ("input_dim", "hidden_size", "encoder_layers", "decoder_layers", "decoder_size",
                     "target_embed_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{where}.{name}={v!r} must be an integer >= 1")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 4:
            raise ConfigError(f"{where}.vocab_size={self.vocab_size!r} must be an integer >= 4")
        if not isinstance(self.input_vectors, str):
            raise ConfigError(f"{where}.input_vectors={self.input_vectors!r} must be a path or 'random:DIM'")
        if self.decoder_init not in ("encoder", "zeros"):
            raise ConfigError(f"{where}.decoder_init={self.decoder_init!r} must be 'encoder' or 'zeros'")
        if self.decoder_init == "encoder" and (self.decoder_size != 2 * self.hidden_size
                                               or self.decoder_layers > self.encoder_layers):
            raise ConfigError(f"{where}.decoder_init='encoder' needs {where}.decoder_size = 2 x hidden_size "
                              f"({2 * self.hidden_size}, got {self.decoder_size}) and decoder_layers <= "
                              f"encoder_layers ({self.decoder_layers} > {self.encoder_layers}?); or set "
                              f"{where}.decoder_init='zeros'")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"{where}.dropout={self.dropout!r} must be in [0, 1)")
        if self.lstm_impl not in ("auto", "scan", "cudnn"):
            raise ConfigError(f"{where}.lstm_impl={self.lstm_impl!r} must be 'auto', 'scan' or 'cudnn'")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"{where}.dtype={self.dtype!r} must be 'float32' or 'bfloat16'")


@dataclass
class CoveDataConfig(DataConfig):
    """The parallel corpus: line i of ``source_train`` translates into line i of ``target_train`` (and so for the
    eval pair). ``data.corpus`` is not read. ``data.max_seq_length`` cuts both sides of a pair (in words; the
    target side counts its end symbol). Pairs with an empty side are left out."""

    source_train: str = ""
    """Source-language training file, one sentence per line (Multi30k ``train.en``), or 'generated' (a small
    synthetic language pair built from Python's own docs: tests and the conformance table)."""
    target_train: str = ""
    """Target-language training file, line-aligned with ``source_train`` (Multi30k ``train.de``)."""
    source_eval: str = ""
    """Held-out source file (Multi30k ``val.en``); empty: no periodic evaluation."""
    target_eval: str = ""
    tokenize: str = "words_punct"
    """'words_punct': runs of letters/digits and single punctuation marks (Multi30k's raw text); 'split':
    whitespace only (pre-tokenized files)."""
    target_min_count: int = 1
    """Target words seen fewer times than this are <unk>."""

    def validate(self, where: str = "data") -> None:
        """The fields' own checks (a preset may leave the files to the command line)."""
        super().validate(where)
        if bool(self.source_eval) != bool(self.target_eval):
            raise ConfigError(f"{where}.source_eval={self.source_eval!r} and {where}.target_eval="
                              f"{self.target_eval!r}: give both sides of the held-out pair or neither")
        if self.tokenize not in ("words_punct", "split"):
            raise ConfigError(f"{where}.tokenize={self.tokenize!r} must be 'words_punct' or 'split'")
        if not isinstance(self.target_min_count, int) or self.target_min_count < 1:
            raise ConfigError(f"{where}.target_min_count={self.target_min_count!r} must be an integer >= 1")

    def validate_cove(self, where: str = "data") -> None:
        """Before the corpus is read: the training pair is given."""
        self.validate(where)
        if not self.source_train:
            raise ConfigError(f"{where}.source_train is empty: give the source side of the parallel corpus "
                              "(e.g. Multi30k train.en) or 'generated'")
        if self.source_train != "generated" and not self.target_train:
            raise ConfigError(f"{where}.target_train is empty: {where}.source_train={self.source_train!r} has no "
                              "target side; give the line-aligned translation file (e.g. Multi30k train.de)")
