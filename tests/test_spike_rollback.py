"""Loss-spike rollback (PaLM Sec. 5.1): a loss above spike_factor x the recent median restores the
latest checkpoint and skips the batches since then; the data cursor in later checkpoints accounts for them.

The spike is real training on a real stream: the batches with the given data index have their MLM loss scaled
by 10 (the objective's own loss, so the gradients and the update of that step are those of a spike).
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus_util import word_source

from ptm_jax.checkpoint import Checkpointer
from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import NumericalError
from ptm_jax.families.bert.mlm_nsp import MlmNspObjective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.loop import fit

BATCH = 8


class SpikyObjective(MlmNspObjective):
    """Batches whose global index is in ``spikes`` carry spike=1: their loss is multiplied by 10.
    ``drop``: batch indices left out of the stream altogether (the reference without the bad batches)."""

    def __init__(self, *args, spikes=(), drop=(), **kw):
        super().__init__(*args, **kw)
        self.spikes, self.drop = set(spikes), set(drop)

    def example_batch(self, batch_size):
        return {**super().example_batch(batch_size), "spike": np.zeros((batch_size,), np.float32)}

    def train_batches(self, start, global_batch, pi, pc):
        index = start // global_batch
        for b in super().train_batches(start, global_batch, pi, pc):
            if index not in self.drop:
                yield {**b, "spike": np.full((len(b["input_ids"]),), float(index in self.spikes), np.float32)}
            index += 1

    def loss(self, params, batch, rng, normalizers, train):
        batch = dict(batch)
        spike = batch.pop("spike", None)
        loss, terms = super().loss(params, batch, rng, normalizers, train)
        if spike is not None:
            loss = loss * (1.0 + 9.0 * jnp.max(spike))
        return loss, terms


@pytest.fixture(scope="module")
def parts(shared_data):
    cfg = load_config("bert_tiny", ["model.vocab_size=512", f"train.batch_size={BATCH}", "train.steps=10",
                                    "train.eval_every=0", "train.checkpoint_every=2", "train.log_every=1",
                                    "train.spike_factor=3.0", "train.spike_window=3", "train.max_rollbacks=2",
                                    "train.async_checkpoints=false", "train.progress_bar=false"])
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", 512)
    return cfg, source, special


def test_spike_rolls_back_to_the_last_checkpoint_skips_its_batch_and_equals_a_run_without_it(parts, tmp_path):
    cfg, source, special = parts
    mesh = make_mesh(MeshConfig(8, 1, 1))
    got = fit(SpikyObjective(cfg, source, None, special, spikes={6}), cfg.train, mesh, tmp_path / "spiky")
    records = [json.loads(x) for x in (tmp_path / "spiky/metrics.jsonl").read_text().splitlines()]
    rollbacks = [r for r in records if r["split"] == "rollback"]
    assert [(r["step"], r["to_step"], r["skipped_batches"]) for r in rollbacks] == [(7, 6, 1)]
    meta = Checkpointer(tmp_path / "spiky/checkpoints").restore_meta(10)
    assert meta["cursor"] == 11 * BATCH and meta["rollbacks"] == 1

    plain = cfg.train.__class__(**{**cfg.train.__dict__, "spike_factor": 0.0})
    ref = fit(SpikyObjective(cfg, source, None, special, drop={6}), plain, mesh, tmp_path / "reference")
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
               for a, b in zip(jax.tree.leaves(got.state.params), jax.tree.leaves(ref.state.params)))
    assert got.step == ref.step == 10
    assert diff <= 1e-6, diff


def test_spikes_beyond_max_rollbacks_stop_the_run_with_a_clear_error(parts, tmp_path):
    cfg, source, special = parts
    obj = SpikyObjective(cfg, source, None, special, spikes=set(range(6, 40)))
    with pytest.raises(NumericalError, match=r"loss spike at step \d+ .* 2 rollbacks already"):
        fit(obj, cfg.train, make_mesh(MeshConfig(8, 1, 1)), tmp_path / "stage")
