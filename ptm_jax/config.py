"""Typed run configuration: one dataclass tree, TOML presets in ``configs/``, ``key=value`` overrides (read by
``ptm_jax.config_loading``: ``load_config``, ``to_dict``, ``section``).

A preset is a TOML file whose tables mirror the dataclasses below (``[model]``, ``[train]``, ...). A preset
may start from another with ``extends = "bert_base"``. Any field can be overridden on the command line as
``section.field=value``; values are parsed as Python literals (``ast.literal_eval``, never ``eval``) and
checked against the field's annotated type. A misspelt key is an error that names the closest valid keys.

The ``[model]`` and ``[data]`` sections are per family: ``model.family`` when given, else the
family registering ``objective``, picks their dataclasses (``Family.model_config``, ``Pretraining.data_config``;
:func:`section_types`), which hold only that family's fields; each section checks itself (``validate(where)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ptm_jax.errors import ConfigError


@dataclass
class TokenizerConfig:
    kind: Literal["wordpiece", "sentencepiece_unigram", "sentencepiece_bpe", "byte_bpe", "word", "char"] = "wordpiece"
    """A subword kind, or 'word': a word vocabulary with counts (``data/word_vocab.py``) for the families that
    read whole words, or 'char': a character vocabulary (``data/char_vocab.py``) for character-level language
    models (``Pretraining.tokenizer_kinds``)."""
    vocab_file: str = ""
    """A BERT vocab.txt, a SentencePiece .model, (byte_bpe) a GPT-2 vocab.json with merges.txt beside it, or
    (word) a vocab.tsv. Empty: train one on the corpus into the output dir."""
    vocab_size: int = 8000
    """Size of a vocabulary trained on the corpus (ignored when vocab_file is set); word (and char): the most
    entries kept (the specials included), the most frequent first."""
    min_count: int = 1
    """word: a word enters the vocabulary only when the sample holds it at least this often (word2vec.c
    min_count); the others read as <unk>. char: a character, likewise."""
    lower_case: bool = True
    limit_alphabet: int = 1000
    """wordpiece: a trained vocabulary keeps at most this many distinct characters (0: all), the most frequent
    (Hugging Face's WordPieceTrainer default, 1000); the others read as [UNK]. Chinese text needs several thousand
    (about 3,500 characters cover 99% of modern Chinese): raise it for a corpus with Chinese."""
    train_sample_bytes: int = 100_000_000
    """Training a vocabulary reads at most about this many bytes of the corpus: 1 MiB windows spread evenly
    over it, the same on every process and run (``chunks.sample_sentences``); 0 = the whole corpus."""


@dataclass
class DataConfig:
    """The ``[data]`` fields every family's stream reads: the corpus, its cache, the sequence length, the
    held-out documents. A family that needs more subclasses it (``Pretraining.data_config``)."""

    corpus: str = "embedded"
    """'embedded' (Python's own docs), comma-separated paths/globs, 'tfds:NAME[:SPLIT]', or a Hugging Face
    dataset 'hf:NAME[:CONFIG][:SPLIT]' (a local save_to_disk / Parquet / JSON-lines folder or file, or a hub name).
    Files may name their language: ``en=wiki/en/*.txt,zh=wiki/zh.txt`` (``data/languages.py``)."""
    language_alpha: float = 0.7
    """A corpus whose sources name their languages is sampled with mBERT's exponential smoothing, language i
    taking the share p_i^alpha / sum_j p_j^alpha (p_i its share of the corpus), both for the tokenizer's training
    sample and for the pretraining stream: 1 keeps the corpus's proportions, 0 makes them equal."""
    text_field: str = ""
    """tfds: and hf: corpora: the field holding each record's text (empty: 'text', or the only string field)."""
    format: Literal["auto", "lines", "paragraphs"] = "auto"
    """lines: one sentence per line, blank line between documents. paragraphs: prose, split into sentences."""
    doc_max_sentences: int = 256
    """paragraphs format: a document is cut at a paragraph end once it reaches this many sentences."""
    max_line_bytes: int = 1_000_000
    cache_dir: str = ""
    """Tokenized-corpus cache (local or gs://). Empty: <output_dir>/cache."""
    cache_chunk_bytes: int = 32 * 1024 * 1024
    """The token cache is built in chunks of about this many corpus bytes, cut at document boundaries and
    numbered independently of the process count (process p builds chunks c % P == p): any host count reuses it."""
    max_seq_length: int = 128
    eval_documents: int = 4
    """Documents held out (by index, from the end of the corpus) for periodic evaluation."""
    seed: int = 12345

    def validate(self, where: str = "data") -> None:
        """Checks the fields against each other; ``where`` is the section's name in messages."""
        if self.max_seq_length < 8:
            raise ConfigError(f"{where}.max_seq_length={self.max_seq_length} is too short (minimum 8)")
        if not 0.0 <= self.language_alpha <= 1.0:
            raise ConfigError(f"{where}.language_alpha={self.language_alpha} must be in [0, 1] (mBERT used 0.7)")


@dataclass
class MaskedDataConfig(DataConfig):
    """The ``[data]`` base of the families that predict a bounded number of positions per sequence (BERT's
    masked LM: google-research/bert create_pretraining_data.py; XLNet's permutation LM, whose ``num_predict``
    this is: zihangdai/xlnet data_utils.py)."""

    max_predictions_per_seq: int = 20

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        if not 0 < self.max_predictions_per_seq <= self.max_seq_length:
            raise ConfigError(f"{where}.max_predictions_per_seq must be in (0, max_seq_length], got "
                              f"{self.max_predictions_per_seq}")


@dataclass
class ParamGroupConfig:
    """One parameter-group rule (``[[train.param_groups]]`` tables in TOML; ptm_jax/train/param_groups.py):
    the parameters whose path ('params/bert/encoder/layers_3/attention/query/kernel'; a scanned stack:
    '.../layers/layer/...') contains a match of ``pattern`` (a regular expression) get these multipliers; the
    multipliers of every matching rule multiply."""

    pattern: str = ""
    lr: float = 1.0
    """Learning-rate multiplier."""
    weight_decay: float = 1.0
    """Weight-decay multiplier (0: no decay)."""
    frozen: bool = False
    """No update and no optimizer state for these parameters."""
    start_step: int = 0
    """Frozen before this step (gradual unfreezing, ULMFiT Sec. 3.3): no gradient into clipping, no optimizer-state
    update and no update until then, as fastai's requires_grad=False (``train/param_groups.py``)."""


OPTIMIZERS = Literal["adamw", "adam", "sgd", "adagrad", "lamb"]


class _EvalRows:
    """``eval_rows()`` of a stage's config (``TrainConfig``: held-out evaluation; ``FinetuneConfig``: the dev set)."""
    eval_batch_size: int
    batch_size: int

    def eval_rows(self) -> int:
        """The evaluation's global batch: ``eval_batch_size``, or ``batch_size`` where it is 0."""
        return self.eval_batch_size or self.batch_size


@dataclass
class TrainConfig(_EvalRows):
    """Optimisation and loop. AdamW as in google-research/bert optimization.py."""

    batch_size: int = 32
    """Global batch size (all hosts, all microbatches)."""
    steps: int = 1000
    learning_rate: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-6
    adam_bias_correction: bool = False
    """False: BERT's AdamWeightDecayOptimizer (no bias correction); True: optax/torch AdamW moments."""
    lr_decay: Literal["bert", "from_peak", "constant", "slanted_triangular"] = "bert"
    """After warmup, the learning rate falls linearly to 0 at `steps`. 'bert': the line starts at step 0
    (google-research/bert polynomial_decay), so the rate drops at the end of warmup; 'from_peak': the line
    starts at the peak at the end of warmup (transformers' get_linear_schedule_with_warmup); 'constant': no decay;
    'slanted_triangular': ULMFiT's (Howard & Ruder 2018 eq. 3), rising over warmup_steps from learning_rate /
    ratio, ratio = 1 / min_lr_ratio (32 when min_lr_ratio is 0)."""
    lr_decay_power: float = 1.0
    """Power of the 'bert' and 'from_peak' decays (polynomial decay): peak x (1 - progress) ** power; 1 is linear,
    NVIDIA's LAMB recipe for BERT uses 0.5 (PolyWarmUpScheduler)."""
    optimizer: OPTIMIZERS = "adamw"
    """adamw: BERT's (decoupled decay; adam_bias_correction picks the moments); adam: Adam with bias correction;
    sgd: plain SGD (word2vec); adagrad (GloVe, ELMo); lamb: LAMB (You et al. 2019; BERT at batch 32k-64k): adamw's
    update scaled per parameter by the trust ratio |param| / |update|, none for the parameters without weight
    decay (NVIDIA's recipe). For adam/sgd/adagrad weight_decay is an L2 term on the gradient (torch's
    weight_decay). ptm_jax/train/optim.py."""
    init_from: str = ""
    """A run (or its stage folder) whose latest checkpoint starts this stage when it has none of its own: the
    parameters and the optimizer's moments are loaded, the step, the schedule and the data restart at 0 (BERT's
    phase 2 from phase 1, as NVIDIA's recipe resumes its LAMB state). The model and optimizer must be the same."""
    min_lr_ratio: float = 0.0
    """The learning rate never falls below min_lr_ratio x learning_rate after warmup (word2vec.c: 1e-4)."""
    adagrad_initial_accumulator: float = 0.1
    """adagrad: starting value of the squared-gradient sums (optax/TF 0.1; glove.c 1.0)."""
    param_groups: list[ParamGroupConfig] = field(default_factory=list)
    """Rules for parameter groups (lr and weight-decay multipliers, freezing), after the model's own (BERT: no
    decay on LayerNorm and biases). In TOML: [[train.param_groups]] tables; on the command line
    train.param_groups='[{"pattern": "embeddings", "frozen": True}]'."""
    clip_norm: float = 1.0
    grad_accum_steps: int = 1
    log_every: int = 10
    eval_every: int = 200
    eval_batches: int = 8
    """Held-out batches per evaluation of a pretraining stage, each of ``eval_batch_size`` rows."""
    eval_batch_size: int = 0
    """Global batch of the held-out evaluation; 0: ``batch_size``. Evaluation keeps no gradients, optimizer state or
    backward activations, so several times the training batch usually fits, in fewer, larger steps; it must divide
    over the mesh as ``batch_size`` does. A language model's held-out stream split into parallel rows
    (AWD-LSTM, Transformer-XL) reads a different context with a different row count."""
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    async_checkpoints: bool = True
    checkpoint_compression: bool = True
    """zstd over the checkpoint's arrays (orbax's default). Trained float tables barely compress: fastText's
    800 MB state wrote in 2.3-3.1 s compressed (702 MB) and 0.6 s not (775 MB) on the 2-core CPU of
    docs/benchmarks.md, so the static-embedding configs turn it off. A checkpoint loads either way."""
    seed: int = 0
    progress_bar: bool = True
    donate_state: bool = True
    """Donate the train state's buffers to the jitted step (outputs reuse them: one copy of the state in memory)."""
    prefetch_batches: int = 2
    """Global batches a background thread builds and places on the devices ahead of the step (0 = in the loop)."""
    steps_per_call: int = 1
    """Train steps per compiled call (``train/multi_step.py``): the host stacks this many batches, transfers them
    at once and dispatches one program for them, for models whose step is shorter than the host's work per step
    (the static embeddings on a GPU; on a CPU the scan around the fused kernel made fastText slower, so 1 there).
    The parameters are those of single steps. Logging, evaluation and checkpoints happen at the end of the call
    that reaches their step (so at a later step when ``log_every``, ``eval_every`` or ``checkpoint_every`` is
    not a multiple of it)."""
    metrics_one_step_late: bool = True
    """Read a step's logged metrics and non-finite counter while the next step runs (the host never waits for
    the device); false reads them right after their own step."""
    max_nonfinite_steps: int = 5
    """A non-finite loss/gradient skips the update; this many in a row stop the run (0 = never stop)."""
    spike_factor: float = 0.0
    """Loss-spike rollback (PaLM Sec. 5.1): a loss above spike_factor x the median of the last spike_window
    losses restores the latest checkpoint and skips the batches since then. 0 = off."""
    spike_window: int = 20
    max_rollbacks: int = 3
    """Rollbacks allowed in one run before a spike becomes a NumericalError."""
    peak_tflops: float = 0.0
    """Per-device peak TFLOP/s the train records' ``mfu`` is measured against; 0: the dense bf16 peak of the
    device kind (``bench/flops.py``), and no ``mfu`` where it is unknown (CPU)."""
    profile_steps: str = ""
    """'START:COUNT': a jax.profiler trace of COUNT steps from step START (1 = the first step, compilation
    included) into ``<stage dir>/profile``, for XProf / TensorBoard's profile plugin. Empty: none."""


@dataclass
class MeshConfig:
    """Device mesh over the logical parallelism axes; -1 on one axis takes the remaining devices."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1
    device_order: str = "default"
    """'default': JAX's device order (jax.make_mesh). 'interleaved': consecutive mesh positions alternate
    between processes (process 0's device 0, process 1's device 0, ...), so no process holds a contiguous
    block of the batch, as on TPU pods; for testing that nothing assumes host-ordered meshes."""


@dataclass
class FinetuneConfig(_EvalRows):
    """Task finetuning, what every job shares (google-research/bert run_classifier.py / run_squad.py defaults).
    What one task or one family reads is in a section of its own (``data/tasks/sections.py``: ``[squad]``,
    ``[packing]``, ``[gpt_finetune]``); a job's settings in the section of its name (``jobs/registry.py``)."""

    job: str = "task"
    """The finetuning job (``ptm_jax/jobs``): 'task' (one task, finetune.task, with the family's task head),
    'mtdnn' (multi-task learning over mtdnn.tasks, then per-task finetuning), 'consert' (contrastive sentence
    embeddings), 'features' (a classic head over word features, features.head) or 'ulmfit' (ULMFiT's target-task
    LM, then its classifier on finetune.task). A job's own settings are in the config section of its name
    ([mtdnn], [consert], [features], [ulmfit])."""
    task: str = "embedded"
    """'embedded' (derived from the embedded corpus), a GLUE task (sst2, cola, mrpc, stsb, qqp, mnli, qnli,
    rte, wnli), 'squad', 'squad_v2', 'conll2003' or 'swag' (``data/tasks/registry.py``); the task of the 'task'
    and 'features' jobs. Empty: no finetuning stage in `ptm run`."""
    data_dir: str = ""
    """GLUE directory (holding SST-2/, CoLA/, ...), SQuAD JSON folder, CoNLL-2003 folder, SWAG CSV folder, or
    'tfds'. SQuAD with no train file: 'PATH/dev-v1.1.json#fold=K/N' trains on the articles a % N != K of
    that file and evaluates on a % N == K."""
    init: str = ""
    """Pretrained weights: a run output dir, params dir or Hugging Face folder. Empty: this run's pretraining."""
    max_seq_length: int = 128
    batch_size: int = 32
    eval_batch_size: int = 0
    """Global batch of the dev-set evaluations during finetuning and of ``ptm eval``; 0: ``batch_size``. Every
    example is scored alone under its own mask, so the metrics do not depend on it beyond float rounding; larger
    batches take fewer, larger steps. It must divide over the (finetuning) mesh as ``batch_size`` does."""
    devices_per_host: int = 0
    """Finetune (and evaluate) on a sub-mesh: this many devices of every host (process), 0 = all of them. A
    v5e-256 (64 hosts x 4 chips) that pretrains on 256 chips finetunes in the same ``ptm run`` on 64 with 1, where
    a batch of 64 divides; an 8-GPU host with 4 on 4 GPUs. ``mesh`` then shapes those devices."""
    epochs: float = 3.0
    learning_rate: float = 5e-5
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    layerwise_lr_decay: float = 1.0
    """lr of layer l = lr * decay**(num_layers - l); embeddings get decay**(num_layers + 1). 1.0 = off."""
    optimizer: OPTIMIZERS = "adamw"
    """As train.optimizer, for the finetuning stage."""
    param_groups: list[ParamGroupConfig] = field(default_factory=list)
    """As train.param_groups, for the finetuning stage (train.param_groups do not apply to it)."""
    adapter: str = ""
    """A parameter-efficient adapter (``ptm_jax/adapters``): 'lora' (low-rank updates of frozen weights, Hu et al.
    2021; its settings in the [lora] section). Empty: the whole model trains."""
    classifier_dropout: float = 0.1
    """Dropout before the task head (Kim 2014's TextCNN: 0.5, ``features`` job)."""
    train_subset: int = 0
    """Keep the first N training examples after random.Random(subset_seed).shuffle (0 = all)."""
    subset_seed: int = 0
    eval_every: int = 0
    """Evaluate (and keep the best checkpoint by the task metric) every N steps; 0 = once per epoch."""
    seed: int = 0
    shuffle: bool = True
    """Train on a fresh permutation of the rows each epoch, keyed on (seed, epoch); false keeps the row order in
    every epoch: the file order after train_subset (packed rows: the packing's own seeded order)."""
    keep_head: bool = False
    """Start from the task head stored in finetune.init (e.g. a Hugging Face BertForSequenceClassification) instead
    of a fresh one; its shapes must fit the task."""
    from_scratch: bool = False
    """The no-pretraining control: the network of finetune.init (its architecture and tokenizer) trained from a
    random initialisation, not from its weights, with everything else the same. Its stages are named
    ``finetune-<task>-from-scratch``; ``ptm compare`` runs it beside every finetuned cell."""
    scratch_baseline: bool = False
    """`ptm run`: after the finetuning stage, the same stage from random initialisation (finetune.from_scratch),
    its figure printed beside the finetuned one and written to summary.json as ``from_scratch`` (on in the main
    job's preset, bert_small)."""


@dataclass
class RunConfig:
    name: str = "run"
    output_dir: str = "runs/default"
    objective: str = "mlm_nsp"
    """A pretraining objective registered by a family (``Pretraining.objectives``); it names the family it trains."""
    model: Any = None
    """The family's ``[model]`` dataclass (``Family.model_config``); None: its defaults, the family being
    the objective's."""
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: Any = None
    """The family's ``[data]`` dataclass (``Pretraining.data_config``, else :class:`DataConfig`); None: its defaults."""
    train: TrainConfig = field(default_factory=TrainConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    plugins: dict[str, Any] = field(default_factory=dict)
    """Sections owned by plug-ins, by section name: an adapter's (``[lora]``: ``ptm_jax/adapters/registry.py``), a
    finetuning job's (``[mtdnn]``), a task's or a family's finetuning (``[squad]``: ``data/tasks/sections.py``),
    read into the owner's dataclass. Written back as top-level sections (:func:`to_dict`); read them with
    :func:`section`, which gives the plug-in's defaults for a section the run does not set."""

    def __post_init__(self) -> None:
        if self.model is None or self.data is None:
            model_cls, data_cls = section_types(getattr(self.model, "family", None), self.objective)
            self.model = model_cls() if self.model is None else self.model
            self.data = data_cls() if self.data is None else self.data


def section_types(family: str | None, objective: str) -> tuple[type, type]:
    """The ``[model]`` and ``[data]`` dataclasses of a run: those of ``family`` (``model.family``) when given,
    else of the family that registers ``objective`` (``Family.model_config``; ``Pretraining.data_config`` or the
    shared :class:`DataConfig`)."""
    from ptm_jax.families import registry

    fam = registry.get(family) if family else registry.family_of_objective(objective)
    return fam.model_config, fam.pretraining.data_config or DataConfig
