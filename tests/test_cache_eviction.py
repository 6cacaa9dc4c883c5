"""The per-function cache evicts its least recently used entry, whichever
wrapper of the function used it.

Recency is the shared LRU's clock (``SharedCaches``): a hit or a compile
stamps its entry, eviction drops the oldest stamps. Each test
plays a sequence of calls against a reference LRU (an ``OrderedDict``) and
checks every call: a miss exactly where the reference misses. A sequence
where a hit must save an entry that FIFO would drop tells LRU from FIFO, and
from a hit that does not refresh.

Misses are the core's own counter (``_debug_dispatch_stats``: calls that ran
the Python miss path), evictions too. A signature evicted by the core is
still traced and compiled in the Python caches behind it, so a miss here
costs a lookup there, not a compile.
"""
import collections
import gc
import random
import threading
import time

import jax.numpy as jnp

import pmapkit

#: Five call signatures of one function (shapes (1,) to (5,)).
INPUTS = [jnp.ones(k) for k in range(1, 6)]


def _misses(*wrappers):
    return sum(w._debug_dispatch_stats()["misses"] for w in wrappers)


class ReferenceLRU:
    """What an LRU of ``size`` entries does: True where a call misses."""

    def __init__(self, size):
        self.size = size
        self.order = collections.OrderedDict()

    def call(self, sig):
        if sig in self.order:
            self.order.move_to_end(sig)
            return False
        self.order[sig] = None
        if len(self.order) > self.size:
            self.order.popitem(last=False)
        return True


def _play(wrappers, calls, size):
    """Call ``wrappers[w](INPUTS[sig])`` for each ``(w, sig)`` and check each
    call's miss against the reference; the calls' misses in order."""
    for w in wrappers:
        w._set_cache_size(size)
    reference = ReferenceLRU(size)
    seen = []
    for step, (w, sig) in enumerate(calls):
        before = _misses(*wrappers)
        wrappers[w](INPUTS[sig])
        missed = _misses(*wrappers) - before == 1
        expected = reference.call(sig)
        assert missed == expected, (
            f"call {step} (wrapper {w}, signature {sig}): "
            f"{'a miss' if missed else 'a hit'}, the LRU says "
            f"{'a miss' if expected else 'a hit'}; calls so far {calls[:step + 1]}")
        seen.append(missed)
    return seen


def test_a_hit_refreshes_recency_lru_not_fifo():
    def f(x):
        return x + 1

    a = pmapkit.pjit(f)
    # 0 and 1 cached; a hit on 0 makes 1 the oldest: 2 evicts 1, so 0 hits
    # again. FIFO (or a hit not refreshing) evicts 0 there and misses it.
    misses = _play([a], [(0, 0), (0, 1), (0, 0), (0, 2), (0, 0), (0, 1)], size=2)
    assert misses == [True, True, False, True, False, True]
    assert a._debug_dispatch_stats()["evictions"] == 2


def test_hits_on_an_older_entry_after_the_newest_move_it():
    def f(x):
        return x * 3

    a = pmapkit.pjit(f)
    # Hits alternate between entries (the newest changes at each), then
    # repeat one (the newest, moved nowhere): each eviction is the LRU's.
    calls = [(0, s) for s in (0, 1, 2, 0, 1, 1, 0, 3, 2, 0, 0, 4, 1, 3, 0, 2, 4, 4, 1)]
    _play([a], calls, size=3)


def test_a_fresh_wrappers_most_recent_signature_is_not_evicted():
    def f(x):
        return x * 2

    a = pmapkit.pjit(f)
    b = pmapkit.pjit(f)  # shares a's entries
    # 0 most used by a, 1 hit by b last: 2 evicts 0 (not b's 1), by either.
    misses = _play([a, b], [(0, 0), (0, 1)] + [(0, 0)] * 20 + [(1, 1), (1, 2), (1, 1),
                                                                 (0, 2), (0, 0)], size=2)
    assert misses[-5:] == [False, True, False, False, True]
    assert b._cache_size == 2


def test_shared_wrappers_interleaved_keep_one_recency():
    def f(x):
        return x - 1

    a, b, c = pmapkit.pjit(f), pmapkit.pjit(f), pmapkit.pjit(f)
    # Each wrapper hits what another made newest, and repeats its own.
    sigs = (0, 1, 2, 0, 0, 1, 3, 1, 2, 2, 0, 4, 4, 1, 3, 0, 2, 1, 1, 4, 0)
    calls = [(step % 3, s) for step, s in enumerate(sigs)]
    _play([a, b, c], calls, size=3)


