"""TextCNN / TextRNN / TextRCNN and the BiLSTM tagger (models/text_heads.py): shapes, padding, a numpy reference."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from ptm_jax.models.text_heads import (
    FeatureClassifier,
    FeatureTagger,
    TextCNN,
    WordInputs,
)

LENGTHS = np.array([5, 1, 3])
VOCAB, DIM = 11, 8


def _batch() -> dict[str, np.ndarray]:
    """Three rows (lengths 5, 1, 3) padded to 9 with id 0, then the same rows with random real word ids in the
    padded positions (mask 0 there too)."""
    rng = np.random.default_rng(0)
    words = rng.integers(1, VOCAB, size=(3, 5))
    ids = np.zeros((6, 9), np.int32)
    mask = np.zeros((6, 9), np.int32)
    for r, n in enumerate(LENGTHS):
        ids[r, :n] = ids[r + 3, :n] = words[r, :n]
        ids[r + 3, n:] = rng.integers(1, VOCAB, size=9 - n)
        mask[r, :n] = mask[r + 3, :n] = 1
    return {"ids": ids, "mask": mask}


@pytest.mark.parametrize("head,width", [("textcnn", 300), ("textrnn", 12), ("textrcnn", 6), ("bilstm", 12)])
def test_head_shapes_and_padding_never_changes_the_logits(head, width):
    inputs = WordInputs(VOCAB, DIM, name="inputs")
    model = (FeatureTagger(inputs, num_labels=5, hidden=6) if head == "bilstm"
             else FeatureClassifier(inputs, head, num_labels=2, hidden=6))
    batch = _batch()
    params = jax.jit(model.init)(jax.random.key(0), batch)
    assert params["params"]["output"]["kernel"].value.shape == (width, 5 if head == "bilstm" else 2)
    logits = np.asarray(jax.jit(model.apply)(params, batch))  # 3 widths x 100 maps; 2 x hidden; the projection
    if head == "bilstm":
        assert logits.shape == (6, 9, 5)
        for r, n in enumerate(LENGTHS):
            np.testing.assert_allclose(logits[r + 3, :n], logits[r, :n], rtol=1e-6, atol=1e-6)
    else:
        assert logits.shape == (6, 2)
        np.testing.assert_allclose(logits[3:], logits[:3], rtol=1e-6, atol=1e-6)
    assert float(np.std(logits[:3, 0])) > 1e-4  # the rows differ: the head reads the words


def test_textcnn_max_over_time_equals_numpy_wide_convolution():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 7, DIM)).astype(np.float32)
    mask = (np.arange(7)[None, :] < LENGTHS[:, None]).astype(np.int32)
    model = TextCNN(widths=(3, 4, 5), maps=4)
    params = jax.jit(model.init)(jax.random.key(2), x, mask)
    got = np.asarray(jax.jit(model.apply)(params, x, mask))
    want = []
    for r, n in enumerate(LENGTHS):
        row = []
        for h in (3, 4, 5):
            conv = params["params"][f"conv_{h}"]
            k, b = np.asarray(conv["kernel"].value), np.asarray(conv["bias"].value)  # [h, D, maps], [maps]
            padded = np.concatenate([np.zeros((h - 1, DIM)), x[r, :n], np.zeros((h - 1, DIM))])
            windows = [np.einsum("hd,hdm->m", padded[s:s + h], k) + b for s in range(n + h - 1)]
            row.append(np.max(np.maximum(np.stack(windows), 0.0), axis=0))
        want.append(np.concatenate(row))
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5, atol=1e-5)
    assert got.shape == (3, 12)
