"""XLNet sequence classification / regression (Yang et al. 2019 Sec. 3.3; zihangdai/xlnet run_classifier.py).

Finetuning drops the query stream: the content stream reads ``A <sep> [B <sep>] <cls>`` with segment ids
0 (A and its <sep>), 1 (B and its <sep>) and 2 (<cls>); the classifier reads the <cls> state, the last real
token (rows are right-padded, ``input_mask`` 1 = real token). Metrics and prediction files are the BERT
path's (``ptm_jax.objectives.classification``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ptm_jax.families.xlnet.config import XlnetConfig
from ptm_jax.data.tasks.features import pad_rows, truncate_pair
from ptm_jax.data.tasks.glue import Example
from ptm_jax.errors import ConfigError
from ptm_jax.objectives.classification import SequenceClassificationObjective


def xlnet_inputs(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_len: int
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token and segment ids of ``A <sep> [B <sep>] <cls>`` per example, truncated as BERT's pairs."""
    if max_len < 3 + (pairs is not None):
        raise ConfigError(f"finetune.max_seq_length={max_len} is too short for XLNet's input layout")
    sep, cls = tokenizer.sep_id, tokenizer.cls_id
    a_ids = tokenizer.encode_batch(list(texts))
    b_ids = tokenizer.encode_batch(list(pairs)) if pairs is not None else None
    ids, segs = [], []
    for i, a in enumerate(a_ids):
        if b_ids is None:
            a = list(a[: max_len - 2])
            ids.append(np.asarray(a + [sep, cls], np.int32))
            segs.append(np.asarray([0] * (len(a) + 1) + [2], np.int32))
            continue
        la, lb = truncate_pair(len(a), len(b_ids[i]), max_len - 3)
        a, b = list(a[:la]), list(b_ids[i][:lb])
        ids.append(np.asarray(a + [sep] + b + [sep, cls], np.int32))
        segs.append(np.asarray([0] * (la + 1) + [1] * (lb + 1) + [2], np.int32))
    return ids, segs


def featurize(examples: Sequence[Example], tokenizer, max_len: int, regression: bool) -> dict[str, np.ndarray]:
    pairs = [e.text_b or "" for e in examples] if any(e.text_b is not None for e in examples) else None
    ids, segs = xlnet_inputs(tokenizer, [e.text_a for e in examples], pairs, max_len)
    labels = [(-1 if e.label is None else e.label) for e in examples]
    return {"input_ids": pad_rows(ids, max_len), "segment_ids": pad_rows(segs, max_len),
            "input_mask": pad_rows([np.ones(len(x), np.int32) for x in ids], max_len),
            "labels": np.asarray(labels, np.float32 if regression else np.int32),
            "weights": np.ones(len(examples), np.float32)}


class XLNetClassificationObjective(SequenceClassificationObjective):
    def build_model(self, model_cfg: XlnetConfig):
        from ptm_jax.families.xlnet.model import XLNetForSequenceClassification

        return XLNetForSequenceClassification(model_cfg, self.num_labels, self.fcfg.classifier_dropout)

    def featurize(self, examples: Sequence[Example], tokenizer) -> dict[str, np.ndarray]:
        return featurize(examples, tokenizer, self.fcfg.max_seq_length, self.regression)
