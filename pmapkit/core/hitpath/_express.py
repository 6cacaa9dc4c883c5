"""The express call: a call of one numpy argument run by a C++ call of
JAX's (``CacheEntry.express``) whose cache holds exactly the signature and
jit configs of the call that primed it.

``prime`` makes and primes an entry's express from a hit-path call (its
trace context and signature found to be the entry's); an ``ExpressCall``
then runs the next calls of that dtype and shape before anything else is
read (``run``). That C++ call checks the rest itself: its cache holds one
signature with JAX's jit configs (the trace state, so a call under a trace
misses; the axis env, x64, the mesh contexts, ...); the trace-context
states it does not key on are watched and bump the epoch
(``new_express_epoch``), which makes every express made before stale.

Compiled by Cython (typed by ``_express.pxd``) and runnable as plain
Python, like every module of the hit path (``_compiled``).
"""
from pmapkit.core.hitpath._feed import CacheEntry, host_copy, same_host_signature
from pmapkit.core.hitpath._lru import SharedCaches, touch

# Builds of an entry's express call (``CacheEntry.express``) before it stops
# making them: each change of a watched config state makes the next one.
MAX_EXPRESS_BUILDS = 8

# What an express call returns for a call its C++ cache has no entry for:
# not the call it was made for (another trace context, a trace,
# ``jax.disable_jit``); that call takes the hit path. Its miss gives the C++
# call no entry and has it drop the one it made (no exception crosses C++,
# and nothing builds up there).
_EXPRESS_MISSED = object()

# What ``ExpressCall.run`` returns for a call it does not run.
NOT_EXPRESS = object()

# Bumped (``new_express_epoch``) whenever a config state of JAX's trace
# context that JAX's C++ call does not key on may have changed; an express
# made before is not used again.
_express_epoch = 0


def new_express_epoch():
    """Every express made so far is stale (a watched config state changed)."""
    global _express_epoch
    _express_epoch += 1


def express_epoch():
    """The epoch now (read by a call before its trace context)."""
    return _express_epoch


def _express_guard(slot, jax_miss):
    """The miss of an express call: only the call priming it (its snapshot,
    ``slot[0]``, a fresh array no other call holds, after the hit path
    checked its trace context and signature) runs JAX's miss, which gives
    the C++ call its one entry (``slot[1]``: it did); any other gets
    ``_EXPRESS_MISSED``."""
    def miss(*args, **kwargs):
        if len(args) == 1 and not kwargs and args[0] is slot[0]:
            result = jax_miss(*args)
            slot[1] = result[1] is not None
            return result
        # (outputs, no fast-path data, drop the entry made for the call)
        return (_EXPRESS_MISSED, None, True)
    return miss


def _refuse_express(*args, **kwargs):
    # What the express's C++ call runs under jax.disable_jit.
    return _EXPRESS_MISSED


def prime(entry, x, epoch):
    """The flat outputs of this call (one numpy argument ``x``, its trace
    context and signature found to be ``entry``'s) run by ``entry``'s
    express call, made and primed by it if need be (at most
    ``MAX_EXPRESS_BUILDS`` times); None: run it as usual. ``epoch``: the
    epoch as it was before the call read its trace context. Afterwards
    ``entry.express`` is set where it may take the next such calls."""
    call = entry.express
    if call is None or entry.express_epoch != epoch:
        if entry.express_builds >= MAX_EXPRESS_BUILDS:
            return None
        entry.express_builds += 1
        entry.express = None
        slot = [None, False]
        call = entry.make_express(_express_guard, slot, _refuse_express)
        if call is None:
            entry.make_express = None
            return None
        snapshot = host_copy(x)
        slot[0] = snapshot
        outs = call(snapshot)
        slot[0] = None
        if outs is _EXPRESS_MISSED:
            return None
        if not slot[1]:
            entry.make_express = None  # JAX's call keeps no entry for it
            return outs
        entry.express = call
        entry.express_epoch = epoch
        return outs
    outs = call(host_copy(x))
    if outs is _EXPRESS_MISSED:
        # Its C++ call lost its entry (JAX's cache evicts too): the next
        # call that gets here makes a fresh one.
        entry.express = None
        return None
    return outs


class ExpressCall:
    """Runs calls of one numpy argument of ``dtype`` and ``shape`` by
    ``entry``'s express (``cache`` holds the entry, ``shared`` its LRU)."""

    def __init__(self, entry, dtype, shape, cache, shared):
        self.entry = entry
        self.ndarray_type = entry.types.ndarray_type
        self.dtype = dtype
        self.shape = shape
        self.cache = cache
        self.shared = shared
        # False once its express refused a call: the caller drops it (the
        # next hit makes an express again).
        self.live = True

    def run(self, x):
        """The result of a call of one numpy argument ``x`` of the express's
        dtype and shape, run by its C++ call on a snapshot of the array;
        or ``NOT_EXPRESS``: any other call, or one the express refuses."""
        entry = self.entry
        # Read once: another thread may drop it (a clear, an eviction).
        call = entry.express
        if (type(x) is not self.ndarray_type or entry.express_epoch != _express_epoch
                or call is None or not same_host_signature(x, self.dtype, self.shape)):
            return NOT_EXPRESS
        outs = call(host_copy(x))
        if outs is _EXPRESS_MISSED:
            self.live = False
            return NOT_EXPRESS
        touch(self.shared, entry)
        if entry.single_out:
            return outs[0]
        return entry.unflatten(outs)


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_refuse_express).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