def test_a_wrappers_repeated_hit_after_another_wrappers_hit_moves_its_entry():
    def f(x):
        return x + 2

    a, b = pmapkit.pjit(f), pmapkit.pjit(f)
    # a's second hit on 0 comes after b made 1 the newest: 0 must move again
    # (one newest for all sharers, not one per wrapper), so 2 evicts 1.
    calls = [(0, 0), (1, 1), (0, 0), (1, 1), (0, 0), (1, 2), (0, 0), (1, 1)]
    misses = _play([a, b], calls, size=2)
    assert misses == [True, True, False, False, False, True, False, True]


def test_shared_wrappers_random_calls_follow_the_lru():
    def f(x):
        return x * 5

    a, b = pmapkit.pjit(f), pmapkit.pjit(f)
    rng = random.Random(47)
    calls = [(rng.randrange(2), rng.randrange(5)) for _ in range(80)]
    _play([a, b], calls, size=3)


def test_clearing_and_evicting_keep_no_entry_alive():
    from pmapkit.core.hitpath._compiled import feed

    def f(x):
        return x / 2

    def held_entries(shared):
        # What the shared LRU itself refers to, its caches aside: no entry.
        return [r for r in gc.get_referents(shared) if isinstance(r, feed.CacheEntry)]

    a = pmapkit.pjit(f)
    a._set_cache_size(1)
    a(INPUTS[0])
    a._set_cache_size(1)
    a(INPUTS[1])  # evicts 0
    assert a._cache_size == 1
    assert held_entries(a._shared) == []
    a.clear_cache()
    # A cleared cache holds no compiled program alive.
    assert a._cache_size == 0 and held_entries(a._shared) == []
    assert all(not cache for cache in a._shared.caches.values())
    a(INPUTS[1])
    assert _misses(a) == 3


class _SlowHash:
    """A static argument whose hash runs Python that lets other threads in
    (as a pytree's aux data or any user static may): other threads run
    between the lookups of its key."""

    def __init__(self, tag):
        self.tag = tag

    def __hash__(self):
        time.sleep(0)
        return hash(self.tag)

    def __eq__(self, other):
        time.sleep(0)
        return isinstance(other, _SlowHash) and other.tag == self.tag


def test_threads_moving_entries_never_compile_a_cached_signature_again():
    def f(x, s):
        return x + 1

    a = pmapkit.pjit(f, static_argnums=1)
    static = _SlowHash("s")
    inputs = INPUTS[:2]
    for x in inputs:
        a(x, static)
    assert _misses(a) == 2
    errors = []

    def hammer(offset):
        try:
            for step in range(200):  # alternating: every hit stamps another entry
                x = inputs[(step + offset) % 2]
                assert a(x, static).shape == x.shape
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    # A hit never takes its key out of the cache: no signature ran its
    # miss again.
    assert _misses(a) == 2
    assert a._cache_size == 2


def _stamps(f):
    (cache,) = [c for c in f._shared.caches.values() if c]
    return {key: entry.last_use for key, entry in cache.items()}


def test_a_hit_stamps_its_entry_without_the_lock_whatever_its_key():
    # Recency is a clock: a hit writes its entry's stamp and changes no
    # dict, so it takes no lock, on either build, for a key of leaf ids and
    # for one holding a static value alike. Checked by holding the lock
    # meanwhile; the stamps then order the entries by their last use.
    f = pmapkit.pmap(lambda x: x + 1)
    a, b = jnp.ones((1, 2)), jnp.ones((1, 3))
    g = pmapkit.pmap(lambda x, k: x * k, static_broadcasted_argnums=1)
    for fn, first, second in ((f, (a,), (b,)), (g, (a, 2.0), (a, 3.0))):
        fn(*first)
        fn(*second)
        before = _stamps(fn)
        order = list(before)  # the cache's keys: first's, then second's
        assert before[order[0]] < before[order[1]]
        done = threading.Event()
        lock = fn._shared.lock
        lock.acquire()
        try:
            worker = threading.Thread(target=lambda: (fn(*first), done.set()))
            worker.start()
            assert done.wait(30)  # the hit did not wait for the lock
        finally:
            lock.release()
        worker.join(30)
        after = _stamps(fn)
        assert list(after) == order  # no key moved
        assert after[order[0]] > after[order[1]] == before[order[1]]


def test_alternating_signatures_under_threads_and_clears_stay_right():
    # Lock-free stamps racing compiles, evictions and clears: every value
    # right, the cache within its bound.
    f = pmapkit.pmap(lambda x: x * 2)
    f._set_cache_size(3)
    inputs = [jnp.full((1, k), float(k)) for k in range(1, 6)]
    errors = []

    def run(seed):
        rng = random.Random(seed)
        for _ in range(150):
            k = rng.randrange(len(inputs))
            out = f(inputs[k])
            if not bool((out == 2.0 * (k + 1)).all()) or out.shape != (1, k + 1):
                errors.append((k, out))
            if rng.random() < 0.02:
                f.clear_cache()
    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert f._debug_dispatch_stats()["cache_size"] <= 3
