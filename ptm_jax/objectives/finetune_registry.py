"""The spine's objective builders of the tasks beyond sentence classification (span QA, tagging, choice).

Each builder takes (cfg, model_cfg, tokenizer, eval_split, *, train=True, model_info=None) and returns
(objective, description). ``train=False`` (``ptm eval``): only the evaluation split is read and featurised;
what training would derive from the training split (CoNLL's label list) comes from ``model_info``, the
saved model's ptm.json (``label_names``).

``finetune.data_dir`` per task, and the files each split reads, are the task's split reader's
(``data/tasks/splits.py``, through ``data/tasks/registry.read``): SQuAD's folder, 'tfds' or
``PATH/dev-v1.1.json#fold=K/N`` (train on the articles a % N != K, evaluate on a % N == K; N runs cover every
question of the file once), CoNLL-2003's eng.train / eng.testa / eng.testb (or train/valid/test.txt, also under
iob2/; 'dev' = testa, 'test' = testb), SWAG's train.csv / val.csv / test.csv ('test' unlabelled). Evaluation
(``train=False``) reads only the split it scores.

``finetune.train_subset`` keeps the first N training examples (questions, sentences, SWAG items) after
``random.Random(finetune.subset_seed).shuffle``, as for the GLUE tasks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ptm_jax import config_loading as config_lib
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError

# ---------------------------------------------------------------------------------------------- SQuAD

def build_squad(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, version_2: bool = False,
                train: bool = True, model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.objectives.span_qa import SpanQAObjective

    f = cfg.finetune
    ver = "v2.0" if version_2 else "v1.1"
    name = "squad_v2" if version_2 else "squad"
    want_train = train
    train = tasks.read(name, f.data_dir, "train")[0] if want_train else None
    dev, source = tasks.read(name, f.data_dir, eval_split)
    if want_train and f.data_dir not in ("tfds",) and "#" not in f.data_dir:
        source = str(Path(f.data_dir))  # the folder both files come from
    if want_train:
        train = take_subset(train, f.train_subset, f.subset_seed)
    squad = config_lib.section(cfg, "squad")
    obj = SpanQAObjective(model_cfg, f, train, dev, tokenizer, version_2=version_2, name=name,
                          do_lower_case=getattr(tokenizer, "lower_case", True), squad=squad)
    if want_train:
        skipped = len(train) - obj.num_train_questions
        head = (f"{len(train)} train questions ({obj.num_train} windows"
                f"{f', {skipped} without a locatable answer skipped' if skipped else ''}) / ")
    else:
        head = ""
    desc = (f"SQuAD {ver}: {head}{len(dev)} dev "
            f"questions ({len(obj.dev_features)} windows) from {source}; max_seq_length {f.max_seq_length}, "
            f"squad.doc_stride {squad.doc_stride}, squad.max_query_length {squad.max_query_length}")
    return obj, desc


# ---------------------------------------------------------------------------------------------- CoNLL

def saved_labels(model_info: dict | None, task: str) -> list[str]:
    """The label list a finetuned model was trained with (its ptm.json ``label_names``)."""
    names = (model_info or {}).get("label_names")
    if not names:
        raise ConfigError(f"finetune.task={task}: the model's ptm.json has no 'label_names', so the tag of "
                          f"each output cannot be known without the training file; evaluate a model saved by "
                          f"`ptm finetune` (<run>/finetune-{task}/best)")
    n = (model_info or {}).get("num_labels")
    if n is not None and int(n) != len(names):
        raise ConfigError(f"the model's ptm.json lists {len(names)} label_names but num_labels={n}")
    return [str(x) for x in names]


def tagging_section(cfg, model_info: dict | None = None):
    """The ``[tagging]`` settings: a kept model's own (its ptm.json ``tagging``: ``ptm eval`` rebuilds the output
    layer it was trained with), else the run's."""
    from ptm_jax.data.tasks.sections import TaggingConfig

    saved = (model_info or {}).get("tagging")
    return TaggingConfig(**saved) if saved else config_lib.section(cfg, "tagging")


def build_conll(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
                model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.data.tasks.conll import label_list
    from ptm_jax.objectives.tagging import TaggingObjective

    f = cfg.finetune
    want_train = train
    if eval_split not in ("dev", "test"):
        raise ConfigError(f"CoNLL-2003 evaluation split must be 'dev' (testa) or 'test' (testb), got "
                          f"{eval_split!r}")
    train, train_source = tasks.read("conll2003", f.data_dir, "train") if want_train else (None, "")
    held, held_source = tasks.read("conll2003", f.data_dir, eval_split)
    source = f"{train_source} -> {held_source}" if want_train and f.data_dir != "tfds" else held_source
    if want_train:
        labels = label_list(train)  # of the whole training file: a subset keeps the same label ids
        train = take_subset(train, f.train_subset, f.subset_seed)
    else:
        labels = saved_labels(model_info, "conll2003")
    obj = TaggingObjective(model_cfg, f, train, held, tokenizer, labels=labels, name="conll2003",
                           tagging=tagging_section(cfg, None if want_train else model_info))
    cut = f", {obj.dev_truncated_words} {eval_split} words cut by max_seq_length (predicted O)" \
        if obj.dev_truncated_words else ""
    counts = f"{len(train)} train / " if want_train else ""
    desc = (f"CoNLL-2003 NER: {counts}{len(held)} {eval_split} sentences, "
            f"{obj.num_labels} labels, from {source}{cut}")
    return obj, desc


# ---------------------------------------------------------------------------------------------- SWAG

def build_swag(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
               model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.objectives.multiple_choice import MultipleChoiceObjective

    f = cfg.finetune
    if eval_split not in ("dev", "test"):
        raise ConfigError(f"SWAG evaluation split must be 'dev' or 'test', got {eval_split!r}")
    want_train = train
    train = take_subset(tasks.read("swag", f.data_dir, "train")[0], f.train_subset, f.subset_seed) \
        if want_train else None
    held, held_file = tasks.read("swag", f.data_dir, eval_split)
    folder = Path(held_file).parent
    from ptm_jax.families import registry

    # the family's own objective, e.g. its input transformation
    own = registry.get(model_cfg.family).finetuning.task_objectives.get("multiple_choice")
    objective_cls = config_lib.bind_sections(own() if own is not None else MultipleChoiceObjective, cfg)
    obj = objective_cls(model_cfg, f, train, held, tokenizer, name="swag")
    counts = f"{len(train)} train / " if want_train else ""
    source = folder if want_train else held_file
    return obj, f"SWAG: {counts}{len(held)} {eval_split} examples, 4 options, from {source}"


def build_squad_v2(cfg, model_cfg, tokenizer, eval_split: str = "dev", **kw) -> tuple[Any, str]:
    return build_squad(cfg, model_cfg, tokenizer, eval_split, version_2=True, **kw)


TASK_BUILDERS: dict[str, Callable[..., tuple[Any, str]]] = {
    "squad": build_squad,
    "squad_v2": build_squad_v2,
    "conll2003": build_conll,
    "swag": build_swag,
}
"""The spine's builders (``data/tasks/registry.TaskDecl.builder`` names them), for ``Finetuning.tasks``."""

