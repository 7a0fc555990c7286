"""The ``[cvt]`` config section (``finetune.job = "cvt"``)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError


@dataclass
class CvtConfig:
    """Cross-view training of a BiLSTM tagger (Clark et al. 2018; ``ptm_jax/jobs/cvt``). The words are read as
    ``finetune.init`` names them ('random', 'random:DIM', a word-vector file or a model with static word vectors,
    as the features job reads them); ``finetune.classifier_dropout`` is the dropout on the word vectors and on
    each BiLSTM layer's outputs."""

    enabled: bool = True
    """false: the supervised baseline, the same network trained on the labelled minibatches alone (also when
    aux_weight is 0)."""
    unlabelled: str = ""
    """Raw text of the unlabelled sentences: a text file, or a folder whose *.txt files are read (Project Gutenberg
    books, WikiText); split into sentences and words as the CoNLL words are cut (``data.py``). Required when
    enabled."""
    unlabelled_sentences: int = 0
    """At most this many unlabelled sentences, a sample seeded by finetune.subset_seed (0: all)."""
    aux_weight: float = 1.0
    """The weight of the CVT loss on an unlabelled minibatch (Clark et al. 2018 Eq. 2 has none: 1)."""
    freeze_embeddings: bool = True
    """Static vectors (finetune.init a vector file or a model): keep the table fixed; false trains it. Random
    embeddings are always trained."""
    hidden_1: int = 100
    """The first BiLSTM layer's state size per direction (the auxiliary modules read it). The paper: 1024."""
    hidden_2: int = 100
    """The second BiLSTM layer's state size per direction. The paper: 512."""
    projection: int = 50
    """The hidden layer of every prediction module, NN(h) = softmax(U ReLU(W h + b) + c). The paper: 512."""

    def validate(self, where: str = "cvt") -> None:
        for name in ("hidden_1", "hidden_2", "projection"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}.{name}={getattr(self, name)} must be a positive size")
        if self.aux_weight < 0:
            raise ConfigError(f"{where}.aux_weight={self.aux_weight} must be >= 0 (0: the supervised baseline)")
        if self.unlabelled_sentences < 0:
            raise ConfigError(f"{where}.unlabelled_sentences={self.unlabelled_sentences} must be >= 0 (0: all)")

    @property
    def active(self) -> bool:
        """Whether unlabelled minibatches are trained on (enabled with a positive weight)."""
        return bool(self.enabled) and self.aux_weight > 0
