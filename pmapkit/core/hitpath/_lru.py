"""The shared LRU: the signature caches every wrapper of one function
shares (``SharedCaches``), kept in recency order, bounded, cleared in place.

A cache's order is its recency, oldest first: a hit moves its entry to the
end (``refresh``), a compile puts it there (``settle``), eviction pops from
the front (``evict``). Every change of a cache's keys holds the shared lock,
except a hit's move of a key whose hashing and comparing cannot run Python
code (``CacheEntry.plain_key``) in the compiled build: there the move is two
dict operations no other thread can come between (the GIL is not let go
inside them), so it takes no lock.

Compiled by Cython (typed by ``_lru.pxd``) and runnable as plain Python,
like every module of the hit path (``_compiled``).
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
    key them, the id counter, the lock, and whether global arrays sign apart.

    A cache's order is its recency, oldest first: a hit moves its entry to
    the end (whichever sharer hits it), a compile puts it there, eviction
    pops from the front. ``newest`` is the entry last put at the end of its
    cache: a hit on it moves nothing (the common case, one signature called
    again and again, costs a pointer comparison). Every change of a cache's
    keys holds ``lock`` (but a compiled move of a plain key: ``refresh``): a
    call finding its key gone while another moves it waits for the move
    there instead of compiling it anew.

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
        self.newest = None
        self.members = weakref.WeakSet()
        # The context last selected by a sharer: a new wrapper starts there.
        self.current = (None, None, {})


def insert(shared, cache, key, fresh):
    """The entry of ``key`` in ``cache``: ``fresh``, put there now, unless
    one is there. (Apart from the call: a ``with`` there costs every hit
    the set-up and clean-up of its temporaries.)"""
    fresh.key = key
    fresh.plain_key = is_plain_key(key)
    with shared.lock:
        return cache.setdefault(key, fresh)


def is_plain_key(key):
    """Whether hashing and comparing ``key`` runs no Python code: a tuple of
    ints only (a simple key of leaves: no static value, no treedef, no
    keyword name)."""
    if type(key) is not tuple:
        return False
    for item in key:
        if type(item) is not int:
            return False
    return True


def refresh(shared, cache, entry):
    """Move ``entry`` to the end of ``cache`` (the newest), if its key is
    still there (not evicted or cleared meanwhile; the entry there may be
    one that replaced it)."""
    key = entry.key
    if _COMPILED and entry.plain_key:
        # No Python code runs between the pop and the put (ints hash and
        # compare in C): no other thread sees the key missing.
        held = cache.pop(key, None)
        if held is not None:
            cache[key] = held
            held.key = key
            shared.newest = held
        return
    lock = shared.lock
    # The lock's methods called, not ``with``: half the cost here.
    lock.acquire()
    try:
        held = cache.pop(key, None)
        if held is not None:
            cache[key] = held
            held.key = key
            shared.newest = held
    finally:
        lock.release()


def settle(shared, cache, key, entry, keep, limit):
    """After ``entry``'s compile: keep it as the newest of ``cache`` (a
    compile is a use) and the cache within ``limit``, or drop it
    (``keep`` False). Returns how many entries were evicted."""
    with shared.lock:
        if cache.get(key) is entry:
            del cache[key]
            if keep:
                cache[key] = entry
                entry.key = key
                shared.newest = entry
        if keep and len(cache) > limit:
            return evict(shared, cache, limit)
    return 0


def replace(shared, cache, key, failed, fresh):
    """Put ``fresh`` in place of ``failed`` under ``key``; False when
    ``failed`` is no longer there (replaced or cleared meanwhile)."""
    fresh.key = failed.key  # the key object the cache keeps
    fresh.plain_key = failed.plain_key
    with shared.lock:
        if cache.get(key) is failed:
            cache[key] = fresh
            return True
    return False


def evict(shared, cache, limit):
    """Drop the least recently used ready entries, the first in the
    cache's order, until it holds ``limit`` (caller holds the lock).
    Returns how many were dropped."""
    excess = len(cache) - limit
    if excess <= 0:
        return 0
    doomed = []
    for k, e in cache.items():
        if e.ready:  # one being compiled stays: its callers wait on it
            doomed.append(k)
            if len(doomed) == excess:
                break
    for k in doomed:
        e = cache.pop(k)
        e.express = None
        if e is shared.newest:
            shared.newest = None
    return len(doomed)


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
        shared.newest = None


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(is_plain_key).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
