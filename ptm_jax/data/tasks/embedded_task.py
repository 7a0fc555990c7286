"""The offline finetuning task of `ptm run`, derived deterministically from the embedded corpus.

Task "pydoc-source": given one sentence of Python's own documentation, say whether it comes from the
language reference topics (``pydoc_data.topics``, label 1) or from a standard-library docstring (label 0).
Documents are split between train and dev by index (every 5th document of each source is dev), so no dev
sentence shares a document with a training sentence; both splits are class-balanced by deterministic
subsampling, so always answering one class scores 50%.
"""
from __future__ import annotations

import functools

import numpy as np

from ptm_jax.data.embedded import _module_documents, _topic_documents
from ptm_jax.data.tasks.glue import Example, TaskSpec, get_task

DESCRIPTION = ("pydoc-source: is this sentence from the Python language reference (pydoc_data.topics) or "
               "from a standard-library docstring? (binary, balanced; majority baseline 0.50)")
MIN_WORDS = 6


def _sentences(docs, label: int, split_every: int = 5):
    train, dev = [], []
    for i, doc in enumerate(docs):
        for s in doc:
            if len(s.split()) >= MIN_WORDS:
                (dev if i % split_every == 0 else train).append((s, label))
    return train, dev


def _balanced(pos: list, neg: list, cap: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    n = min(len(pos), len(neg), cap // 2)
    pick = lambda xs: [xs[j] for j in sorted(rng.permutation(len(xs))[:n])]  # noqa: E731
    rows = pick(pos) + pick(neg)
    order = rng.permutation(len(rows))
    return [rows[j] for j in order]


@functools.lru_cache(maxsize=2)
def embedded_task(max_train: int = 6000, max_dev: int = 1000) -> tuple[TaskSpec, list[Example], list[Example]]:
    """(spec, train, dev); built once per process (parsing the standard library takes seconds): callers copy
    the lists before changing them."""
    topic_train, topic_dev = _sentences(_topic_documents(), 1)
    mod_train, mod_dev = _sentences(_module_documents({"parse_failures": 0, "short_modules": 0}), 0)
    train = _balanced(topic_train, mod_train, max_train, seed=0)
    dev = _balanced(topic_dev, mod_dev, max_dev, seed=1)
    as_examples = lambda rows, split: [Example(f"{split}-{i}", s, None, y, i + 1)  # noqa: E731
                                       for i, (s, y) in enumerate(rows)]
    spec = get_task("sst2")  # same shape: single sentence, two classes, accuracy
    spec = TaskSpec(name="embedded", dirname="", labels=["docstring", "reference"], splits=spec.splits,
                    metrics=("accuracy",), is_pair=False, tfds_name="", tfds_text=("sentence", None))
    return spec, as_examples(train, "train"), as_examples(dev, "dev")
