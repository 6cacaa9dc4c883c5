"""Which calls JAX's call of the program runs (the host route), as a table.

The program decides once whether calls carrying host values may go to JAX's
call (``CompiledProgram.host_route_refusal``), the signature adds its
results' placement (``CompiledProgram.fastpath``), and the fast-path data
carries the decision with the reason for a refusal in words
(``FastpathData.host_refusal``, one of ``HOST_ROUTE_REFUSALS``). Each call
then asks only its own leaves (``CacheEntry._host_routable``): host values
and live arrays laid out as compiled go to JAX's call; a misplaced array
sends the call to the hit path, which moves it; a deleted one raises JAX's
error.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import pmapkit
from pmapkit import host_callback as hcb
from pmapkit.core.programs import compiled_program

ONE = jax.devices()[:1]


def _entry(fn):
    entries = [e for cache in fn._shared.caches.values() for e in cache.values()]
    assert len(entries) == 1, entries
    return entries[0]


def _tap(x):
    hcb.id_tap(lambda *a: None, x)
    return x + 1


def _pmap(devices=ONE, **kw):
    return lambda f: pmapkit.pmap(f, devices=devices, **kw)


# name, how the function is made, its body, its arguments -> the refusal
# (None: calls carrying host values may go to JAX's call).
PROGRAMS = [
    ("one device", _pmap(), lambda x: x + 1, lambda: (np.ones((1, 4), np.float32),), None),
    ("8 devices", _pmap(jax.devices()), lambda x: x + 1,
     lambda: (np.ones((8, 4), np.float32),), "several devices"),
    ("donation", _pmap(donate_argnums=0), lambda x: x + 1,
     lambda: (np.ones((1, 4), np.float32),), "donation"),
    ("pruned input", _pmap(), lambda x, unused: x + 1,
     lambda: (np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)), "pruned inputs"),
    ("effects", _pmap(), _tap, lambda: (np.ones((1, 4), np.float32),), "effects"),
    ("key input", _pmap(), lambda k: jax.random.key_data(k),
     lambda: (jax.random.split(jax.random.key(0), 1),), "key or float0 values"),
    ("1 MiB input", _pmap(), lambda x: x + 1,
     lambda: (np.ones((1, 1 << 18), np.float32),), "an input over 256 KiB"),
    ("device= results", lambda f: pmapkit.pjit(f, device=jax.devices()[0]), lambda x: x + 1,
     lambda: (np.ones(4, np.float32),), "results placed otherwise"),
    ("uncommitted results", lambda f: pmapkit.pjit(f), lambda x: x + 1,
     lambda: (np.ones(4, np.float32),), "uncommitted results"),
]


@pytest.mark.parametrize("name, make, body, args, refusal", PROGRAMS,
                         ids=[row[0] for row in PROGRAMS])
def test_each_program_decides_once_with_a_named_reason(name, make, body, args, refusal):
    fn = make(body)
    fn(*args())
    entry = _entry(fn)
    assert entry.host_refusal == refusal, name
    assert (entry.host_call is None) == (refusal is not None)
    assert refusal is None or refusal in compiled_program.HOST_ROUTE_REFUSALS


def test_made_under_disable_jit_the_route_is_refused():
    fn = pmapkit.pmap(lambda x: x + 1, devices=ONE)
    with jax.disable_jit():
        fn(np.ones((1, 4), np.float32))
    assert _entry(fn).host_refusal == "jit disabled"


def _arrays():
    placed = pmapkit.pmap(lambda v: v, devices=ONE)(np.zeros((1, 4), np.float32))
    misplaced = jax.device_put(np.zeros((1, 4), np.float32), jax.devices()[3])
    deleted = pmapkit.pmap(lambda v: v, devices=ONE)(np.zeros((1, 4), np.float32))
    deleted.delete()
    return {"placed": placed, "misplaced": misplaced, "deleted": deleted}


# The leaves of one call of a routable program -> the route it takes.
CALLS = [
    (("numpy", "placed"), "host"),
    (("scalar", "placed"), "host"),
    (("numpy", "numpy"), "host"),
    (("placed", "placed"), "hit"),        # no host value: nothing to put
    (("numpy", "misplaced"), "hit"),      # moved by the hit path
    (("numpy", "deleted"), RuntimeError),  # JAX's "Array has been deleted"
]


@pytest.mark.parametrize("kinds, route", CALLS, ids=["-".join(k) for k, _ in CALLS])
def test_each_call_asks_only_its_leaves(kinds, route):
    fn = pmapkit.pmap(lambda a, b: a * 2 + b, devices=ONE, in_axes=(0, 0))
    values = dict(_arrays(), numpy=np.ones((1, 4), np.float32))
    values["scalar"] = None
    fn(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32))
    leaves = [values[k] if k != "scalar" else 1.0 for k in kinds]
    if kinds[0] == "scalar":
        fn = pmapkit.pmap(lambda a, b: a * 2 + b, devices=ONE, in_axes=(None, 0))
        fn(1.0, np.ones((1, 4), np.float32))
    entry = _entry(fn)
    assert entry.host_refusal is None
    if route is RuntimeError:
        with pytest.raises(RuntimeError, match="deleted"):
            entry.shard(leaves)
        with pytest.raises(RuntimeError, match="deleted"):
            fn(*leaves)
        return
    assert ("host" if entry.shard(leaves) is None else "hit") == route
    want = 2 * np.asarray(leaves[0], np.float32) + np.asarray(leaves[1])
    np.testing.assert_array_equal(np.asarray(fn(*leaves)), want)


def test_an_unnamed_refusal_is_refused():
    fn = pmapkit.pmap(lambda x: x + 1, devices=ONE)
    program = fn.lower(jnp.ones((1, 4))).compile()._executable.program
    data = program.fastpath(None)
    assert data.host_refusal is None and data.host_call is program.host_call()
    with pytest.raises(ValueError, match="unnamed host-route refusal"):
        data.refuse_host_route("because")
