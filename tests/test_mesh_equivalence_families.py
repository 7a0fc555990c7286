"""GPT (causal LM) and XLNet (permutation LM) give the same losses on one device and on the meshes
(8,1,1), (2,2,2), (1,4,2), dropout included (fp32, rtol 1e-5): the new families plug into the same loop,
rules table and shardings as BERT (tests/test_mesh_equivalence.py)."""
import dataclasses

import jax
import numpy as np
import pytest
from corpus_util import word_source
from step_losses import step_losses

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.families.gpt.causal_lm import CausalLmObjective
from ptm_jax.families.xlnet.plm import PlmObjective
from ptm_jax.parallel.mesh import make_mesh

STEPS = 3
VOCAB = 512


def _losses(objective, tcfg, mesh):
    return step_losses(objective, tcfg, mesh, STEPS)


def _objective(name, shared_data):
    source, special = word_source(shared_data / "corpus/tinyshakespeare/input.txt", VOCAB)
    if name == "gpt":
        cfg = load_config("gpt_tiny", [f"model.vocab_size={VOCAB}", "train.batch_size=16"])
        return cfg, CausalLmObjective(cfg, source, None, eos_id=special.sep, pad_id=special.pad)
    cfg = load_config("xlnet_tiny", [f"model.vocab_size={VOCAB}", "train.batch_size=16", "data.bi_data=true"])
    special = dataclasses.replace(special, continuation=np.zeros(VOCAB, bool))  # every word is one id
    return cfg, PlmObjective(cfg, source, None, special)


@pytest.mark.parametrize("family", ["gpt", "xlnet"])
def test_losses_equal_on_one_device_and_meshes_8_1_1__2_2_2__1_4_2(family, shared_data):
    cfg, obj = _objective(family, shared_data)
    ref, _ = _losses(obj, cfg.train, make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))
    assert np.all(np.isfinite(ref)) and ref[0, 0] > 3.0
    for shape in [(8, 1, 1), (2, 2, 2), (1, 4, 2)]:
        got, state = _losses(obj, cfg.train, make_mesh(MeshConfig(*shape)))
        np.testing.assert_allclose(got, ref, rtol=1e-5, err_msg=f"{family} mesh {shape}")
        # every 2-D kernel is cut by exactly fsdp x tensor where both dims divide (parallel/rules.py): the
        # largest number of distinct pieces of one parameter is the mesh's model-parallel size
        pieces = max(x.size // int(np.prod(x.addressable_shards[0].data.shape)) for x in jax.tree.leaves(state.params))
        assert pieces == shape[1] * shape[2], f"{family} mesh {shape}: a parameter is cut into {pieces} pieces"
