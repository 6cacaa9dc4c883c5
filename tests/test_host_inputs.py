"""Host values on the hit path: JAX's C++ call of the program.

A cached call of a one-device program carrying numpy arrays or scalars (every
device array in it laid out as compiled) is run by JAX's own C++ call of the
compiled program (``CompiledProgram.host_call``), which puts the host values
inside C++; over several devices ``HostSpec`` puts them (cheaper there). What other code can observe must not change with the route: values,
dtypes, the results' sharding objects (the very ones the per-device path
gives, so the next call passes them on as they are), commitment, errors,
and the calls that must not take it (misplaced or deleted arrays, donation,
effects, jax_debug_nans) still take the per-device path.
"""
import threading

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit

N = len(jax.devices())  # 8, forced by conftest


def _entries(fn):
    """Every cache entry of a wrapper (white box: which route it can take)."""
    return [e for cache in fn._shared.caches.values() for e in cache.values()]


def _routed(fn):
    entries = _entries(fn)
    assert entries, "nothing cached"
    return all(e.host_call is not None for e in entries)


def _host(n, cols=4, dtype=np.float32):
    return (np.arange(n * cols) + 1).astype(dtype).reshape(n, cols)


@pytest.mark.parametrize("ndev", [1, N])
def test_numpy_input_matches_the_per_device_route_and_jax(ndev):
    devices = jax.devices()[:ndev]
    f = pmapkit.pmap(lambda a: a * 2.0 + 1.0, axis_name="i", devices=devices)
    x = _host(ndev)
    first = f(x)  # miss: the per-device path
    assert _routed(f) == (ndev == 1)
    hit = f(x + 1)
    want = jax.pmap(lambda a: a * 2.0 + 1.0, axis_name="i", devices=devices)(x + 1)
    np.testing.assert_array_equal(np.asarray(hit), np.asarray(want))
    assert hit.dtype == want.dtype == first.dtype
    # The very sharding object the miss gave: fed back, it is passed on as is.
    assert hit.sharding is first.sharding
    assert hit._committed and first._committed
    assert [s.device for s in hit.addressable_shards] == list(devices)
    for shard, row in zip(hit.addressable_shards, np.asarray(want)):
        np.testing.assert_array_equal(np.asarray(shard.data), row[None])
    again = f(hit)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(want) * 2.0 + 1.0)
    assert f._debug_dispatch_stats()["misses"] == 1
    assert f._debug_dispatch_stats()["resharded"] == 0


def _one_device_mesh(name, device):
    return NamedSharding(Mesh(np.array([device]), (name,)), P(name))


def test_scalars_and_mixed_calls_take_the_route():
    devices = jax.devices()[:1]
    f = pmapkit.pmap(lambda a, lr, b: a * lr + b, axis_name="i",
                     in_axes=(0, None, 0), devices=devices)
    w = pmapkit.pmap(lambda a: a, axis_name="i", devices=devices)(_host(1))
    b = _host(1) * 10
    first = f(w, 0.5, b)
    assert _routed(f)
    # flax's placement (another mesh axis name) and a committed one-device
    # array: the same layout, taken as they are.
    flax_like = jax.device_put(_host(1), _one_device_mesh("_device_put_sharded", devices[0]))
    single = jax.device_put(_host(1), devices[0])
    for a in (w, flax_like, single, flax_like):
        for lr in (0.25, np.float32(2.0), 3):
            out = f(a, lr, b)
            np.testing.assert_allclose(np.asarray(out),
                                       np.asarray(a) * np.float32(lr) + b)
            assert out.sharding is first.sharding
            assert out._committed
    # The float, the numpy scalar and the int sign apart: one compile each.
    assert f._debug_dispatch_stats()["misses"] == 3
    assert f._debug_dispatch_stats()["resharded"] == 0


def test_non_canonical_host_dtypes_convert_like_the_per_device_route():
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=jax.devices()[:1])
    x64 = _host(1, dtype=np.float64) / 3.0
    out = f(x64)
    out2 = f(x64 * 2)
    assert _routed(f)
    assert out2.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out2), (x64 * 2).astype(np.float32) + 1)
    assert out.sharding is out2.sharding
    with jax.enable_x64(True):
        wide = f(x64)
        f(x64)
        assert wide.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(wide), x64 + 1)
        big = f(np.array([[2**40]], np.int64))
        assert big.dtype == jnp.int64 and int(big[0, 0]) == 2**40 + 1
    np.testing.assert_allclose(np.asarray(f(x64)), x64.astype(np.float32) + 1)


