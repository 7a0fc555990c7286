"""The family contract as typed parts: what a family gives the spine, grouped by who asks.

A :class:`~ptm_jax.families.registry.Family` is its identity (name, ``[model]`` dataclass, tiny preset) and six
parts: :class:`Pretraining` (objectives and the data they read), :class:`ParamLayout` (where things sit in a params
tree and how its groups train), :class:`Finetuning` (task heads and objectives), :class:`Interop` (Hugging Face
and other toolkits' weights), :class:`Inspection` (generation, perplexity, word vectors and features, attention
maps) and :class:`Bench` (FLOPs and the benchmark batch). Every hook is typed by a Protocol below with its real
signature; a hook left None (a table left empty) is a thing the family does not do, and
``Family.capabilities`` is derived from what is filled, never declared beside it.

The annotations name spine types (``RunConfig``, ``Corpus``, ``Objective``) for readers and type checkers only
(``TYPE_CHECKING``): this module, like the registry, imports nothing of the spine at run time.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence

from ptm_jax.plugins import ConfigSection

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from ptm_jax.config import RunConfig
    from ptm_jax.train.stages import Corpus
    from ptm_jax.export.hf_files import HfExport
    from ptm_jax.objectives.base import Objective

Params = dict[str, Any]
"""A params tree (``{trunk: {...}, head: {...}}``), plain arrays."""
ModelConfig = Any
"""The family's ``[model]`` dataclass instance (``Family.model_config``)."""
Tokenizer = Any
"""A tokenizer of ``data/tokenizers.py`` or ``data/word_vocab.py``."""


# ----------------------------------------------------------------------------------------------- hook signatures
class ObjectiveBuilder(Protocol):
    def __call__(self, cfg: RunConfig, corpus: Corpus) -> Objective: ...


class ArtifactBuilder(Protocol):
    """Called on every process after the token cache exists; it decides which process computes and waits at
    ``parallel.distributed.barrier`` itself. ``directory``: ``<cache_dir>/artifacts/<name>`` (local or gs://),
    not created beforehand."""

    def __call__(self, cfg: RunConfig, corpus: Corpus, directory: Any) -> Any: ...


class CorpusBuilder(Protocol):
    """The whole corpus of a family whose input is not text (a graph's edge list, a hierarchy's closure):
    its vocabulary saved as the run's word tokenizer (``<output_dir>/tokenizer/vocab.tsv``), its train and eval
    sources and artifacts, on every process (it meets at ``parallel.distributed.barrier`` itself)."""

    def __call__(self, cfg: RunConfig) -> Corpus: ...


class VectorDistance(Protocol):
    """float64 [n] distances of the rows of ``vectors`` [n, d] from ``query`` [d]: the family's geometry where it
    is not the cosine's (the Poincare ball)."""

    def __call__(self, query: np.ndarray, vectors: np.ndarray) -> np.ndarray: ...


class HeadOfParams(Protocol):
    def __call__(self, params: Params) -> str: ...


class ParamGroupRules(Protocol):
    """``stage``: 'pretrain' or 'finetune'; rules of ``train/param_groups.py`` (decay masks, layer-wise rates)."""

    def __call__(self, model_cfg: ModelConfig, stage: str) -> list: ...


class LayerOf(Protocol):
    def __call__(self, keys: Sequence[str]) -> str: ...


class ClassifierOf(Protocol):
    """The sequence-classification objective class for a finetuning config (GLUE, the embedded task)."""

    def __call__(self, fcfg: Any) -> type: ...


class TaskBuilder(Protocol):
    """A task beyond sentence classification (span QA, tagging, multiple choice) for this family."""

    def __call__(self, cfg: RunConfig, model_cfg: ModelConfig, tokenizer: Tokenizer, eval_split: str,
                 **kw: Any) -> Objective: ...


class ClassOf(Protocol):
    """Returns a class, imported when called (a Flax module or an objective class)."""

    def __call__(self) -> type: ...


class PrepareFinetune(Protocol):
    def __call__(self, model_cfg: ModelConfig, tokenizer: Tokenizer) -> ModelConfig: ...


class ImportHfDir(Protocol):
    def __call__(self, hf_dir: str | Path, out: str | Path, head: str | None = None,
                 overwrite: bool = False) -> Path: ...


class ExportHfDir(Protocol):
    def __call__(self, src: str | Path, out: str | Path, overwrite: bool = False) -> HfExport: ...


class LoadHf(Protocol):
    """An HF folder read in place: (params, model config, ptm.json-style info, tokenizer folder)."""

    def __call__(self, hf_dir: str | Path) -> tuple[Params, ModelConfig, dict[str, Any], Path]: ...


class ImportFiles(Protocol):
    def __call__(self, *files: str, out: str | Path, overwrite: bool = False) -> Path: ...


class Generate(Protocol):
    def __call__(self, params: Params, model_cfg: ModelConfig, prompts: list[list[int]], max_new_tokens: int,
                 **sampling: Any) -> list[list[int]]: ...


