"""Packed-Threefry dropout (ptm_jax/models/dropout.py): rate, unbiasedness, independence, sharding invariance."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ptm_jax.models.dropout import Dropout, drop_threshold, dropout, keep_mask, keep_probability


def test_threshold_quantises_rate_to_2_pow_minus_16():
    assert drop_threshold(0.1) == 6554
    assert keep_probability(0.1) == pytest.approx(1 - 6554 / 65536, abs=0)
    assert abs(keep_probability(0.1) - 0.9) < 1e-5
    assert keep_probability(0.0) == 1.0
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        drop_threshold(1.0)


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_keep_rate_matches_keep_probability_within_4_sigma(rate):
    shape = (16, 12, 64, 66)  # last axis not a multiple of 4
    keep = np.asarray(keep_mask(jax.random.key(3), shape, rate))
    n, p = keep.size, keep_probability(rate)
    assert keep.shape == shape
    assert abs(keep.mean() - p) < 4 * np.sqrt(p * (1 - p) / n)
    # every one of the four 16-bit lanes of a hash, and the ragged tail, is drawn at the same rate
    for lane in range(4):
        m = keep[..., lane::4].mean()
        assert abs(m - p) < 5 * np.sqrt(p * (1 - p) / keep[..., lane::4].size)


def test_neighbouring_decisions_are_uncorrelated():
    keep = np.asarray(keep_mask(jax.random.key(0), (512, 1024), 0.5)).astype(np.float64)
    for a, b in [(keep[:, :-1], keep[:, 1:]), (keep[:-1], keep[1:]), (keep[:, 0::4], keep[:, 2::4])]:
        r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
        assert abs(r) < 0.01, r


def test_dropout_is_unbiased_and_zeroes_dropped_positions():
    x = jnp.full((256, 4096), 3.0)
    y = np.asarray(dropout(x, 0.1, jax.random.key(1)))
    kept = y != 0
    np.testing.assert_allclose(y[kept], 3.0 / keep_probability(0.1), rtol=1e-6)
    assert abs(y.mean() - 3.0) < 4 * 3.0 * np.sqrt(0.1 / 0.9 / y.size)


def test_same_key_same_mask_other_key_other_mask():
    a = np.asarray(keep_mask(jax.random.key(7), (64, 128), 0.1))
    b = np.asarray(keep_mask(jax.random.key(7), (64, 128), 0.1))
    c = np.asarray(keep_mask(jax.random.key(8), (64, 128), 0.1))
    assert (a == b).all()
    assert (a != c).mean() > 0.1  # two independent masks disagree on 2 p (1 - p) = 18% of positions


def test_mask_is_identical_when_the_activation_is_sharded_over_8_devices():
    devices = np.array(jax.devices()[:8]).reshape(4, 2)
    mesh = Mesh(devices, ("data", "model"))
    shape = (8, 16, 6, 40)
    whole = np.asarray(jax.jit(lambda k: keep_mask(k, shape, 0.1))(jax.random.key(5)))
    sharded = jax.jit(lambda k: keep_mask(k, shape, 0.1),
                      out_shardings=NamedSharding(mesh, P("data", None, "model", None)))(jax.random.key(5))
    assert len(sharded.sharding.device_set) == 8
    np.testing.assert_array_equal(np.asarray(sharded), whole)


def test_other_prng_implementations_fall_back_to_bernoulli():
    key = jax.random.key(0, impl="rbg")
    keep = np.asarray(keep_mask(key, (200, 500), 0.1))
    np.testing.assert_array_equal(keep, np.asarray(jax.random.bernoulli(key, keep_probability(0.1), (200, 500))))
    assert abs(keep.mean() - keep_probability(0.1)) < 0.01


def test_module_is_identity_when_deterministic_and_draws_from_the_dropout_stream():
    x = jnp.ones((4, 33))
    m = Dropout(0.25)
    np.testing.assert_array_equal(np.asarray(m.apply({}, x, deterministic=True)), np.asarray(x))
    y1 = m.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
    y2 = m.apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    assert 0 < int((np.asarray(y1) == 0).sum()) < x.size
    assert not np.array_equal(np.asarray(y1), np.asarray(y2))


@pytest.mark.parametrize("shape", [(37,), (3, 8), (4, 7), (2, 5, 66), (2, 3, 4, 13)], ids=str)
def test_per_position_masks_of_tpus_equal_the_interleaved_masks_bit_for_bit(shape):
    """On a TPU keep_mask hashes once per position (no interleave, which the TPU lays out as a relayout); the
    masks must be the same ones, on any rank and any last-axis length."""
    from ptm_jax.models.dropout import keep_mask_per_position

    key = jax.random.key(11)
    per_position = np.asarray(keep_mask_per_position(jax.random.key_data(key), shape, 0.3))
    np.testing.assert_array_equal(per_position, np.asarray(keep_mask(key, shape, 0.3)))
