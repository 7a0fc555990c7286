"""TextCNN / TextRNN / TextRCNN and the BiLSTM tagger (models/text_heads.py): shapes, padding, a numpy reference."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.models.text_heads import FeatureClassifier, FeatureTagger, TextCNN, WordInputs

LENGTHS = np.array([5, 1, 3])
VOCAB, DIM = 11, 8


def _ids(pad_to: int, fill: int) -> tuple[np.ndarray, np.ndarray]:
    """The same three rows (lengths 5, 1, 3) right-padded to ``pad_to`` with word id ``fill`` under mask 0."""
    rng = np.random.default_rng(0)
    words = rng.integers(1, VOCAB, size=(3, 5))
    ids = np.full((3, pad_to), fill, np.int32)
    mask = np.zeros((3, pad_to), np.int32)
    for r, n in enumerate(LENGTHS):
        ids[r, :n], mask[r, :n] = words[r, :n], 1
    return ids, mask


@pytest.mark.parametrize("head,width", [("textcnn", 300), ("textrnn", 12), ("textrcnn", 6)])
def test_sentence_head_shapes_and_padding_never_changes_the_logits(head, width):
    model = FeatureClassifier(WordInputs(VOCAB, DIM, name="inputs"), head, num_labels=2, hidden=6)
    ids, mask = _ids(6, 0)
    params = jax.jit(model.init)(jax.random.key(0), {"ids": ids, "mask": mask})
    pooled_width = params["params"]["output"]["kernel"].value.shape[0]
    assert pooled_width == width  # 3 widths x 100 maps; 2 x hidden; the projection
    apply = jax.jit(model.apply)
    logits = apply(params, {"ids": ids, "mask": mask})
    assert logits.shape == (3, 2)
    longer, long_mask = _ids(13, 7)  # more padding, and a real word id in the padded positions
    again = apply(params, {"ids": longer, "mask": long_mask})
    np.testing.assert_allclose(np.asarray(again), np.asarray(logits), rtol=1e-6, atol=1e-6)
    assert float(jnp.std(logits)) > 0  # rows differ: the head reads the words


def test_tagger_logits_at_words_ignore_padding():
    model = FeatureTagger(WordInputs(VOCAB, DIM, name="inputs"), num_labels=5, hidden=6)
    ids, mask = _ids(6, 0)
    params = jax.jit(model.init)(jax.random.key(1), {"ids": ids, "mask": mask})
    apply = jax.jit(model.apply)
    logits = np.asarray(apply(params, {"ids": ids, "mask": mask}))
    assert logits.shape == (3, 6, 5)
    longer, long_mask = _ids(10, 3)
    again = np.asarray(apply(params, {"ids": longer, "mask": long_mask}))
    for r, n in enumerate(LENGTHS):
        np.testing.assert_allclose(again[r, :n], logits[r, :n], rtol=1e-6, atol=1e-6)


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
