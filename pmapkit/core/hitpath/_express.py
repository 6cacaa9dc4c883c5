"""The express call: a call of numpy arguments (beside, perhaps, device
arrays) run by a C++ call of JAX's (``CacheEntry.express``) whose cache
holds exactly the signature and jit configs of the call that primed it.

``prime`` makes and primes an entry's express from a hit-path call (its
trace context and signature found to be the entry's); an ``ExpressCall``
then runs the next calls of the same argument kinds, numpy dtypes and
shapes before anything else is read (``run``). That C++ call checks the
rest itself: its cache holds one signature (each device array's aval and
sharding too) with JAX's jit configs (the trace state, so a call under a
trace misses; the axis env, x64, the mesh contexts, ...); the
trace-context states it does not key on are watched and bump the epoch
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
    ``slot[0]``: the call's arguments with each numpy one a fresh array no
    other call holds, after the hit path checked its trace context and
    signature) runs JAX's miss, which gives the C++ call its one entry
    (``slot[1]``: it did); any other gets ``_EXPRESS_MISSED``."""
    def miss(*args, **kwargs):
        if not kwargs and _same_objects(args, slot[0]):
            result = jax_miss(*args)
            slot[1] = result[1] is not None
            return result
        # (outputs, no fast-path data, drop the entry made for the call)
        return (_EXPRESS_MISSED, None, True)
    return miss


def _same_objects(args, snapshot):
    """Whether ``args`` are the very objects of ``snapshot`` (None: never)."""
    if snapshot is None or len(args) != len(snapshot):
        return False
    for i in range(len(args)):
        if args[i] is not snapshot[i]:
            return False
    return True


def _refuse_express(*args, **kwargs):
    # What the express's C++ call runs under jax.disable_jit.
    return _EXPRESS_MISSED


def express_arguments(args, leaf_types):
    """Whether an express may run a call of ``args``: each a numpy array or
    a device array, of exactly those types, and one numpy array at least
    (a call of device arrays alone runs the executable itself, cheaper)."""
    ndarray_type = leaf_types.ndarray_type
    host = False
    for i in range(len(args)):
        t = type(args[i])
        if t is ndarray_type:
            host = True
        elif t is not leaf_types.array_type:
            return False
    return host


def prime(entry, args, epoch):
    """The flat outputs of this call (``args``: ``express_arguments``; its
    trace context and signature found to be ``entry``'s) run by ``entry``'s
    express call, made and primed by it if need be (at most
    ``MAX_EXPRESS_BUILDS`` times); None: run it as usual. ``epoch``: the
    epoch as it was before the call read its trace context. Afterwards
    ``entry.express`` is set where it may take the next such calls."""
    if not entry._host_routable(args, 0):
        # A device array not laid out as compiled (the hit path moves it),
        # or deleted (the hit path raises JAX's error): not JAX's call's.
        return None
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
        # Each numpy array a copy: read at the call (JAX's call may alias
        # an aligned array and run later).
        snapshot = entry._host_snapshot(args)
        slot[0] = snapshot
        outs = call(*snapshot)
        slot[0] = None
        if outs is _EXPRESS_MISSED:
            return None
        if not slot[1]:
            entry.make_express = None  # JAX's call keeps no entry for it
            return outs
        entry.express = call
        entry.express_epoch = epoch
        return outs
    outs = call(*entry._host_snapshot(args))
    if outs is _EXPRESS_MISSED:
        # Its C++ call lost its entry (JAX's cache evicts too): the next
        # call that gets here makes a fresh one.
        entry.express = None
        return None
    return outs


class ExpressCall:
    """Runs calls of ``args``' kinds (``express_arguments``: each numpy
    argument of its dtype and shape, each device array a device array) by
    ``entry``'s express (``cache`` holds the entry, ``shared`` its LRU)."""

    def __init__(self, entry, args, cache, shared):
        self.entry = entry
        self.ndarray_type = entry.types.ndarray_type
        self.array_type = entry.types.array_type
        # Per argument: a numpy one's (dtype, shape); None, a device array
        # (its aval and sharding are the C++ call's to check).
        self.host = tuple((x.dtype, x.shape) if type(x) is self.ndarray_type else None
                          for x in args)
        self.nargs = len(args)
        # The usual call, one numpy argument: its dtype and shape at hand.
        first = self.host[0] if self.nargs == 1 else None
        self.dtype = None if first is None else first[0]
        self.shape = None if first is None else first[1]
        self.cache = cache
        self.shared = shared
        # False once its express refused a call: the caller drops it (the
        # next hit makes an express again).
        self.live = True

    def run(self, args):
        """The result of a call of ``args`` of the express's kinds, dtypes
        and shapes, run by its C++ call on a snapshot of the numpy ones; or
        ``NOT_EXPRESS``: any other call, or one the express refuses."""
        entry = self.entry
        # Read once: another thread may drop it (a clear, an eviction).
        call = entry.express
        if (len(args) != self.nargs or entry.express_epoch != _express_epoch
                or call is None):
            return NOT_EXPRESS
        if self.nargs == 1:
            x = args[0]
            if (type(x) is not self.ndarray_type
                    or not same_host_signature(x, self.dtype, self.shape)):
                return NOT_EXPRESS
            outs = call(host_copy(x))
        else:
            host = self.host
            for i in range(self.nargs):
                x = args[i]
                signature = host[i]
                if signature is None:
                    if type(x) is not self.array_type:
                        return NOT_EXPRESS
                elif (type(x) is not self.ndarray_type
                        or not same_host_signature(x, signature[0], signature[1])):
                    return NOT_EXPRESS
            outs = call(*entry._host_snapshot(args))
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
