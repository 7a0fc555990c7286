"""The family registry: everything the spine needs to know about a model family, in one record per family.

A family is one package under ``ptm_jax/families/`` whose ``__init__`` builds a :class:`Family` and calls
:func:`register`. The loop, the stages, the CLI, export and bench ask this module; none of them names a family
(docs/architecture.md, "How a family plugs in"; levanter's ``LmConfig.register_subclass`` is the model). Families are found by
importing every package under ``ptm_jax/families`` (``load_all``), so adding a family is adding a package.

Every hook but the identity fields is optional: a family that has no Hugging Face counterpart leaves ``hf`` None,
one without finetuning leaves ``classifier`` None, and the spine says so in a clear error when asked for it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

from ptm_jax.errors import ConfigError
from ptm_jax.plugins import PluginTable, lazy  # noqa: F401  (lazy: the families' __init__ name their hooks with it)


@dataclasses.dataclass(frozen=True)
class HfConverter:
    """Hugging Face interop of a family: ``config.json`` ``model_type`` values it imports, and the converters."""

    model_types: tuple[str, ...]
    import_dir: Callable[..., Any]
    """(hf_dir, out, head=None, overwrite=False) -> params directory."""
    export_dir: Callable[..., Any]
    """(src, out, overwrite=False) -> ``ptm_jax.export.hf_files.HfExport`` (one report shape for every family)."""
    load: Callable[..., Any] | None = None
    """(hf_dir) -> (params, model_cfg, info, tokenizer_dir): read an HF folder in place (``load_params``)."""
    fallback: bool = False
    """Also claims folders whose ``model_type`` no family lists (one family at most: BERT-shaped configs,
    the sentence-transformers layout)."""


@dataclasses.dataclass(frozen=True)
class Importer:
    """Weights of another toolkit -> a params directory: ``ptm import FORMAT FILE... --out DIR``."""

    files: tuple[str, ...]
    """What each positional file is, in order (e.g. ``('options.json', 'weights.hdf5')``)."""
    run: Callable[..., Any]
    """(*files, out, overwrite=False) -> params directory; bad files raise errors naming the file and field."""
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family. ``name`` is the value of ``model.family`` in configs and params directories."""

    name: str
    model_config: type
    """Dataclass of the ``[model]`` section (holds only this family's fields)."""
    objectives: dict[str, Callable[..., Any]]
    """Pretraining objective name -> builder(cfg: RunConfig, corpus) -> Objective."""
    data_config: type | None = None
    """Dataclass of the ``[data]`` section: a subclass of ``ptm_jax.config.DataConfig`` adding the family's own
    fields (None: the shared ``DataConfig``)."""
    tokenizer_kinds: tuple[str, ...] = ()
    """The ``tokenizer.kind`` values the family's objectives accept; empty: the subword kinds
    (:data:`SUBWORD_KINDS`). ``train/stages.py:prepare_corpus`` refuses any other with a ConfigError."""
    specials: tuple[str, ...] = ()
    """Special tokens the family's pretraining objectives need, among :data:`SPECIAL_NAMES` (BERT: 'pad', 'cls',
    'sep', 'mask'; NNLM: 'pad', 'eos'). ``prepare_corpus`` checks the tokenizer has each one (a ConfigError
    otherwise) and puts only these into ``Corpus.special`` (``data/pretraining/source.py:SpecialIds``)."""
    artifacts: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    """Derived data built once after the token cache exists and cached beside it (a word-count table, a
    co-occurrence matrix): name -> build(cfg: RunConfig, corpus: Corpus, directory) -> value. ``prepare_corpus``
    calls every builder on every process, in name order; the builder decides which process computes and uses
    ``ptm_jax.parallel.distributed.barrier`` itself. ``directory`` is ``<cache_dir>/artifacts/<name>``, an
    ``fs`` path (local or gs://), not created beforehand. The values land in ``Corpus.artifacts[name]`` for
    the objective builders."""
    trunk: str | None = None
    """Key of the family's trunk in a params tree (``params[trunk]``)."""
    stack: str | None = None
    """Sub-tree of the trunk holding the layer stack (``layers_0..N-1`` or scanned ``layers/layer``)."""
    heads: tuple[str, ...] = ()
    """Heads a params directory of this family may hold (``ptm.json`` ``head``)."""
    infer_head: Callable[[dict], str] | None = None
    """params tree -> head name, for trees saved without one."""
    param_groups: Callable[..., list] | None = None
    """(model_cfg, stage) -> parameter-group rules (``train/param_groups.py``): decay masks, layer-wise rates."""
    layer_of: Callable[[tuple[str, ...]], str] | None = None
    """Parameter path (keys) -> layer-group name for per-group gradient norms."""
    classifier: Callable[[Any], type] | None = None
    """finetune config -> sequence-classification objective class (GLUE and the embedded task)."""
    tasks: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    """finetune.task -> builder(cfg, model_cfg, tokenizer, eval_split, **kw) for the tasks beyond sentence
    classification that this family supports (span QA, tagging, multiple choice)."""
    prepare_finetune: Callable[..., Any] | None = None
    """(model_cfg, tokenizer) -> model_cfg before finetuning (e.g. GPT grows its vocabulary for task tokens)."""
    hf: HfConverter | None = None
    importers: dict[str, Importer] = dataclasses.field(default_factory=dict)
    """Other toolkits' weight formats it imports (format name -> :class:`Importer`; ``ptm import``)."""
    flops: Callable[[Any], Any] | None = None
    """RunConfig -> analytic FLOPs of one train step (bench/flops.py); None: XLA's count stands in."""
    synthetic_batch: Callable[..., dict] | None = None
    """(example, cfg, rng) -> a random batch in the shapes of ``example`` for ``ptm bench``."""
    capabilities: frozenset[str] = frozenset()
    """What commands may ask of it: 'causal_lm' (generate, perplexity), 'embed' (sentence vectors),
    'word_vectors' (static word vectors: neighbors, analogy, eval-vectors, vector-file export), ..."""
    task_heads: dict[str, Callable[[], type]] = dataclasses.field(default_factory=dict)
    """Finetuning head name ('encoder', 'sequence_classification', 'token_classification',
    'question_answering', 'multiple_choice') -> a function returning the Flax module class (imported lazily).
    The spine's task objectives build their model through this."""
    qa_layout: str = "question_first"
    """Span-QA feature layout (``data/tasks/squad_features.py``): 'question_first' ([CLS] q [SEP] d [SEP]) or
    'document_first' (d <sep> q <sep> <cls>)."""
    task_objectives: dict[str, Callable[[], type]] = dataclasses.field(default_factory=dict)
    """Spine task objective kind ('multiple_choice') -> the family's own objective class, where the family
    reads the task through its own input transformation (GPT's one row per option)."""
    bench_variants: dict[str, Callable[[Any], Any]] = dataclasses.field(default_factory=dict)
    """``ptm bench --mlm-head NAME`` -> wrap(objective): benchmark-only variants of the family's objective."""
    bench_corpus: Literal["synthetic", "configured"] = "synthetic"
    """What ``ptm bench``/``ptm compile`` build the objective over: a few synthetic documents, or (for examples
    that need artifacts of real text: ERNIE's knowledge units, capitalisation and sentence tasks) the configured
    corpus, prepared as ``ptm data`` prepares it (into the run's cache, reused by the run)."""
    generate: Callable[..., Any] | None = None
    """(params, model_cfg, prompts, ...) -> token ids: autoregressive decoding (``ptm generate``)."""
    perplexity: Callable[..., Any] | None = None
    """(params, model_cfg, tokenizer, file, **kw) -> dict: held-out perplexity (``ptm perplexity``)."""
    stages: Callable[..., Any] | None = None
    """(cfg: RunConfig) -> summary dict: the family's own chain of stages that ``ptm run`` runs in place of
    pretrain -> finetune when ``finetune.task`` is set (ULMFiT: general LM -> target-task LM -> classifier)."""
    tiny_preset: str | None = None
    """A preset small enough for the conformance test (``tests/test_conformance.py``)."""
    word_vectors: Callable[[Any, Any], Any] | None = None
    """(params tree, model_cfg) -> float32 [vocab_size, dim] matrix of the static word vectors the family exports
    (row i = the tokenizer's id i): ``ptm neighbors``, ``ptm analogy``, ``ptm eval-vectors`` and
    ``ptm export --format text_vectors|binary_vectors`` read it (``evaluate/word_vectors.py``,
    ``export/vector_files.py``). A family with it lists the capability 'word_vectors'."""
    word_features: Callable[..., Any] | None = None
    """(params tree, model_cfg, tokenizer, sentences: list[list[str]], *, batch_size=32) -> list of float32
    [L, n_words, D] arrays, one per sentence: the family's features of each given word at each of its L layers
    (layer 0 the context-free token representation; a subword model gives a word its first subword's vector).
    Feature-based task models, the scalar mix, probing and ``ptm compare`` read it
    (``evaluate/features.py``); a family with only ``word_vectors`` is read as one layer of static vectors.
    A family with it lists the capability 'word_features'."""
    attention_maps: Callable[..., Any] | None = None
    """(params tree, model_cfg, tokenizer, text: str) -> (tokens: list[str], float32 [layers, heads, S, S]): the
    attention probabilities of every layer and head over the family's input layout of one text (specials
    included), each row a query's distribution over the keys: ``ptm attention`` (``evaluate/attention_maps.py``).
    A family with it lists the capability 'attention_maps'."""
    word_encoder: Callable[..., Any] | None = None
    """(model_cfg, tokenizer) -> ``evaluate.features.WordEncoder``: the trunk as a differentiable function of its
    parameters giving every layer's states (with its init and input layout). ``word_features`` runs it frozen;
    a word-level task head trains it end to end with ``features.freeze_features=false``
    (``objectives/feature_tasks.py``)."""
    subword_vectors: Callable[..., Any] | None = None
    """(params tree, model_cfg, tokenizer, words: list[str]) -> float32 [len(words), dim]: the static vectors of
    words given as strings, out-of-vocabulary ones included, for a family that composes a word's vector from
    subword units and so needs the words themselves (fastText's character n-grams). ``ptm neighbors``,
    ``ptm analogy``, ``ptm eval-vectors`` and the vector-file export take the vocabulary's matrix from it in
    place of ``word_vectors`` (``evaluate/vector_commands.py``), and neighbours and analogies of a word outside
    the vocabulary are answered with it. A family with it lists the capability 'word_vectors'."""


