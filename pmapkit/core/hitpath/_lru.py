"""The shared LRU: the signature caches every wrapper of one function
shares (``SharedCaches``), bounded by recency, cleared in place.

Recency is a clock: a hit stamps its entry with the next tick
(``touch``: two integer writes, no lock, no change to any dict: a call
never sees another's key missing, whatever that key's hashing runs), a
compile stamps it too (``settle``), and eviction drops the entries of the
oldest stamps (``evict``, on a compile beyond the bound: the rare path pays
the sort). Every change of a cache's keys holds the shared lock.

Compiled by Cython (typed by ``_lru.pxd``) and runnable as plain Python,
like every module of the hit path (``_compiled``). In plain Python two
threads may read the clock at once and stamp two entries alike: a tie,
which eviction breaks by the cache's order (its oldest insertion first).
"""
import itertools
import threading
import weakref

# Cached signatures per function (per trace context) unless set otherwise;
# the least recently used is evicted beyond it.
DEFAULT_CACHE_SIZE = 256


class SharedCaches:
    """What every wrapper of one function with one set of parameters shares:
    the signature caches (per trace context), the leaf-signature tables that
    key them, the id counter, the lock, the recency clock, and whether global
    arrays sign apart.

    An entry's recency is its ``last_use``, the value of ``clock`` when it
    was last used (whichever sharer used it), the clock counting uses.
    Every change of a cache's keys holds ``lock``.

    Held by the wrappers and by the Python side's weak registry (keyed by the
    function), so it must not refer to the function: entries hold compiled
    programs only. Its containers are only ever mutated in place (cleared,
    never replaced), so every sharer keeps seeing the same ones.
    """

    def __init__(self):
        self.caches = {}
        self.sig_ids = {}
        self.aval_ids = {}
        self.placed_ids = {}
        self.next_id = itertools.count()
        self.lock = threading.Lock()
        self.sign_global = False
        self.clock = 0
        self.members = weakref.WeakSet()
        # The context last selected by a sharer: a new wrapper starts there.
        self.current = (None, None, {})


def insert(shared, cache, key, fresh):
    """The entry of ``key`` in ``cache``: ``fresh``, put there now, unless
    one is there. (Apart from the call: a ``with`` there costs every hit
    the set-up and clean-up of its temporaries.)"""
    fresh.key = key
    with shared.lock:
        return cache.setdefault(key, fresh)


def touch(shared, entry):
    """A use of ``entry``: it becomes the most recently used of its cache."""
    tick = shared.clock + 1
    shared.clock = tick
    entry.last_use = tick


def settle(shared, cache, key, entry, keep, limit):
    """After ``entry``'s compile: keep it as the most recent of ``cache`` (a
    compile is a use) and the cache within ``limit``, or drop it
    (``keep`` False). Returns how many entries were evicted."""
    with shared.lock:
        if cache.get(key) is entry:
            if keep:
                entry.key = key
                touch(shared, entry)
            else:
                del cache[key]
        if keep and len(cache) > limit:
            return evict(shared, cache, limit)
    return 0


def replace(shared, cache, key, failed, fresh):
    """Put ``fresh`` in place of ``failed`` under ``key``; False when
    ``failed`` is no longer there (replaced or cleared meanwhile)."""
    fresh.key = failed.key  # the key object the cache keeps
    with shared.lock:
        if cache.get(key) is failed:
            cache[key] = fresh
            return True
    return False


def evict(shared, cache, limit):
    """Drop the least recently used ready entries (the oldest stamps;
    among equal stamps the first in the cache's order) until it holds
    ``limit`` (caller holds the lock). Returns how many were dropped."""
    excess = len(cache) - limit
    if excess <= 0:
        return 0
    ready = []
    order = 0
    for k, e in cache.items():
        if e.ready:  # one being compiled stays: its callers wait on it
            ready.append((e.last_use, order, k))
        order += 1
    ready.sort(key=_stamp)
    doomed = ready[:excess]
    for stamp in doomed:
        e = cache.pop(stamp[2])
        e.express = None
    return len(doomed)


def _stamp(item):
    # (last_use, order in the cache): keys themselves are never compared.
    return (item[0], item[1])


def evict_all(shared, limit):
    """Every context's cache brought within ``limit``; how many were dropped."""
    dropped = 0
    with shared.lock:
        for cache in list(shared.caches.values()):
            dropped += evict(shared, cache, limit)
    return dropped


def clear(shared):
    """Empty every cache (in place: each sharer's selected context stays
    one of them)."""
    with shared.lock:
        for cache in list(shared.caches.values()):
            for entry in list(cache.values()):
                entry.express = None
            cache.clear()


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_stamp).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
