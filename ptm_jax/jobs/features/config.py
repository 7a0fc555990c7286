"""The ``[features]`` config section (``finetune.job = "features"``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class FeaturesConfig:
    """A classic head over word features (``ptm_jax/jobs/features``, ``objectives/feature_tasks.py``).
    ``finetune.init`` names the words' features: 'random' (trained embeddings), a word-vector file (text or
    binary), a model with static word vectors, or a model with per-layer features (frozen, computed once and
    cached, mixed by a learned scalar mix)."""

    head: Literal["textcnn", "textrnn", "textrcnn", "bilstm"] = "textcnn"
    """'textcnn', 'textrnn', 'textrcnn' for a single-sentence or pair task (GLUE, embedded), 'bilstm' for
    conll2003. Kim 2014 used finetune.classifier_dropout=0.5."""
    head_hidden: int = 100
    """textrnn, textrcnn, bilstm: LSTM state size per direction (textrcnn: also its tanh projection)."""
    head_pool: Literal["last", "max"] = "last"
    """textrnn: the BiLSTM's final states ('last') or its outputs max-pooled over the words ('max')."""
    freeze_embeddings: bool = True
    """Static vectors: keep them fixed (Kim's CNN-static); false trains them (CNN-non-static)."""
    freeze_features: bool = True
    """A model of per-layer features: keep the model frozen (its features computed once and cached); false
    finetunes it end to end under the head (a family with ``Inspection.word_encoder``: BERT, GPT, XLNet, ERNIE), its
    layers recomputed at every step and mixed by the scalar mix."""
    feature_cache: str = ""
    """Per-layer features: their cache folder, keyed by model and data (empty: <output_dir>/feature_cache)."""
    word_init: str = ""
    """Over a model's frozen per-layer features (finetune.init): also a word table, 'random[:DIM]' or static
    vectors as finetune.init takes them, concatenated with the mixed features, [x_k; ELMo_k] (Peters et al. 2018
    Sec. 3.3: the task model's own word vectors next to ELMo). Empty: the features alone."""
    feature_norm: Literal["none", "layer", "dimension"] = "none"
    """Per-layer features: how each layer is normalised before the scalar mix. 'layer': one mean and variance per
    layer over the batch's real words (Peters et al. 2018 Sec. 3.2; AllenNLP's ScalarMix do_layer_norm).
    'dimension' (frozen features only): each dimension of each layer standardised by its mean and standard
    deviation over the training set's words, computed once and kept frozen with the model: for features whose
    words share a large common offset, such as a briefly trained biLM's (docs/benchmarks.md, "ELMo features on
    CoNLL-2003")."""
