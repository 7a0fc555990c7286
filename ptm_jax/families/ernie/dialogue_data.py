"""Dialogue-LM examples through tf.data (ERNIE 1.0, Sun et al. 2019 Sec. 3.3): multi-turn query/response rows
with dialogue roles, BERT's masking over the turns, and the real/fake response label.

Example ``i`` of the stream (training): a Philox generator keyed on (seed, i) (numpy ``default_rng([seed, i,
STREAM])``) picks an ending turn uniformly among every turn that is not its dialogue's first; the example holds
that turn and as many of the turns before it in its dialogue as fit, each turn cut to its first
``(max_seq_length - 3) // 2`` tokens, laid out ``[CLS] T1 [SEP] T2 [SEP] ... Tk [SEP]``. With probability
``data.fake_response_prob`` the last turn is replaced by a turn drawn uniformly from the other dialogues (label 1,
fake; 0 real), keeping the role of the replaced turn. ``segment_ids`` carry the roles (0 query, 1 response;
[CLS] takes the first turn's role, each [SEP] its turn's). Evaluation takes every ending turn of the held-out
dialogues once, in order. Masking is BERT's (``data/pretraining/masking.py``: every token of the turns is a
candidate, ``round(masked_lm_prob * length)`` of them up to ``max_predictions_per_seq``, 80/10/10), keyed on
(seed, example index) like every other stream, so the examples depend on the index alone: resumable at any step,
the same for any host count.
"""
from __future__ import annotations


import numpy as np
import tensorflow as tf

from ptm_jax.data.pretraining import masking
from ptm_jax.data.pretraining.row_dataset import rows_dataset
from ptm_jax.data.pretraining.source import SpecialIds
from ptm_jax.families.ernie.dialogue import DialogueSource

STREAM = 7


def example(src: DialogueSource, responses: np.ndarray, index: int, seed: int, length: int, fake_prob: float,
            train: bool, special: SpecialIds) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(ids [L] int32 unpadded, roles [L] int32, fake label, turns) of example ``index``."""
    rng = np.random.default_rng([seed, index, STREAM])
    end = int(responses[rng.integers(len(responses))] if train else responses[index % len(responses)])
    d = int(src.dialogue_of(end))
    cap = (length - 3) // 2
    fake = int(rng.random() < fake_prob)
    last = src.turn(end)[:cap]
    if fake:
        lo, hi = int(src.turn_first[d]), int(src.turn_first[d + 1])
        other = int(rng.integers(src.num_turns - (hi - lo)))
        other += (hi - lo) if other >= lo else 0
        last = src.turn(other)[:cap]
    turns, roles = [last], [int(src.role[end])]
    room = length - 2 - len(last)
    for t in range(end - 1, int(src.turn_first[d]) - 1, -1):
        ids = src.turn(t)[:cap]
        if len(ids) + 1 > room:
            break
        turns.insert(0, ids)
        roles.insert(0, int(src.role[t]))
        room -= len(ids) + 1
    ids = [special.cls]
    role = [roles[0]]
    for t, r in zip(turns, roles):
        ids.extend(t.tolist() + [special.sep])
        role.extend([r] * (len(t) + 1))
    return np.asarray(ids, np.int32), np.asarray(role, np.int32), fake, len(turns)


def dialogue_dataset(src: DialogueSource, special: SpecialIds, cfg, *, seed: int, start_index: int,
                     global_batch: int, process_index: int = 0, process_count: int = 1,
                     repeat: bool = True, rows: np.ndarray | None = None, grouped: bool = False) -> tf.data.Dataset:
    """This process's batches: input_ids, input_mask, segment_ids (the roles) [rows, L]; masked_lm_positions,
    masked_lm_ids, masked_lm_weights [rows, P]; next_sentence_labels [rows] (1 = fake response);
    num_turns [rows]; example_id [rows]. ``rows``: the rows of each global batch in place of a share.
    ``grouped=True``: an element holds ``steps_per_item`` consecutive batches (``numpy_steps`` splits them)."""
    L = cfg.max_seq_length
    responses = src.responses()

    def examples(first: int, count: int) -> dict[str, np.ndarray]:
        ids = np.full((count, L), special.pad, np.int32)
        role = np.zeros((count, L), np.int32)
        fake, turns, lens = (np.zeros(count, np.int32) for _ in range(3))
        for r in range(count):
            x, ro, fake[r], turns[r] = example(src, responses, first + r, seed, L, cfg.fake_response_prob, repeat,
                                               special)
            ids[r, :len(x)], role[r, :len(x)], lens[r] = x, ro, len(x)
        return {"ids": ids, "role": role, "seq_len": lens, "fake": fake, "turns": turns,
                "index": np.arange(first, first + count, dtype=np.int64)}

    dtypes = {"ids": np.int32, "role": np.int32, "seq_len": np.int32, "fake": np.int32, "turns": np.int32,
              "index": np.int64}
    shapes = {k: (L,) if k in ("ids", "role") else () for k in dtypes}
    ds = rows_dataset(examples, dtypes, shapes, start_index=start_index, global_batch=global_batch,
                      process_index=process_index, process_count=process_count, rows=rows, grouped=grouped,
                      total_batches=None if repeat else len(responses) // global_batch)

    def build(batch):
        ids, seq_len = batch["ids"], batch["seq_len"]
        pos = tf.range(L)[None, :]
        candidates = (pos < seq_len[:, None]) & tf.not_equal(ids, special.cls) & tf.not_equal(ids, special.sep)
        masked = masking.mask_tokens(ids, seq_len, seq_len, masking.mask_uniforms(seed, batch["index"], L),
                                     special, masked_lm_prob=cfg.masked_lm_prob,
                                     max_predictions=cfg.max_predictions_per_seq, candidates=candidates)
        return {"input_ids": masked["input_ids"], "input_mask": tf.cast(pos < seq_len[:, None], tf.int32),
                "segment_ids": batch["role"], "masked_lm_positions": masked["masked_lm_positions"],
                "masked_lm_ids": masked["masked_lm_ids"], "masked_lm_weights": masked["masked_lm_weights"],
                "next_sentence_labels": batch["fake"], "num_turns": batch["turns"], "example_id": batch["index"]}

    ds = ds.map(tf.autograph.experimental.do_not_convert(build), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
