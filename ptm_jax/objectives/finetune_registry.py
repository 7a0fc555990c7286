"""The spine's objective builders of the tasks beyond sentence classification (span QA, tagging, choice).

Each builder takes (cfg, model_cfg, tokenizer, eval_split, *, train=True, model_info=None) and returns
(objective, description). ``train=False`` (``ptm eval``): only the evaluation split is read and featurised;
what training would derive from the training split (CoNLL's label list) comes from ``model_info``, the
saved model's ptm.json (``label_names``).

``finetune.data_dir`` per task:

- ``squad`` / ``squad_v2``: a folder holding train-v1.1.json and dev-v1.1.json (train-v2.0.json and
  dev-v2.0.json), or 'tfds' (``squad/v1.1`` / ``squad/v2.0``). Article folds of one file:
  ``PATH/dev-v1.1.json#fold=K/N`` trains on the articles a with a % N != K and evaluates on those with
  a % N == K (a = article index in file order), so N runs cover every question of the file exactly once
  (used where only the dev file is at hand; merge the N predictions.json files and score them together).
- ``conll2003``: a folder with eng.train / eng.testa / eng.testb (original IOB1, converted to IOB2) or
  train.txt / valid.txt / test.txt (also under iob2/), or 'tfds'. Evaluation split 'dev' = testa,
  'test' = testb.
- ``swag``: a folder with train.csv / val.csv / test.csv of the SWAG release; 'test' is unlabelled.

Evaluation (``train=False``) needs only the split it reads: dev-v1.1.json / dev-v2.0.json, eng.testa
(valid.txt) or eng.testb (test.txt), val.csv or test.csv.

``finetune.train_subset`` keeps the first N training examples (questions, sentences, SWAG items) after
``random.Random(finetune.subset_seed).shuffle``, as for the GLUE tasks.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from ptm_jax import config as config_lib
from ptm_jax.data.tasks.registry import take_subset
from ptm_jax.errors import ConfigError

_FOLD = re.compile(r"^fold=(\d+)/(\d+)$")
CONLL_LAYOUTS = (("eng.train", "eng.testa", "eng.testb"), ("train.txt", "valid.txt", "test.txt"),
                 ("iob2/train.txt", "iob2/valid.txt", "iob2/test.txt"))


def parse_fold(data_dir: str) -> tuple[str, int, int] | None:
    """'path#fold=K/N' -> (path, K, N); None without a '#' suffix."""
    if "#" not in data_dir:
        return None
    path, _, spec = data_dir.rpartition("#")
    m = _FOLD.match(spec.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)) or int(m.group(2)) < 2:
        raise ConfigError(f"finetune.data_dir={data_dir!r}: the suffix after '#' must be fold=K/N with "
                          f"N >= 2 and 0 <= K < N (e.g. '{path}#fold=0/2')")
    return path, int(m.group(1)), int(m.group(2))


def article_folds(examples: list, k: int, n: int) -> tuple[list, list]:
    """(train, eval): questions of articles a with a % n != k, and with a % n == k. Articles are runs of
    consecutive questions with one title, in file order."""
    train, held = [], []
    article, title = -1, object()
    for e in examples:
        if e.title != title:
            article, title = article + 1, e.title
        (held if article % n == k else train).append(e)
    return train, held


def _need_data_dir(f, what: str) -> str:
    if not f.data_dir:
        raise ConfigError(f"finetune.task={f.task}: set finetune.data_dir (--data-dir) to {what}")
    return f.data_dir


# ---------------------------------------------------------------------------------------------- SQuAD

def build_squad(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, version_2: bool = False,
                train: bool = True, model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.data.tasks.squad import read_squad, squad_from_tfds
    from ptm_jax.objectives.span_qa import SpanQAObjective

    f = cfg.finetune
    ver = "v2.0" if version_2 else "v1.1"
    name = "squad_v2" if version_2 else "squad"
    if eval_split != "dev":
        raise ConfigError(f"finetune.task={f.task}: SQuAD has no public labelled test split; evaluate "
                          f"--split dev")
    data_dir = _need_data_dir(f, f"a folder with train-{ver}.json and dev-{ver}.json, "
                                 f"'PATH/dev-{ver}.json#fold=K/N' or 'tfds'")
    fold = parse_fold(data_dir)
    want_train = train
    if data_dir == "tfds":
        train = squad_from_tfds(f"squad/{ver}", "train")[0] if want_train else None
        dev, _ = squad_from_tfds(f"squad/{ver}", "validation")
        source = f"tfds squad/{ver}"
    elif fold is not None:
        path, k, n = fold
        if not Path(path).is_file():
            raise ConfigError(f"finetune.data_dir={data_dir!r}: {path} is not a file; the fold form names "
                              f"one SQuAD JSON file, e.g. '.../dev-{ver}.json#fold=0/2'")
        examples, _ = read_squad(path)
        train, dev = article_folds(examples, k, n)
        train = train if want_train else None
        source = f"{path}, article fold {k} of {n} (train: the other folds)"
    else:
        folder = Path(data_dir)
        train_file, dev_file = folder / f"train-{ver}.json", folder / f"dev-{ver}.json"
        if not want_train and not dev_file.is_file():
            raise ConfigError(f"finetune.data_dir={data_dir!r}: {dev_file} does not exist; evaluation reads "
                              f"dev-{ver}.json from this folder (or use 'tfds')")
        if want_train and not train_file.is_file():
            hint = (f"; only {dev_file.name} is here: set finetune.data_dir='{dev_file}#fold=0/2' (and "
                    f"#fold=1/2) to train and evaluate on article folds of the dev file" if dev_file.is_file()
                    else "")
            raise ConfigError(f"finetune.data_dir={data_dir!r}: {train_file} does not exist; download SQuAD "
                              f"{ver} (train-{ver}.json, dev-{ver}.json) into it or use 'tfds'{hint}")
        train = read_squad(train_file)[0] if want_train else None
        dev, _ = read_squad(dev_file)
        source = str(dev_file) if not want_train else str(folder)
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

def conll_files(data_dir: str, eval_split: str, train: bool = True) -> tuple[Path | None, Path]:
    """(train file, evaluation file) of the first complete layout found in ``data_dir``; ``train=False``:
    (None, evaluation file), the training file need not exist."""
    col = {"dev": 1, "test": 2}.get(eval_split)
    if col is None:
        raise ConfigError(f"CoNLL-2003 evaluation split must be 'dev' (testa) or 'test' (testb), got {eval_split!r}")
    folder = Path(data_dir)
    for layout in CONLL_LAYOUTS:
        if (not train or (folder / layout[0]).is_file()) and (folder / layout[col]).is_file():
            return (folder / layout[0] if train else None), folder / layout[col]
    names = " or ".join("/".join((layout[0], layout[col])[1 - train:]) for layout in CONLL_LAYOUTS)
    raise ConfigError(f"finetune.data_dir={data_dir!r}: no CoNLL-2003 files for split {eval_split!r}; "
                      f"expected {names} in it, or use 'tfds'")


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


def build_conll(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
                model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.data.tasks.conll import conll_from_tfds, label_list, read_conll
    from ptm_jax.objectives.tagging import TaggingObjective

    f = cfg.finetune
    want_train = train
    data_dir = _need_data_dir(f, "the CoNLL-2003 folder (eng.train/eng.testa/eng.testb) or 'tfds'")
    if data_dir == "tfds":
        if eval_split not in ("dev", "test"):
            raise ConfigError(f"CoNLL-2003 evaluation split must be 'dev' or 'test', got {eval_split!r}")
        train, held = (conll_from_tfds("train") if want_train else None), conll_from_tfds(eval_split)
        source = "tfds conll2003"
    else:
        train_file, eval_file = conll_files(data_dir, eval_split, train=want_train)
        train = read_conll(train_file)[0] if want_train else None
        held, _ = read_conll(eval_file)
        source = f"{train_file} -> {eval_file}" if want_train else str(eval_file)
    if want_train:
        labels = label_list(train)  # of the whole training file: a subset keeps the same label ids
        train = take_subset(train, f.train_subset, f.subset_seed)
    else:
        labels = saved_labels(model_info, "conll2003")
    obj = TaggingObjective(model_cfg, f, train, held, tokenizer, labels=labels, name="conll2003")
    cut = f", {obj.dev_truncated_words} {eval_split} words cut by max_seq_length (predicted O)" \
        if obj.dev_truncated_words else ""
    counts = f"{len(train)} train / " if want_train else ""
    desc = (f"CoNLL-2003 NER: {counts}{len(held)} {eval_split} sentences, "
            f"{obj.num_labels} labels, from {source}{cut}")
    return obj, desc


# ---------------------------------------------------------------------------------------------- SWAG

def build_swag(cfg, model_cfg, tokenizer, eval_split: str = "dev", *, train: bool = True,
               model_info: dict | None = None) -> tuple[Any, str]:
    from ptm_jax.objectives.multiple_choice import MultipleChoiceObjective, read_swag

    f = cfg.finetune
    folder = Path(_need_data_dir(f, "the SWAG folder (train.csv, val.csv, test.csv)"))
    if eval_split not in ("dev", "test"):
        raise ConfigError(f"SWAG evaluation split must be 'dev' or 'test', got {eval_split!r}")
    want_train = train
    train = take_subset(read_swag(folder / "train.csv"), f.train_subset, f.subset_seed) if want_train else None
    held_file = folder / ("val.csv" if eval_split == "dev" else "test.csv")
    held = read_swag(held_file, labelled=eval_split == "dev")
    from ptm_jax.families import registry

    # the family's own objective, e.g. its input transformation
    own = registry.get(model_cfg.family).finetuning.task_objectives.get("multiple_choice")
    objective_cls = config_lib.bind_sections(own() if own is not None else MultipleChoiceObjective, cfg)
    obj = objective_cls(model_cfg, f, train, held, tokenizer, name="swag")
    counts = f"{len(train)} train / " if want_train else ""
    return obj, f"SWAG: {counts}{len(held)} {eval_split} examples, 4 options, from {folder if want_train else held_file}"


def build_squad_v2(cfg, model_cfg, tokenizer, eval_split: str = "dev", **kw) -> tuple[Any, str]:
    return build_squad(cfg, model_cfg, tokenizer, eval_split, version_2=True, **kw)


TASK_BUILDERS: dict[str, Callable[..., tuple[Any, str]]] = {
    "squad": build_squad,
    "squad_v2": build_squad_v2,
    "conll2003": build_conll,
    "swag": build_swag,
}
"""The spine's builders (``data/tasks/registry.TaskDecl.builder`` names them), for ``Finetuning.tasks``."""