def test_misplaced_array_beside_a_host_value_takes_the_per_device_route():
    devices = jax.devices()[:1]
    f = pmapkit.pmap(lambda a, b: a + b, axis_name="i", devices=devices)
    x = _host(1)
    f(x, x)
    # Committed to another device: moved by the hit path, then run.
    elsewhere = jax.device_put(x, jax.devices()[3])
    for k in range(3):
        out = f(elsewhere, x + k)
        np.testing.assert_array_equal(np.asarray(out), 2 * x + k)
        assert [s.device for s in out.addressable_shards] == devices
    assert f._debug_dispatch_stats()["misses"] == 1
    assert f._debug_dispatch_stats()["resharded"] == 3


def test_deleted_array_beside_a_host_value_raises_jax_error():
    f = pmapkit.pmap(lambda a, b: a + b, axis_name="i", devices=jax.devices()[:1])
    x = _host(1)
    y = f(x, x)
    f(y, x)
    y.delete()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        f(y, x)


def test_donating_and_effectful_programs_keep_the_per_device_route():
    one = jax.devices()[:1]
    donating = pmapkit.pmap(lambda a: a + 1, axis_name="i", donate_argnums=0,
                            devices=one)
    donating(_host(1))
    donating(_host(1))
    assert not any(e.host_call is not None for e in _entries(donating))

    seen = []

    def tap(a):
        jax.debug.callback(lambda v: seen.append(np.asarray(v)), a)
        return a * 2

    effectful = pmapkit.pmap(tap, axis_name="i", devices=one)
    out = effectful(_host(1))
    effectful(_host(1))
    jax.effects_barrier()
    assert not any(e.host_call is not None for e in _entries(effectful))
    np.testing.assert_array_equal(np.asarray(out), _host(1) * 2)
    assert len(seen) >= 2


def test_debug_nans_checks_host_inputs_with_pmapkits_error():
    f = pmapkit.pmap(lambda a: a / a, axis_name="i", devices=jax.devices()[:1])
    x = _host(1)
    f(x)
    f(x)
    assert _routed(f)
    x0 = x.copy()
    x0[0, 1] = 0.0
    with jax.debug_nans(True):
        with pytest.raises(FloatingPointError, match="at mapped index 0"):
            f(x0)


def test_pjit_numpy_inputs_with_keywords_and_statics():
    mesh = pmapkit.Mesh(np.array(jax.devices()[:1]), ("x",))
    # Keyword arguments need the in shardings omitted (classic pjit).
    f = pmapkit.pjit(lambda a, b, n: a * n + b, out_shardings=P("x"),
                     static_argnames="n")
    with mesh:
        a = _host(2)
        first = f(a, b=a, n=3)
        assert _routed(f)
        out = f(a + 1, b=a, n=3)
        np.testing.assert_array_equal(np.asarray(out), (a + 1) * 3 + a)
        assert out.sharding is first.sharding
        out = f(a, b=a, n=4)
        np.testing.assert_array_equal(np.asarray(out), a * 4 + a)


def test_threads_get_their_own_values():
    f = pmapkit.pmap(lambda a: a * 3.0, axis_name="i", devices=jax.devices()[:1])
    f(_host(1))
    assert _routed(f)
    errors = []

    def worker(k):
        try:
            for i in range(50):
                x = _host(1) + (k * 1000 + i)
                np.testing.assert_array_equal(np.asarray(f(x)), x * 3.0)
        except BaseException as exc:  # reported below, with the thread's values
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a caller thread hung"
    assert not errors, errors[0]
    assert f._debug_dispatch_stats()["misses"] == 1


def test_disable_jit_calls_keep_running():
    # JAX's C++ call of a compiled program refuses to run under disable_jit;
    # entries made there (disable_jit is part of the trace context) never
    # take it.
    f = pmapkit.pmap(lambda a: a + 1, axis_name="i", devices=jax.devices()[:1])
    x = _host(1)
    f(x)
    f(x)
    with jax.disable_jit():
        for k in range(3):
            np.testing.assert_array_equal(np.asarray(f(x + k)), x + k + 1)
    np.testing.assert_array_equal(np.asarray(f(x)), x + 1)
    assert _routed(f) is False  # the disable_jit context's entry has none
    jax.config.update("jax_disable_jit", True)
    try:
        np.testing.assert_array_equal(np.asarray(f(x)), x + 1)
        np.testing.assert_array_equal(np.asarray(f(x)), x + 1)
    finally:
        jax.config.update("jax_disable_jit", False)
