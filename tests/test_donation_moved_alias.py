"""One array passed twice, one position donated, where it must move (issue 33,
item 2).

Moving a donated input makes a copy (``pmapkit.core.programs.moves``, ``shard_fallback``),
so the program overwrites the copy, never the caller's array, wherever else
that array is passed: jax.pmap and jax.jit run such calls, and so does
pmapkit (the miss path, the hit path, AOT-compiled calls), with JAX's
values and the caller's array alive and unchanged. Where the donated
position would take the caller's own buffers (the array already laid out as
the program takes it), ``ArgumentAliasError`` still refuses the call
(``tests/test_donation_aliasing.py`` holds those cases). Run in both builds
(``test_pure_python_mode.py`` re-runs this file with ``PMAPKIT_PUREPYTHON=1``).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.core.hitpath._compiled import feed as _feed

ArgumentAliasError = _feed.ArgumentAliasError

CALLS = 3  # the miss, then hits


def _on_device_0():
    """Uncommitted, on device 0: an 8-device program must move it."""
    return jnp.arange(32.0).reshape(8, 4)


def _assert_alive_and_unchanged(x, before):
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(x), before)


def _both_called_twice_with_one_moved_array(ours, theirs):
    """``(got, want)`` of each of CALLS calls ``f(x, x)`` of each side, x an
    array on device 0 (moved by both), asserted alive and unchanged after
    every call."""
    x = _on_device_0()
    before = np.asarray(x).copy()
    pairs = []
    for _ in range(CALLS):
        want = theirs(x, x)
        _assert_alive_and_unchanged(x, before)
        got = ours(x, x)
        _assert_alive_and_unchanged(x, before)
        pairs.append((got, want))
    return pairs


@pytest.mark.parametrize("donate", [0, 1, (0, 1)], ids=["first", "second", "both"])
def test_pmap_runs_a_moved_array_passed_twice_as_jax_pmap_does(donate):
    body = lambda a, b: (a * 2 + b, a - b)  # noqa: E731
    ours = pmapkit.pmap(body, donate_argnums=donate)
    theirs = jax.pmap(body, donate_argnums=donate)
    for got, want in _both_called_twice_with_one_moved_array(ours, theirs):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_pmap_moved_alias_in_a_pytree_and_by_keyword():
    ours = pmapkit.pmap(lambda t, b: t[0] + t[1] * b, donate_argnums=0)
    theirs = jax.pmap(lambda t, b: t[0] + t[1] * b, donate_argnums=0)
    x = _on_device_0()
    before = np.asarray(x).copy()
    for _ in range(CALLS):
        want = theirs((x, x), x)
        got = ours((x, x), b=x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        _assert_alive_and_unchanged(x, before)


def test_pmap_compiled_call_with_a_moved_alias():
    ours = pmapkit.pmap(lambda a, b: a * b, donate_argnums=0)
    x = _on_device_0()
    before = np.asarray(x).copy()
    compiled = ours.lower(x, x).compile()
    for _ in range(CALLS):
        np.testing.assert_array_equal(np.asarray(compiled(x, x)), before * before)
        _assert_alive_and_unchanged(x, before)


def test_pmap_still_refuses_an_array_already_in_place():
    f = pmapkit.pmap(lambda a, b: a + b, donate_argnums=0)
    placed = jax.pmap(lambda v: v)(_on_device_0())
    with pytest.raises(ArgumentAliasError, match="donate_argnums"):
        f(placed, placed)
    assert not placed.is_deleted()


@pytest.fixture
def mesh8():
    return Mesh(np.array(jax.devices()), ("x",))


@pytest.mark.parametrize("donate", [0, 1], ids=["first", "second"])
def test_pjit_runs_a_moved_array_passed_twice_as_jax_jit_does(mesh8, donate):
    sharding = NamedSharding(mesh8, P("x"))
    body = lambda a, b: a * 3 - b  # noqa: E731
    ours = pmapkit.pjit(body, in_shardings=sharding, out_shardings=sharding,
                        donate_argnums=donate)
    theirs = jax.jit(body, in_shardings=sharding, out_shardings=sharding,
                     donate_argnums=donate)
    for got, want in _both_called_twice_with_one_moved_array(ours, theirs):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding.is_equivalent_to(want.sharding, got.ndim)


def test_pjit_classic_specs_under_a_mesh_with_a_moved_alias(mesh8):
    f = pmapkit.pjit(lambda a, b: a + 2 * b, P("x"), P("x"), donate_argnums=0)
    x = _on_device_0()
    before = np.asarray(x).copy()
    with pmapkit.Mesh(mesh8.devices, ("x",)):
        for _ in range(CALLS):
            np.testing.assert_array_equal(np.asarray(f(x, x)), before * 3)
            _assert_alive_and_unchanged(x, before)


def test_pjit_refuses_when_the_donated_position_takes_the_array_as_is(mesh8):
    # Laid out as the donated position wants (its buffers would be donated),
    # moved for the other: the program would read what it overwrites.
    x = jax.device_put(_on_device_0(), NamedSharding(mesh8, P("x")))
    f = pmapkit.pjit(lambda a, b: a + b, (P("x"), P()), P(), donate_argnums=0)
    with pmapkit.Mesh(mesh8.devices, ("x",)):
        with pytest.raises(ArgumentAliasError, match="donate_argnums"):
            f(x, x)
        assert not x.is_deleted()
        # Donating the moved position instead is fine: the copy is donated.
        g = pmapkit.pjit(lambda a, b: a + b, (P("x"), P()), P(), donate_argnums=1)
        before = np.asarray(x).copy()
        for _ in range(CALLS):
            np.testing.assert_array_equal(np.asarray(g(x, x)), before * 2)
            _assert_alive_and_unchanged(x, before)
