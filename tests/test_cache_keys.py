"""The key rules written twice on purpose, checked equal.

The dispatch core (``_dispatch.py``) imports nothing of pmapkit, so it keeps
a documented twin of two rules that live elsewhere: a static value is keyed
with its type (``_cache_keys.static_key``), and a donated array passed in
two positions is an alias (``lowering.find_donated_alias``, which the miss
path uses to name both positions). These tests hold each twin to its rule,
on the compiled core and (``PMAPKIT_PUREPYTHON=1``) the pure one.
"""
import jax
import jax.numpy as jnp
import numpy as np

import pmapkit
from pmapkit.core import _cache_keys, lowering
from pmapkit.core._compiled import dispatch as _dispatch_mod

N = len(jax.devices())


def test_core_keys_static_positional_arguments_as_static_key():
    f = pmapkit.pjit(lambda x, n: x * n, static_argnums=1)
    x = jnp.ones(4)
    for n in (2, 2.0, True, "two", (1, 2)):
        key = f._debug_compute_cache_key(x, n)
        assert (1, *_cache_keys.static_key(n)) in key, (n, key)


def test_core_keys_static_keywords_as_static_key():
    f = pmapkit.pjit(lambda x, *, n: x * n, static_argnames="n")
    x = jnp.ones(4)
    for n in (3, 3.0, False):
        key = f._debug_compute_cache_key(x, n=n)
        assert ("n", *_cache_keys.static_key(n)) in key, (n, key)
    # The flattening path (a dict argument) keys them alike.
    g = pmapkit.pjit(lambda d, *, n: d["a"] * n, static_argnames="n")
    key = g._debug_compute_cache_key({"a": x}, n=2.0)
    assert _cache_keys.static_keywords_key({"n": 2.0}) in key, key


def test_statics_equal_in_python_key_apart():
    keys = {_cache_keys.static_key(v) for v in (1, 1.0, True)}
    assert len(keys) == 3
    assert _cache_keys.static_keywords_key({"b": 1, "a": 1.0}) == (
        ("a", float, 1.0), ("b", int, 1))
    assert not _cache_keys.same_static(1, 1.0) and _cache_keys.same_static(2.0, 2.0)
    assert not _cache_keys.same_static(np.ones(2), np.ones(2))  # an __eq__ that raises
    assert _cache_keys.typed_key((1, [2.0])) != _cache_keys.typed_key((1, [2]))
    assert _cache_keys.params_key([{}]) is not None
    assert _cache_keys.params_key(np.ones(2)) is None  # unhashable: shares nothing


def test_core_alias_check_agrees_with_find_donated_alias():
    f = pmapkit.pmap(lambda a, b, c: a + b + c, donate_argnums=(0, 2))
    a, b, c = (jnp.arange(float(N * 2)).reshape(N, 2) + i for i in range(3))
    fastpath = f._cache_miss(a, b, c)[1]
    entry = _dispatch_mod.CacheEntry()
    entry.populate(fastpath, lowering.LEAF_TYPES)
    donated = fastpath.donated
    host = np.ones((N, 2), np.float32)
    cases = [[a, b, c], [a, a, c], [a, b, a], [b, b, c], [a, c, c], [c, b, a],
             [host, host, c], [a, b, b]]
    for leaves in cases:
        twin = entry.aliases_donated(list(leaves))
        rule = lowering.find_donated_alias(leaves, donated) is not None
        assert twin == rule, [id(x) for x in leaves]
    assert sum(entry.aliases_donated(list(leaves)) for leaves in cases) == 5
