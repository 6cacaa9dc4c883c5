"""pmapkit's bounded caches behind the core are LRUs, not FIFOs: a hit makes
its entry the newest, so the next entry over the bound evicts another.

Each is checked with three equations (or keys) and a bound of two: 1 and 2
kept, 1 hit, 3 added: 2 is evicted and 1 stays (a FIFO, or a hit that does
not refresh, drops 1). The equations are real ones: pmapkit.pmap bodies
traced by ``jax.make_jaxpr``, their programs compiled for real. (The core's
own per-function cache: tests/test_cache_eviction.py. The ``lru_cache``s of
``pjit._jit_of_body``, ``_jax_private`` and ``colocated_python.devices`` are
functools' own.)
"""
import types

import jax
import jax.numpy as jnp
import pytest

import pmapkit
from pmapkit.core.keys import _cache_keys, caches
from pmapkit.core.misses import calls
from pmapkit.core.programs import compiling
from pmapkit.core.lowering import kinds
from pmapkit.core.rules.primitives import pmap_p


def _find(jaxpr, primitive):
    for eqn in jaxpr.eqns:
        if eqn.primitive is primitive:
            return eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                found = _find(inner if hasattr(inner, "eqns") else value, primitive)
                if found is not None:
                    return found
    return None


def _equations():
    """Three pmap equations (params, input avals), each its own program."""
    out = []
    for body in (lambda x: x + 1, lambda x: x * 2, lambda x: x - 3):
        jaxpr = jax.make_jaxpr(pmapkit.pmap(body))(jnp.ones((1, 3)))
        eqn = _find(jaxpr.jaxpr, pmap_p)
        out.append((eqn.params, tuple(v.aval for v in eqn.invars)))
    return out


@pytest.fixture
def programs_bound_2():
    before = caches.cache_sizes()["programs"]
    pmapkit.clear_caches()
    pmapkit.set_cache_size(programs=2)
    try:
        yield
    finally:
        pmapkit.set_cache_size(programs=before)


def _lru_steps(use, kept):
    """1, 2, a hit on 1, then 3: ``kept(i)`` says whether equation i is cached."""
    one, two, three = _equations()
    use(*one)
    use(*two)
    assert kept(one) and kept(two)
    use(*one)        # a hit: 1 is the newest
    use(*three)      # over the bound: the least recently used (2) goes
    assert kept(one), "a hit did not make its entry the newest (FIFO)"
    assert not kept(two) and kept(three)


def test_compiled_programs_evict_the_least_recently_used(programs_bound_2):
    _lru_steps(
        lambda params, avals: compiling.compile_program(pmap_p, params, avals),
        lambda eq: _cache_keys.program_key(pmap_p, *eq, False) in compiling._compile_cache)


def test_outer_jits_evict_the_least_recently_used(programs_bound_2):
    _lru_steps(
        lambda params, avals: compiling._outer_jit(pmap_p, params, avals),
        lambda eq: _cache_keys.program_key(pmap_p, *eq, True) in compiling._outer_jits)


def test_program_shardings_evict_the_least_recently_used(programs_bound_2):
    _lru_steps(
        lambda params, avals: kinds.program_shardings(pmap_p, params, avals),
        lambda eq: _cache_keys.shardings_key(pmap_p, *eq) in kinds._shardings_memo)


def test_traced_bodies_evict_the_least_recently_used():
    cache = calls.TraceCache(size=2)
    traced = {k: types.SimpleNamespace(flat_args=(1,)) for k in "abc"}
    cache.put("a", traced["a"], 1)
    cache.put("b", traced["b"], 1)
    assert cache.get("a") is traced["a"]   # a hit: "a" is the newest
    cache.put("c", traced["c"], 1)
    assert cache.get("b") is None
    assert cache.get("a") is traced["a"] and cache.get("c") is traced["c"]
