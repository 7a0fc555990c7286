"""Information flow of XLNet's two-stream attention (Yang et al. 2019, Sec. 2.3), measured by perturbing one
input token at a time on a small explicit factorization order and reading which outputs move:

- a target's query stream sees neither its own token nor any target later in the order, but does see the
  targets earlier in the order; tokens that are not targets are visible to everyone;
- the content stream sees its own token, and also nothing later in the order;
- memory from the previous segment is visible to both streams.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.families.xlnet.config import XlnetConfig
from ptm_jax.families.xlnet.model import XLNetModel
from ptm_jax.models.relative_attention import rel_shift

L, V, H = 8, 50, 32
ORDER = [4, 1, 6, 3]  # the factorization order of the targets; positions 0, 2, 5, 7 are context only
TARGETS = sorted(ORDER)
RANK = {pos: r for r, pos in enumerate(ORDER)}
CONTEXT = [i for i in range(L) if i not in RANK]
MOVED = 1e-3  # an output "depends" on an input when it moves by more than this
EXACT = 1e-6  # blocked keys get probability exactly 0: outputs must not move at all


def perm_mask() -> np.ndarray:
    """perm[i, j] = 1 (i may not see j) iff j is a target and rank_i <= rank_j (context tokens rank -1)."""
    rank = np.array([RANK.get(i, -1) for i in range(L)])
    return ((rank[None, :] >= 0) & (rank[:, None] <= rank[None, :])).astype(np.float32)


def _config(scan: bool) -> XlnetConfig:
    return XlnetConfig(family="xlnet", vocab_size=V, hidden_size=H, num_layers=2, num_heads=4, intermediate_size=64,
                       mem_len=4, hidden_act="relu", scan_layers=scan)


@pytest.fixture(scope="module")
def loop_params():
    ids = jnp.zeros((1, L), jnp.int32)
    return nn.meta.unbox(jax.jit(XLNetModel(_config(False)).init)(jax.random.PRNGKey(0), ids, ids))


@pytest.fixture(scope="module", params=[False, True], ids=["loop", "scan"])
def flow(request, loop_params):
    """Outputs for the base sequence (row 0) and for it with token j replaced (row 1 + j), in one batch; the
    scan variant runs the same weights stacked on a layer axis."""
    params = loop_params
    if request.param:
        enc = params["params"]["encoder"]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), enc["layers_0"], enc["layers_1"])
        params = {"params": {**params["params"], "encoder": {"layers": {"layer": stacked}}}}
    base = np.random.default_rng(0).integers(0, V - 1, L)
    ids = np.tile(base, (L + 1, 1))
    ids[1 + np.arange(L), np.arange(L)] += 1
    seg = np.zeros_like(ids)
    seg[:, 5:] = 1
    tm = np.zeros((L + 1, len(TARGETS), L), np.float32)
    tm[:, np.arange(len(TARGETS)), TARGETS] = 1.0
    perm = np.broadcast_to(perm_mask(), (L + 1, L, L))
    model = XLNetModel(_config(request.param))
    args = [jnp.asarray(x) for x in (ids, seg, np.zeros(ids.shape, np.float32), perm, tm)]
    mem = [jnp.broadcast_to(jax.random.normal(jax.random.PRNGKey(i + 1), (1, 3, H)), (L + 1, 3, H)) for i in range(2)]
    run = jax.jit(lambda p, m: model.apply(p, *args, m)[:2])
    h, g = (np.asarray(x) for x in run(params, mem))
    h_mem, g_mem = (np.asarray(x) for x in run(params, [m.at[1:].add(1.0) for m in mem]))

    def moved(stream: np.ndarray, row: int, j: int) -> float:
        """How far output ``row`` (a position for h, a prediction for g) moves when token j changes."""
        return float(np.abs(stream[1 + j, row] - stream[0, row]).max())

    return {"h": h, "g": g, "h_mem": h_mem, "g_mem": g_mem, "moved": moved}


def test_query_stream_ignores_its_own_token_and_later_targets(flow):
    blocked = [(p, t, j) for p, t in enumerate(TARGETS) for j in TARGETS if RANK[j] >= RANK[t]]
    assert len(blocked) == 10  # 4 + 3 + 2 + 1 (itself included)
    for p, t, j in blocked:
        assert flow["moved"](flow["g"], p, j) <= EXACT, (t, j)


def test_query_stream_sees_targets_earlier_in_the_order(flow):
    earlier = [(p, t, j) for p, t in enumerate(TARGETS) for j in TARGETS if RANK[j] < RANK[t]]
    assert len(earlier) == 6
    for p, t, j in earlier:
        assert flow["moved"](flow["g"], p, j) > MOVED, (t, j)


def test_context_tokens_are_visible_to_every_target_and_position(flow):
    for j in CONTEXT:
        for p in range(len(TARGETS)):
            assert flow["moved"](flow["g"], p, j) > MOVED, (TARGETS[p], j)
        for i in range(L):
            assert flow["moved"](flow["h"], i, j) > MOVED, (i, j)


def test_content_stream_sees_itself_and_nothing_later_in_the_order(flow):
    for t in TARGETS:
        assert flow["moved"](flow["h"], t, t) > MOVED, t  # the query stream of t could not (test above)
        for j in TARGETS:
            if RANK[j] > RANK[t]:
                assert flow["moved"](flow["h"], t, j) <= EXACT, (t, j)
            elif RANK[j] < RANK[t]:
                assert flow["moved"](flow["h"], t, j) > MOVED, (t, j)
    for i in CONTEXT:  # context tokens see no target at all
        for j in TARGETS:
            assert flow["moved"](flow["h"], i, j) <= EXACT, (i, j)


def test_memory_is_visible_to_both_streams(flow):
    for name in ("h", "g"):
        moved = np.abs(flow[f"{name}_mem"][1:] - flow[name][1:]).max(axis=-1)
        assert moved.min() > MOVED, name
        assert np.array_equal(flow[f"{name}_mem"][0], flow[name][0])  # row 0's memory was not changed


def test_rel_shift_puts_distance_m_plus_i_minus_j_at_query_i_key_j():
    """Scores against encodings of distances klen .. -qlen+1: after the shift, entry (i, j) holds the score of
    distance (klen - qlen) + i - j, i.e. x[i, j + qlen - i]."""
    qlen, klen = 4, 9
    x = np.random.default_rng(0).normal(size=(2, 3, qlen, klen + qlen)).astype(np.float32)
    out = np.asarray(rel_shift(jnp.asarray(x), klen))
    i, j = np.meshgrid(np.arange(qlen), np.arange(klen), indexing="ij")
    np.testing.assert_array_equal(out, x[:, :, i, j + qlen - i])
    distance = klen - (j + qlen - i)  # the encoding index t holds distance klen - t
    np.testing.assert_array_equal(distance, (klen - qlen) + i - j)


def test_new_memory_carries_no_gradient_and_keeps_the_last_mem_len_states(loop_params):
    """Transformer-XL's cache: mem_len = 4 of [old memory (3); layer input (8)], under stop_gradient."""
    model = XLNetModel(_config(False))
    ids = jnp.asarray(np.random.default_rng(1).integers(0, V, (2, L)))
    old = [jnp.ones((2, 3, H)), jnp.ones((2, 3, H))]

    def total(params, mems):
        _, _, new = model.apply(params, ids, None, None, None, None, mems)
        return sum(jnp.sum(m) for m in new), new

    (_, new), (g_params, g_mems) = jax.jit(jax.value_and_grad(total, argnums=(0, 1), has_aux=True))(loop_params, old)
    assert [m.shape for m in new] == [(2, 4, H), (2, 4, H)]
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves((g_params, g_mems)))
    embedded = loop_params["params"]["embeddings"]["word_embedding"]["embedding"][ids]
    np.testing.assert_array_equal(new[0], embedded[:, -4:])  # layer 0's input: the last 4 word embeddings
