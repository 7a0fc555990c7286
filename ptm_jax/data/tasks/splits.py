"""Every finetuning task's split reader: ``(task, data_dir, split, where) -> (examples, source)``.

``TaskDecl.reader`` (``data/tasks/registry.py``) names one of these for each task of ``FINETUNE_TASKS`` (and the
ranking tasks, through their GLUE task), and ``registry.read`` calls it: the single-task job, MT-DNN, the heads over
word features and ULMFiT's target-task LM read their examples there. ``data_dir`` is what ``finetune.data_dir``
names for the task (``TaskDecl.data``), ``split`` is 'train', 'dev' or 'test', ``where`` the config field an error
names. ``source`` says where the examples came from, for the run's description.

- GLUE: :func:`ptm_jax.data.tasks.registry.glue_rows` (a GLUE folder or 'tfds'; MNLI's matched sets).
- the embedded task: built from the embedded corpus (``data_dir`` unused).
- SQuAD v1.1 / v2.0 (google-research/bert run_squad.py's files): ``train-vX.json`` / ``dev-vX.json`` in a folder,
  'tfds', or 'PATH/dev-vX.json#fold=K/N' (train on the articles a % N != K of that file, evaluate on a % N == K).
- CoNLL-2003: the first of :data:`CONLL_LAYOUTS` that holds the split's file (eng.train / eng.testa / eng.testb,
  ...), or 'tfds'.
- SWAG (rowanz/swagaf): train.csv, val.csv, test.csv (unlabelled).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from ptm_jax.errors import ConfigError

_FOLD = re.compile(r"^fold=(\d+)/(\d+)$")
CONLL_LAYOUTS = (("eng.train", "eng.testa", "eng.testb"), ("train.txt", "valid.txt", "test.txt"),
                 ("iob2/train.txt", "iob2/valid.txt", "iob2/test.txt"))
"""CoNLL-2003 file names for (train, dev, test), in the order they are looked for."""
_COLUMN = {"train": 0, "dev": 1, "test": 2}


def _split_index(task: str, split: str) -> int:
    if split not in _COLUMN:
        raise ConfigError(f"{task}: split must be 'train', 'dev' or 'test', got {split!r}")
    return _COLUMN[split]


def glue(task: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    from ptm_jax.data.tasks.registry import glue_rows

    return glue_rows(data_dir, task, split, where), data_dir


def embedded(task: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    from ptm_jax.data.tasks.embedded_task import DESCRIPTION, embedded_task

    if split not in ("train", "dev"):
        raise ConfigError(f"the embedded task has the splits 'train' and 'dev', not {split!r}")
    _, train, dev = embedded_task()
    return list(train if split == "train" else dev), DESCRIPTION


def parse_fold(data_dir: str, where: str = "finetune.data_dir") -> tuple[str, int, int] | None:
    """'path#fold=K/N' -> (path, K, N); None without a '#' suffix."""
    if "#" not in data_dir:
        return None
    path, _, spec = data_dir.rpartition("#")
    m = _FOLD.match(spec.strip())
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)) or int(m.group(2)) < 2:
        raise ConfigError(f"{where}={data_dir!r}: the suffix after '#' must be fold=K/N with "
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


def _squad_file(path: str) -> tuple:
    """The questions of one SQuAD file, parsed once for both folds of a ``#fold=K/N`` run (train and eval); a file
    rewritten in between (another size or mtime) is read again."""
    stat = Path(path).stat()
    return _parsed_squad(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _parsed_squad(path: str, size: int, mtime_ns: int) -> tuple:
    from ptm_jax.data.tasks.squad import read_squad

    return tuple(read_squad(path)[0])


def squad(task: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    from ptm_jax.data.tasks.squad import read_squad, squad_from_tfds

    ver = "v2.0" if task == "squad_v2" else "v1.1"
    if split not in ("train", "dev"):
        raise ConfigError(f"finetune.task={task}: SQuAD has no public labelled test split; evaluate --split dev")
    if not data_dir:
        raise ConfigError(f"finetune.task={task}: set {where} (--data-dir) to a folder with train-{ver}.json and "
                          f"dev-{ver}.json, 'PATH/dev-{ver}.json#fold=K/N' or 'tfds'")
    if data_dir == "tfds":
        return squad_from_tfds(f"squad/{ver}", "train" if split == "train" else "validation")[0], f"tfds squad/{ver}"
    fold = parse_fold(data_dir, where)
    if fold is not None:
        path, k, n = fold
        if not Path(path).is_file():
            raise ConfigError(f"{where}={data_dir!r}: {path} is not a file; the fold form names one SQuAD JSON "
                              f"file, e.g. '.../dev-{ver}.json#fold=0/2'")
        train, held = article_folds(_squad_file(path), k, n)
        return (train if split == "train" else held), f"{path}, article fold {k} of {n} (train: the other folds)"
    folder = Path(data_dir)
    train_file, dev_file = folder / f"train-{ver}.json", folder / f"dev-{ver}.json"
    if split == "dev" and not dev_file.is_file():
        raise ConfigError(f"{where}={data_dir!r}: {dev_file} does not exist; evaluation reads dev-{ver}.json "
                          f"from this folder (or use 'tfds')")
    if split == "train" and not train_file.is_file():
        hint = (f"; only {dev_file.name} is here: set {where}='{dev_file}#fold=0/2' (and #fold=1/2) to train and "
                f"evaluate on article folds of the dev file" if dev_file.is_file() else "")
        raise ConfigError(f"{where}={data_dir!r}: {train_file} does not exist; download SQuAD {ver} "
                          f"(train-{ver}.json, dev-{ver}.json) into it or use 'tfds'{hint}")
    path = train_file if split == "train" else dev_file
    return read_squad(path)[0], str(path)


def conll_file(data_dir: str, split: str, where: str = "finetune.data_dir") -> Path:
    """The file of ``split`` in the first layout of :data:`CONLL_LAYOUTS` that holds it."""
    col = _split_index("conll2003", split)
    folder = Path(data_dir)
    for layout in CONLL_LAYOUTS:
        if (folder / layout[col]).is_file():
            return folder / layout[col]
    raise ConfigError(f"{where}={data_dir!r}: no CoNLL-2003 file for split {split!r}; expected "
                      f"{' or '.join(layout[col] for layout in CONLL_LAYOUTS)} in it, or use 'tfds'")


def conll(task: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    from ptm_jax.data.tasks.conll import conll_from_tfds, read_conll

    _split_index(task, split)
    if not data_dir:
        raise ConfigError(f"finetune.task={task}: set {where} (--data-dir) to the CoNLL-2003 folder "
                          f"(eng.train/eng.testa/eng.testb) or 'tfds'")
    if data_dir == "tfds":
        return conll_from_tfds(split), "tfds conll2003"
    path = conll_file(data_dir, split, where)
    return read_conll(path)[0], str(path)


def swag(task: str, data_dir: str, split: str, where: str = "finetune.data_dir") -> tuple[list, str]:
    from ptm_jax.objectives.multiple_choice import read_swag

    _split_index(task, split)
    if not data_dir:
        raise ConfigError(f"finetune.task={task}: set {where} (--data-dir) to the SWAG folder (train.csv, val.csv, "
                          "test.csv)")
    path = Path(data_dir) / {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}[split]
    return read_swag(path, labelled=split != "test"), str(path)
