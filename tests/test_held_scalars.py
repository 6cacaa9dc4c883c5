"""A Python scalar passed again and again (a learning rate) is put on the
devices once and held by its cache entry (``CacheEntry._held_scalar``): a
scalar cannot change, so its device value stays right. Each call still
computes with the value it was given: another value, the other zero, or a
value of another type is never taken for the held one."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import pmapkit


def _scaled(a, n):
    return a * n


def _entry(f):
    (entry,) = [e for c in f._shared.caches.values() for e in c.values()]
    return entry


@pytest.mark.parametrize("ndev", [1, 8])
def test_a_repeated_scalar_is_put_once_and_held(ndev):
    f = pmapkit.pmap(_scaled, in_axes=(0, None), devices=jax.devices()[:ndev])
    x = f(jnp.ones((ndev, 4)), 1.0)
    lr = 0.5
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, lr)), np.full((ndev, 4), 0.5))
    held = _entry(f).held_scalars[1]
    assert held[0] is lr and isinstance(held[1], jax.Array)
    assert float(np.asarray(held[1])) == 0.5


def test_each_call_computes_with_its_own_scalar():
    f = pmapkit.pmap(_scaled, in_axes=(0, None), devices=jax.devices()[:1])
    x = f(jnp.ones((1, 4)), 1.0)
    for value in (0.5, 0.5, 0.5, 0.25, 0.25, 3.0, 0.5, 0.5):
        np.testing.assert_array_equal(np.asarray(f(x, value)), np.full((1, 4), value))


def test_the_other_zero_is_not_the_held_one():
    # 0.0 == -0.0, but x * -0.0 is -0.0: the sign must come through.
    f = pmapkit.pmap(_scaled, in_axes=(0, None), devices=jax.devices()[:1])
    x = f(jnp.ones((1, 4)), 1.0)
    zero, minus_zero = float("0.0"), float("-0.0")
    for _ in range(3):
        assert not np.signbit(np.asarray(f(x, zero))).any()
    for _ in range(3):
        assert np.signbit(np.asarray(f(x, minus_zero))).all()


def test_equal_values_made_anew_are_held_too():
    # A schedule that computes the same rate afresh each step (a new float
    # object) is held as well; a NaN never equals itself and is put each call.
    f = pmapkit.pmap(_scaled, in_axes=(0, None), devices=jax.devices()[:1])
    x = f(jnp.ones((1, 4)), 1.0)
    for k in range(4):
        rate = float(f"{0.1 + k * 0:.3f}")
        np.testing.assert_allclose(np.asarray(f(x, rate)), np.full((1, 4), 0.1), rtol=1e-6)
    assert _entry(f).held_scalars[1][1] is not None
    for _ in range(3):
        assert np.isnan(np.asarray(f(x, float("nan")))).all()


def test_a_donating_program_holds_nothing():
    f = pmapkit.pmap(_scaled, in_axes=(0, None), devices=jax.devices()[:1],
                     donate_argnums=(0, 1))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(jnp.ones((1, 4)), 2.0)),
                                      np.full((1, 4), 2.0))
    assert _entry(f).held_scalars is None