class Perplexity(Protocol):
    def __call__(self, params: Params, model_cfg: ModelConfig, tokenizer: Tokenizer, path: str | Path,
                 **kw: Any) -> dict[str, float]: ...


class WordVectors(Protocol):
    """float32 [vocab_size, dim]; row i is the tokenizer's id i."""

    def __call__(self, params: Params, model_cfg: ModelConfig) -> np.ndarray: ...


class WordFeatures(Protocol):
    """One float32 [L, n_words, D] array per sentence: every layer's vector of each word (layer 0 the
    context-free token representation; a subword model gives a word its first subword's vector)."""

    def __call__(self, params: Params, model_cfg: ModelConfig, tokenizer: Tokenizer, sentences: list[list[str]],
                 *, batch_size: int = 32) -> list[np.ndarray]: ...


class AttentionMaps(Protocol):
    """(tokens, float32 [layers, heads, S, S]) over the family's input layout of one text, specials included."""

    def __call__(self, params: Params, model_cfg: ModelConfig, tokenizer: Tokenizer, text: str
                 ) -> tuple[list[str], np.ndarray]: ...


class WordEncoderOf(Protocol):
    """The trunk as a differentiable function of its parameters (``evaluate.features.WordEncoder``)."""

    def __call__(self, model_cfg: ModelConfig, tokenizer: Tokenizer) -> Any: ...


class SubwordVectors(Protocol):
    """float32 [len(words), dim] for words given as strings, out-of-vocabulary ones included."""

    def __call__(self, params: Params, model_cfg: ModelConfig, tokenizer: Tokenizer, words: Sequence[str]
                 ) -> np.ndarray: ...


class StepFlopsOf(Protocol):
    """Analytic FLOPs of one train step (``bench/flops.py`` ``StepFlops``)."""

    def __call__(self, cfg: RunConfig) -> Any: ...


class SyntheticBatch(Protocol):
    def __call__(self, example: dict[str, np.ndarray], cfg: RunConfig, rng: np.random.Generator
                 ) -> dict[str, np.ndarray]: ...


class BenchVariant(Protocol):
    def __call__(self, objective: Objective) -> Objective: ...


# ---------------------------------------------------------------------------------------------------- the parts
@dataclasses.dataclass(frozen=True)
class Pretraining:
    """What the family pretrains and the data it reads (``train/stages.prepare_corpus``, ``objectives/``)."""

    objectives: dict[str, ObjectiveBuilder]
    """Pretraining objective name -> builder. An objective names exactly one family."""
    data_config: type | None = None
    """Dataclass of the ``[data]`` section: a subclass of ``ptm_jax.config.DataConfig`` adding the family's own
    fields (None: the shared ``DataConfig``)."""
    tokenizer_kinds: tuple[str, ...] = ()
    """The ``tokenizer.kind`` values its objectives accept; empty: the subword kinds (``registry.SUBWORD_KINDS``).
    ``prepare_corpus`` refuses any other with a ConfigError."""
    specials: tuple[str, ...] = ()
    """Special tokens its objectives need, among ``registry.SPECIAL_NAMES`` (BERT: pad, cls, sep, mask; NNLM: pad,
    eos); ``prepare_corpus`` checks the tokenizer has each and puts only these into ``Corpus.special``."""
    artifacts: dict[str, ArtifactBuilder] = dataclasses.field(default_factory=dict)
    """Derived data built once after the token cache exists (a word-count table, a co-occurrence matrix), in name
    order, cached beside it; the values land in ``Corpus.artifacts[name]`` for the objective builders."""
    corpus: CorpusBuilder | None = None
    """A family whose input is not text builds its ``Corpus`` itself (``prepare_corpus`` calls it instead of
    tokenizing ``data.corpus``); None: text through the tokenizer and the token cache."""


@dataclasses.dataclass(frozen=True)
class ParamLayout:
    """Where the family's parts sit in a params tree and how its parameter groups train (``export/params.py``,
    ``train/param_groups.py``, ``train/step.py``)."""

    trunk: str | None = None
    """Key of the trunk in a params tree (``params[trunk]``); it also tells a tree's family."""
    stack: str | None = None
    """Sub-tree of the trunk holding the layer stack (``layers_0..N-1`` or scanned ``layers/layer``)."""
    heads: tuple[str, ...] = ()
    """Heads a params directory of this family may hold (``ptm.json`` ``head``)."""
    infer_head: HeadOfParams | None = None
    """For trees saved without a head name."""
    param_groups: ParamGroupRules | None = None
    """None: the spine's default rules."""
    layer_of: LayerOf | None = None
    """Parameter path -> layer-group name, for per-group gradient norms."""