SUBWORD_KINDS = ("wordpiece", "sentencepiece_unigram", "sentencepiece_bpe", "byte_bpe")
"""The tokenizer kinds a family accepts when it leaves ``Family.tokenizer_kinds`` empty."""
SPECIAL_NAMES = ("pad", "cls", "sep", "mask", "eos")
"""Special tokens a family may declare in ``Family.specials`` (``SpecialIds`` fields)."""


def tokenizer_kinds(family: Family) -> tuple[str, ...]:
    """The ``tokenizer.kind`` values ``family`` accepts."""
    return family.tokenizer_kinds or SUBWORD_KINDS


_TABLE: PluginTable[Family] = PluginTable("ptm_jax.families", "family", "model.family")
load_all = _TABLE.load_all
families = _TABLE.all
unregister = _TABLE.unregister


def register(family: Family) -> Family:
    """Adds ``family``; its objective names must be new (an objective names exactly one family)."""
    unknown = sorted(set(family.specials) - set(SPECIAL_NAMES))
    if unknown:
        raise ValueError(f"family {family.name!r} declares specials {unknown}; known: {', '.join(SPECIAL_NAMES)}")
    for other in _TABLE.registered().values():
        if other.name == family.name:
            continue
        clash = set(other.objectives) & set(family.objectives)
        if clash:
            raise ValueError(f"family {family.name!r} registers objective(s) {sorted(clash)} that family "
                             f"{other.name!r} already owns")
    return _TABLE.register(family)


