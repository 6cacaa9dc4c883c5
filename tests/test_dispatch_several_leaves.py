"""Calls of several leaf arguments on the hit path: a call reuses the key of
the last call (or the one before) with the same leaf ids, the very key the
cache holds; calls differing at any position get their own entries. Run on
both builds (tests/test_pure_python_mode.py lists this file)."""
import threading

import numpy as np

import jax.numpy as jnp

import pmapkit
from test_dispatch import JOIN_TIMEOUT, N, farange, spy  # noqa: F401 (spy: a fixture)


def test_calls_of_several_leaves_reuse_their_keys_and_stay_right(spy):
    # A call of several leaf arguments reuses the key of the last call (or
    # the one before) with the same leaf ids: the very key object the cache
    # holds. Calls that differ at any position, first or later, get their
    # own entry and their own values.
    f = pmapkit.pmap(lambda x, y, z: (x * 10, y + 1, z - 1))
    a = farange(N, 2)
    b = farange(N, 3, start=5)
    c = farange(N, 2, dtype=np.int32, start=7)
    da = jnp.asarray(a)  # signs as ``a`` (a host float32 array signs as its aval)
    triples = [(a, a, a), (a, b, a), (a, a, b), (da, a, c), (a, da, a), (b, c, a),
               (a, a, a), (c, c, c)]
    seen = set()
    for x, y, z in triples * 3:
        got = f(x, y, z)
        for out, want in zip(got, (np.asarray(x) * 10, np.asarray(y) + 1, np.asarray(z) - 1)):
            assert out.dtype == want.dtype
            np.testing.assert_array_equal(np.asarray(out), want)
        key = f._debug_compute_cache_key(x, y, z)
        seen.add(key)
        (cache,) = [c for c in f._shared.caches.values() if c]
        # The key signed by the hit path is the one the general signing
        # makes (same format), and the cache holds it.
        assert key in cache
    # (da, a, c) signs as (a, a, c) and (a, da, a) as (a, a, a).
    assert f._cache_size == len(seen) == 6
    assert spy.compile == 6


def test_calls_of_several_leaves_under_threads_and_clears_stay_right():
    # Threads alternating signatures of two leaves race the last-two keys,
    # compiles and clears: every value right.
    f = pmapkit.pmap(lambda x, y: x * 10 + y)
    xs = [jnp.full((N, k), float(k)) for k in (1, 2, 3)]
    ys = [np.full((N, k), 0.5 * k, np.float32) for k in (1, 2, 3)]
    errors = []

    def run(seed):
        rng = np.random.default_rng(seed)
        for _ in range(120):
            k = int(rng.integers(3))
            host = bool(rng.integers(2))
            y = ys[k] if host else xs[k] / 2.0
            out = f(xs[k], y)
            want = np.full((N, k + 1), 10.0 * (k + 1) + 0.5 * (k + 1), np.float32)
            if out.shape != want.shape or not np.array_equal(np.asarray(out), want):
                errors.append((k, host, out))
            if rng.random() < 0.02:
                f.clear_cache()
    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert errors == []