@dataclasses.dataclass(frozen=True)
class Finetuning:
    """Task heads and objectives that the finetuning jobs (``ptm_jax/jobs``) build through."""

    classifier: ClassifierOf | None = None
    """Sequence classification (GLUE and the embedded task)."""
    tasks: dict[str, TaskBuilder] = dataclasses.field(default_factory=dict)
    """``finetune.task`` -> builder, for the tasks beyond sentence classification it supports."""
    task_heads: dict[str, ClassOf] = dataclasses.field(default_factory=dict)
    """Head name ('encoder', 'sequence_classification', 'token_classification', 'question_answering',
    'multiple_choice', 'causal_lm') -> its Flax module class; the spine's task objectives build through it."""
    task_objectives: dict[str, ClassOf] = dataclasses.field(default_factory=dict)
    """Spine task objective kind ('multiple_choice') -> the family's own objective class, where it reads the task
    through its own input transformation (GPT's one row per option)."""
    qa_layout: Literal["question_first", "document_first"] = "question_first"
    """Span-QA feature layout (``data/tasks/squad_features.py``): [CLS] q [SEP] d [SEP], or d <sep> q <sep> <cls>."""
    prepare_finetune: PrepareFinetune | None = None
    """The model config before finetuning (GPT grows its vocabulary for the task tokens)."""
    sections: tuple[ConfigSection, ...] = ()
    """Config sections its finetuning reads (GPT's ``[gpt_finetune]``), each a top-level section of the run config
    (``config.section``; an objective class binds it by ``config_sections``)."""
    packs_examples: bool = False
    """Its sequence classification finetunes on packed rows, several short examples a row (``[packing]``
    ``pack_examples``, ``objectives/packed_classification.py``)."""


@dataclasses.dataclass(frozen=True)
class HfConverter:
    """Hugging Face interop: the ``config.json`` ``model_type`` values it imports, and the converters."""

    model_types: tuple[str, ...]
    import_dir: ImportHfDir
    export_dir: ExportHfDir
    """Returns ``export.hf_files.HfExport`` (one report shape for every family)."""
    load: LoadHf | None = None
    fallback: bool = False
    """Also claims folders whose ``model_type`` no family lists (one family at most: BERT-shaped configs, the
    sentence-transformers layout)."""


@dataclasses.dataclass(frozen=True)
class Importer:
    """Weights of another toolkit -> a params directory: ``ptm import FORMAT FILE... --out DIR``."""

    files: tuple[str, ...]
    """What each positional file is, in order (e.g. ``('options.json', 'weights.hdf5')``)."""
    run: ImportFiles
    """Bad files raise errors naming the file and field."""
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Interop:
    """Weights in and out: ``ptm import-hf``, ``ptm export --format hf``, ``load_params`` of an HF folder,
    ``ptm import FORMAT``."""

    hf: HfConverter | None = None
    importers: dict[str, Importer] = dataclasses.field(default_factory=dict)
    """Other toolkits' weight formats it imports, by format name."""


@dataclasses.dataclass(frozen=True)
class Inspection:
    """What the commands that look into a trained model read: ``ptm generate``, ``ptm perplexity``, the word-vector
    commands and vector files, word features (probes, feature heads, ``ptm compare``), ``ptm attention``."""

    generate: Generate | None = None
    """Autoregressive decoding."""
    perplexity: Perplexity | None = None
    """Held-out perplexity of a text file."""
    word_vectors: WordVectors | None = None
    """Static word vectors: ``ptm neighbors``, ``analogy``, ``eval-vectors``, ``export --format text_vectors``."""
    subword_vectors: SubwordVectors | None = None
    """Vectors of words given as strings, for a family that composes them from subword units (fastText's
    character n-grams): the word-vector commands take the vocabulary's matrix from it in place of
    ``word_vectors`` and answer out-of-vocabulary words with it."""
    word_features: WordFeatures | None = None
    """Per-layer features of each word (``evaluate/features.py``); a family with only word vectors is read as one
    layer of static vectors."""
    word_encoder: WordEncoderOf | None = None
    """``word_features`` runs it frozen; a word-level task head trains it end to end
    (``features.freeze_features=false``)."""
    attention_maps: AttentionMaps | None = None
    vector_distance: VectorDistance | None = None
    """The distance ``ptm neighbors`` ranks the static vectors by (nearest first); None: the cosine (largest
    first)."""


@dataclasses.dataclass(frozen=True)
class Bench:
    """``ptm bench``, ``ptm compile`` and the loop's MFU."""

    flops: StepFlopsOf | None = None
    """None: XLA's count stands in."""
    synthetic_batch: SyntheticBatch | None = None
    """A random batch in the shapes of the objective's example batch."""
    variants: dict[str, BenchVariant] = dataclasses.field(default_factory=dict)
    """``ptm bench --mlm-head NAME`` -> wrap(objective): benchmark-only variants of the objective."""
    corpus: Literal["synthetic", "configured"] = "synthetic"
    """What the objective is built over: a few synthetic documents, or (examples that need artifacts of real
    text: ERNIE's knowledge units) the configured corpus, prepared as ``ptm data`` prepares it."""


PARTS = ("pretraining", "layout", "finetuning", "interop", "inspection", "bench")
"""The ``Family`` fields that hold its parts, in the order docs and ``ptm families`` list them."""