def get(name: str) -> Family:
    return _TABLE.get(name)


def objective_names() -> dict[str, str]:
    """Pretraining objective name -> family name, over every registered family."""
    return {obj: fam.name for fam in families().values() for obj in fam.objectives}


def family_of_objective(objective: str) -> Family:
    owners = objective_names()
    if objective not in owners:
        import difflib

        close = difflib.get_close_matches(objective, list(owners), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"objective={objective!r} is not registered by any family.{hint} Known objectives: "
                          f"{', '.join(f'{o} ({f})' for o, f in sorted(owners.items()))}")
    return get(owners[objective])


def hf_family(model_type: str) -> Family:
    """The family that imports a Hugging Face folder of ``model_type`` (its ``config.json``)."""
    fams = [f for f in families().values() if f.hf is not None]
    for fam in fams:
        if model_type in fam.hf.model_types:
            return fam
    for fam in fams:
        if fam.hf.fallback:
            return fam
    raise ConfigError(f"no registered family imports Hugging Face model_type={model_type!r}; known: "
                      f"{', '.join(t for f in fams for t in f.hf.model_types)}")


def family_of_params(params: dict) -> Family | None:
    """The family whose trunk key is at the top of a params tree (None when no family claims it)."""
    for fam in families().values():
        if fam.trunk is not None and fam.trunk in params:
            return fam
    return None


def require(family: Family, hook: str, what: str) -> Any:
    """``family.<hook>``, or a ConfigError saying that this family does not support ``what``."""
    value = getattr(family, hook)
    if value is None or value == {}:
        raise ConfigError(f"model.family={family.name!r} does not support {what}")
    return value
