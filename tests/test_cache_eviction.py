"""The per-function cache evicts its least recently used entry, whichever
wrapper of the function used it: one clock per shared cache.

Two wrappers of one function share the core's entries; before this clock,
each kept its own, and a fresh wrapper's uses stamped entries older than
the other's: its most recently used signature was evicted and missed again.
Misses are the core's own counter (``_debug_dispatch_stats``: calls that ran
the Python miss path), evictions too.
"""
import jax.numpy as jnp

import pmapkit


def _misses(*wrappers):
    return sum(w._debug_dispatch_stats()["misses"] for w in wrappers)


def test_a_fresh_wrappers_most_recent_signature_is_not_evicted():
    def f(x):
        return x * 2

    a = pmapkit.pjit(f)
    s1, s2, s3 = jnp.ones(1), jnp.ones(2), jnp.ones(3)
    a._set_cache_size(2)
    a(s1)
    a(s2)
    for _ in range(20):  # s1 the most used, by the first wrapper
        a(s1)
    assert _misses(a) == 2
    b = pmapkit.pjit(f)  # shares a's entries
    b._set_cache_size(2)
    assert b._cache_size == 2
    b(s2)  # a hit: s2 is now the most recently used
    assert _misses(a, b) == 2
    b(s3)  # a miss: evicts s1, the least recently used (not b's s2)
    assert b._debug_dispatch_stats()["evictions"] == 1
    assert _misses(a, b) == 3
    b(s2)  # the most recent before s3: still cached
    a(s3)
    assert _misses(a, b) == 3
    a(s1)  # the evicted one misses again
    assert _misses(a, b) == 4
