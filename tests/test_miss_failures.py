"""A cache miss's error reaches only the call it belongs to (issue 33, item 1).

With ``in_shardings`` given, a numpy array and an array committed to a device
the pjit does not use sign alike (the hit path checks committed devices, the
key does not hold them), so both calls find one cache entry. The tests hold
the committed call's miss inside its trace until the numpy call is seen
waiting on that very entry, then let the miss fail: the waiter must get its
own result, and the next calls of the signature take the compiled path.
Run in both builds (``test_pure_python_mode.py`` re-runs this file with
``PMAPKIT_PUREPYTHON=1``).
"""
import threading
import time

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import pmapkit

DEVICES_ERROR = "Pjit's devices and Array's devices should be equal"


def _entries(fn):
    return [e for cache in fn._shared.caches.values() for e in cache.values()]


def _waiting_on(fn, timeout=30.0):
    """Block until some thread waits on an entry of ``fn``; that entry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in _entries(fn):
            # threading.Event keeps its waiters in its condition's deque.
            if not entry.ready and entry.event._cond._waiters:
                return entry
        time.sleep(0.001)
    raise AssertionError("no call started waiting on the entry being compiled")


class HeldTrace:
    """A body whose first trace blocks until released (the miss in flight)."""

    def __init__(self):
        self.tracing = threading.Event()
        self.release = threading.Event()
        self.traces = 0

    def __call__(self, v):
        self.traces += 1
        if self.traces == 1:
            self.tracing.set()
            assert self.release.wait(30), "the test never released the trace"
        return v * 2 + 1


def _run(target, results, name):
    def run():
        try:
            results[name] = ("ok", target())
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            results[name] = ("raised", exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def two_device_sharding():
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    return NamedSharding(mesh, PartitionSpec())


def test_waiter_on_a_failed_miss_gets_its_own_result(two_device_sharding):
    body = HeldTrace()
    f = pmapkit.pjit(body, in_shardings=two_device_sharding)
    x = np.arange(8, dtype=np.float32)
    elsewhere = jax.device_put(x, jax.devices()[3])  # the documented refusal
    results = {}

    failing = _run(lambda: f(elsewhere), results, "elsewhere")
    assert body.tracing.wait(30)
    # A fresh wrapper of the same function shares the entry being compiled.
    waiting = _run(lambda: pmapkit.pjit(body, in_shardings=two_device_sharding)(x),
                   results, "host")
    entry = _waiting_on(f)
    body.release.set()
    failing.join(60)
    waiting.join(60)

    kind, err = results["elsewhere"]
    assert kind == "raised" and isinstance(err, ValueError), results
    assert DEVICES_ERROR in str(err)
    kind, out = results["host"]
    assert kind == "ok", f"the waiter got another call's error: {out!r}"
    np.testing.assert_array_equal(np.asarray(out), x * 2 + 1)
    assert entry.failure is not None and entry.failure.startswith("ValueError")
    # The waiter compiled its own entry in place of the failed one: later
    # calls of the signature hit it, and the refused input is still refused.
    (current,) = _entries(f)
    assert current is not entry and current.ready and not current.fallback
    misses = f._debug_dispatch_stats()["misses"]
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2 + 1)
    assert f._debug_dispatch_stats()["misses"] == misses
    with pytest.raises(ValueError, match=DEVICES_ERROR):
        f(elsewhere)


def test_a_failed_entry_never_raises_for_a_later_valid_call(two_device_sharding):
    f = pmapkit.pjit(lambda v: v - 1, in_shardings=two_device_sharding)
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(ValueError, match=DEVICES_ERROR):
        f(jax.device_put(x, jax.devices()[3]))
    (failed,) = _entries(f)
    assert failed.ready and failed.failure is not None
    assert "failed (ValueError: Pjit's devices" in f._debug_cache_keys()
    # The next call compiles its own entry and takes the fast path after it.
    np.testing.assert_array_equal(np.asarray(f(x)), x - 1)
    (entry,) = _entries(f)
    assert entry is not failed and not entry.fallback
    misses = f._debug_dispatch_stats()["misses"]
    np.testing.assert_array_equal(np.asarray(f(x)), x - 1)
    assert f._debug_dispatch_stats()["misses"] == misses


def test_waiters_on_a_miss_that_fails_for_their_signature_too():
    """Every call of a signature that always fails raises its own error
    (several waiters, one failed compile), and nothing hangs."""
    body = HeldTrace()
    g = pmapkit.pmap(lambda v: body(v).reshape(-1, 3))
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    results = {}
    first = _run(lambda: g(x), results, "first")
    assert body.tracing.wait(30)
    others = [_run(lambda: g(x), results, f"other{k}") for k in range(3)]
    _waiting_on(g)
    body.release.set()
    for t in [first, *others]:
        t.join(60)
    assert sorted(results) == ["first", "other0", "other1", "other2"]
    for kind, err in results.values():
        assert kind == "raised" and isinstance(err, TypeError), results
        assert "reshape" in str(err)
    # Each raised its own exception object (no error handed between calls).
    assert len({id(err) for _, err in results.values()}) == 4
