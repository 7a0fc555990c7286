"""What a finetuning run starts from: the pretrained trunk always, the checkpoint's task head with
finetune.keep_head (a Hugging Face BertForSequenceClassification here), and the training order
(finetune.shuffle: a seeded permutation per epoch, or the file order)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ptm_jax.errors import ConfigError  # noqa: E402
from ptm_jax.export import params as params_lib  # noqa: E402
from ptm_jax.families.bert import hf as hf_bert  # noqa: E402
from ptm_jax.families.bert.task_heads import BertForSequenceClassification  # noqa: E402
from ptm_jax.objectives.task_data import shuffled_stream  # noqa: E402
from ptm_jax.train.pretrained import merge_encoder as _merge_encoder  # noqa: E402

SHAPE = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
             max_position_embeddings=16)


def _hf_dir(tmp_path, cls_name: str, **extra):
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(transformers.BertConfig(**SHAPE, **extra))
    model.save_pretrained(tmp_path / cls_name)
    (tmp_path / cls_name / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(60)) + "\n")
    return tmp_path / cls_name


def _fresh(cfg, num_labels: int):
    ids = jnp.zeros((1, 8), jnp.int32)
    import flax.linen as nn

    return nn.meta.unbox(BertForSequenceClassification(cfg, num_labels).init(jax.random.key(7), ids, ids, ids))


def _flat(tree):
    return {k: np.asarray(v) for k, v in params_lib.flatten(tree).items()}


def test_keep_head_starts_from_the_checkpoint_classifier_and_default_draws_a_fresh_one(tmp_path):
    params, cfg, _, _ = hf_bert.import_hf(_hf_dir(tmp_path, "BertForSequenceClassification", num_labels=3))
    fresh = _fresh(cfg, 3)
    kept = _flat(_merge_encoder(params, "bert", keep_head=True, where="hf")(fresh)["params"])
    default = _flat(_merge_encoder(params, "bert")(fresh)["params"])
    want, initial = _flat(params), _flat(fresh["params"])
    assert set(kept) == set(want) == set(default)
    for name in want:
        np.testing.assert_array_equal(kept[name], want[name], err_msg=name)
        if name.startswith("classifier/"):
            np.testing.assert_array_equal(default[name], initial[name], err_msg=name)
            assert np.abs(default[name] - want[name]).max() > 1e-3 or not want[name].any()
        else:
            np.testing.assert_array_equal(default[name], want[name], err_msg=name)


def test_keep_head_errors_name_the_missing_or_misfit_head(tmp_path):
    encoder, cfg, _, _ = hf_bert.import_hf(_hf_dir(tmp_path, "BertModel"))
    with pytest.raises(ConfigError, match=r"keep_head=true but enc-dir has no 'classifier'.*keep_head=false"):
        _merge_encoder(encoder, "bert", keep_head=True, where="enc-dir")(_fresh(cfg, 2))
    three, cfg, _, _ = hf_bert.import_hf(_hf_dir(tmp_path, "BertForSequenceClassification", num_labels=3))
    partial = {**three, "classifier": {"dense": {"kernel": three["classifier"]["dense"]["kernel"]}}}
    with pytest.raises(ConfigError, match=r"'classifier/dense' lacks bias .*keep_head=false"):
        _merge_encoder(partial, "bert", keep_head=True)(_fresh(cfg, 3))
    with pytest.raises(ConfigError, match=r"'classifier/dense/(kernel|bias)' does not fit the finetuning model: "
                                          r"\((16, )?3,?\) vs \((16, )?2,?\)"):
        _merge_encoder(three, "bert", keep_head=True, where="hf")(_fresh(cfg, 2))


@pytest.mark.parametrize("processes", [1, 2])
def test_training_order_is_the_file_order_without_shuffle_and_a_permutation_with_it(processes):
    n, batch = 10, 4
    for shuffle in (False, True):
        rows = []
        streams = [shuffled_stream(n, 3, 0, batch, p, processes, shuffle=shuffle) for p in range(processes)]
        for _ in range(5):  # 20 rows: two epochs
            rows.extend(np.concatenate([next(s) for s in streams]).tolist())
        epochs = [rows[:n], rows[n:]]
        assert [sorted(e) for e in epochs] == [list(range(n))] * 2
        if shuffle:
            assert epochs[0] != list(range(n)) and epochs[0] != epochs[1]
        else:
            assert epochs == [list(range(n))] * 2
