"""Packed BERT classification rows (packing.pack_examples): every example once, attention kept inside each
example, and logits and loss equal to the unpacked rows on real SST-2 and MRPC dev examples."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig
from ptm_jax.config_loading import load_config
from ptm_jax.data.tasks.glue import get_task, read_glue
from ptm_jax.data.tasks.packing import one_per_row, pack_examples
from ptm_jax.data.tasks.sections import PackingConfig
from ptm_jax.errors import ConfigError
from ptm_jax.objectives.classification import SequenceClassificationObjective
from ptm_jax.objectives.packed_classification import PackedSequenceClassificationObjective

LEN, K = 64, 8


def _objectives(shared_data, minilm_tok, task, n):
    dev, _ = read_glue(shared_data / "glue", task, "dev")
    dev = dev[:n]
    model_cfg = dataclasses.replace(load_config("bert_tiny").model, vocab_size=minilm_tok.vocab_size,
                                    hidden_dropout=0.0, attention_dropout=0.0)
    fcfg = FinetuneConfig(max_seq_length=LEN, classifier_dropout=0.0)
    spec = get_task(task)
    plain = SequenceClassificationObjective(model_cfg, spec, dev, dev, minilm_tok, fcfg)
    packed = PackedSequenceClassificationObjective(model_cfg, spec, dev, dev, minilm_tok, fcfg,
                                                   packing=PackingConfig(pack_examples=True, max_examples_per_row=K))
    return plain, packed


def test_every_example_sits_in_exactly_one_row_with_its_own_tokens(shared_data, minilm_tok):
    plain, packed = _objectives(shared_data, minilm_tok, "sst2", 872)
    rows, flat = packed.train, plain.train
    n = len(flat["labels"])
    assert packed.num_examples == n == 872 and packed.num_train == len(rows["input_ids"])
    assert rows["weights"].sum() == n and (rows["pack_ids"].max(axis=1) <= K).all()
    seen = np.zeros(n, int)
    lengths = flat["input_mask"].sum(axis=1)
    by_tokens = {tuple(flat["input_ids"][i, :lengths[i]]): i for i in range(n)}
    for r in range(len(rows["input_ids"])):
        for slot in np.flatnonzero(rows["weights"][r]):
            at = rows["cls_positions"][r, slot]
            span = np.flatnonzero(rows["pack_ids"][r] == slot + 1)
            assert span[0] == at and (np.diff(span) == 1).all()
            assert (rows["position_ids"][r, span] == np.arange(len(span))).all()
            i = by_tokens[tuple(rows["input_ids"][r, span])]
            seen[i] += 1
            assert rows["labels"][r, slot] == flat["labels"][i]
    assert (seen == 1).all()
    fill = rows["input_mask"].sum() / rows["input_mask"].size
    print(f"SST-2 dev: {n} examples in {packed.num_train} rows of {LEN}; fill {fill:.3f} "
          f"(unpacked: {flat['input_mask'].mean():.3f})")
    assert packed.num_train < 0.45 * n and fill > 0.9


@pytest.mark.parametrize("task", ["sst2", "mrpc"])
def test_packed_logits_and_loss_equal_each_example_alone(shared_data, minilm_tok, task):
    plain, packed = _objectives(shared_data, minilm_tok, task, 96)
    params = plain.init(jax.random.key(0), plain.example_batch(2))
    flat = {k: jnp.asarray(v) for k, v in plain.train.items()}
    rows = {k: jnp.asarray(v) for k, v in packed.train.items()}
    alone = np.asarray(plain._logits(params, flat, None, False))                  # [N, 2]
    together = np.asarray(packed._logits(params, rows, None, False))              # [R, K, 2]
    lengths = plain.train["input_mask"].sum(axis=1)
    index = {tuple(plain.train["input_ids"][i, :lengths[i]]): i for i in range(len(lengths))}
    compared = 0
    for r in range(len(packed.train["input_ids"])):
        for slot in np.flatnonzero(packed.train["weights"][r]):
            span = packed.train["pack_ids"][r] == slot + 1
            i = index[tuple(packed.train["input_ids"][r, span])]
            np.testing.assert_allclose(together[r, slot], alone[i], atol=2e-5)
            compared += 1
    assert compared == 96
    l_plain, _ = plain.loss(params, flat, None, plain.normalizers(flat), False)
    l_packed, _ = packed.loss(params, rows, None, packed.normalizers(rows), False)
    assert abs(float(l_plain) - float(l_packed)) < 1e-5
    # evaluation rows hold one example each, in order: predictions line up with the dev labels
    dev = {k: jnp.asarray(v) for k, v in packed.dev.items()}
    np.testing.assert_allclose(np.asarray(packed.predict(params, dev)["logits"]), alone, atol=2e-5)


def test_one_per_row_keeps_order_and_packing_is_seeded(shared_data, minilm_tok):
    plain, _ = _objectives(shared_data, minilm_tok, "sst2", 200)
    single = one_per_row(plain.train, K)
    assert (single["cls_positions"] == 0).all() and (single["weights"][:, 0] == 1).all()
    assert (single["weights"][:, 1:] == 0).all()
    np.testing.assert_array_equal(single["input_ids"], plain.train["input_ids"] * plain.train["input_mask"])
    a, b, c = (pack_examples(plain.train, K, s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    assert a["input_ids"].shape != c["input_ids"].shape or not np.array_equal(a["input_ids"], c["input_ids"])


def test_packing_is_refused_for_other_families_and_bad_slot_counts():
    from ptm_jax.train.finetune import _classifier_objective

    gpt = load_config("gpt_tiny", ["packing.pack_examples=true"])
    with pytest.raises(ConfigError, match="pack_examples=false"):
        _classifier_objective(gpt, gpt.model)
    with pytest.raises(ConfigError, match="max_examples_per_row"):
        load_config("bert_tiny", ["packing.max_examples_per_row=0"])
