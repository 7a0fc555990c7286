"""Non-finite loss/gradients skip the update and are counted; K in a row stop the run with a clear error."""
import dataclasses

import jax
import numpy as np
import pytest
from corpus_util import word_source

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import NumericalError
from ptm_jax.families.bert.mlm_nsp import MlmNspObjective
from ptm_jax.parallel.feed import to_global
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import compile_objective, fit
from ptm_jax.train.metrics import read_metrics
from ptm_jax.train.step import layer_group


class PoisonedObjective(MlmNspObjective):
    """Masked-LM weights of NaN in batches whose first example id is in ``poison`` -> non-finite loss."""

    def __init__(self, *args, poison_every: int = 0, **kw):
        super().__init__(*args, **kw)
        self.poison_every = poison_every

    def train_batches(self, start, global_batch, pi, pc):
        for i, b in enumerate(super().train_batches(start, global_batch, pi, pc)):
            step = start // global_batch + i
            if self.poison_every and step % self.poison_every == self.poison_every - 1 or self.poison_every == 1:
                b = dict(b, masked_lm_weights=np.full_like(b["masked_lm_weights"], np.nan))
            yield b


@pytest.fixture(scope="module")
def parts(shared_data):
    cfg = load_config("bert_tiny", ["model.vocab_size=512", "train.batch_size=8", "train.steps=6",
                                    "train.eval_every=0", "train.checkpoint_every=2", "train.log_every=1",
                                    "train.max_nonfinite_steps=3"])
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", 512)
    return cfg, source, special


def test_nonfinite_step_is_skipped_and_counted(parts):
    cfg, source, special = parts
    obj = PoisonedObjective(cfg, source, None, special, poison_every=2)
    mesh = make_mesh(MeshConfig(2, 2, 2))
    compiled = compile_objective(obj, cfg.train, mesh)
    state = compiled.init_fn(jax.random.key(0))
    batches = obj.train_batches(0, 8, 0, 1)
    clean, _ = compiled.train_step(state, to_global(next(batches), mesh, compiled.batch_keys), jax.random.key(1))
    before = jax.tree.map(np.asarray, clean.params)
    assert int(clean.nonfinite_total) == 0  # (the state is donated to the next step)
    after, m = compiled.train_step(clean, to_global(next(batches), mesh, compiled.batch_keys), jax.random.key(1))
    assert not np.isfinite(float(m["loss"])) and int(m["nonfinite_streak"]) == 1 and int(after.nonfinite_total) == 1
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after.params)):
        np.testing.assert_array_equal(a, np.asarray(b))
    assert int(after.step) == 2


@pytest.mark.parametrize("late", [True, False])
def test_k_consecutive_nonfinite_steps_stop_with_last_good_checkpoint(parts, tmp_path, late):
    cfg, source, special = parts
    obj = PoisonedObjective(cfg, source, None, special, poison_every=1)
    tcfg = dataclasses.replace(cfg.train, metrics_one_step_late=late)
    with pytest.raises(NumericalError, match=r"3 consecutive steps up to step 3 .*last good checkpoint is step"):
        fit(obj, tcfg, make_mesh(MeshConfig(8, 1, 1)), tmp_path / "stage")


def test_nonfinite_last_steps_of_a_run_stop_it_in_both_modes(parts, tmp_path):
    """The run ends on its 3rd non-finite step in a row: read one step late, that counter comes after the loop."""
    cfg, source, special = parts
    for late in (True, False):
        obj = PoisonedObjective(cfg, source, None, special, poison_every=1)
        tcfg = dataclasses.replace(cfg.train, steps=3, metrics_one_step_late=late)
        with pytest.raises(NumericalError, match=r"3 consecutive steps up to step 3 "):
            fit(obj, tcfg, make_mesh(MeshConfig(8, 1, 1)), tmp_path / str(late))


def test_metrics_read_one_step_late_or_at_once_are_the_same_rows(parts, tmp_path):
    """train.metrics_one_step_late only moves when the host reads a step's metrics, not what it logs."""
    cfg, source, special = parts
    rows = {}
    for late in (True, False):
        tcfg = dataclasses.replace(cfg.train, steps=4, metrics_one_step_late=late, progress_bar=False)
        fit(MlmNspObjective(cfg, source, None, special), tcfg, make_mesh(MeshConfig(8, 1, 1)), tmp_path / str(late))
        rows[late] = [r for r in read_metrics(tmp_path / str(late) / "metrics.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in rows[True]] == [r["step"] for r in rows[False]] == [1, 2, 3, 4]
    for a, b in zip(rows[True], rows[False]):
        for key in ("loss", "mlm_loss", "nsp_loss", "grad_norm", "learning_rate"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-6, err_msg=f"step {a['step']} {key}")


def test_group_norms_name_layers_embeddings_and_heads():
    from jax.tree_util import DictKey as K
    assert layer_group((K("params"), K("bert"), K("encoder"), K("layers_3"), K("x"))) == "layers_3"
    assert layer_group((K("params"), K("bert"), K("embeddings"), K("word_embeddings"))) == "embeddings"
    assert layer_group((K("params"), K("mlm"), K("transform"))) == "mlm"
