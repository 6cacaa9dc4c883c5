"""Feeding a call: what one signature compiled to (``CacheEntry``) and how a
call's leaves reach its executable: device arrays passed on or moved, host
values put or handed to JAX's call, donated inputs checked and run under
one lock.

``FastpathData`` is the contract between the miss path, which writes it
(``pmapkit.core.programs.compiled_program``), and ``CacheEntry.populate``,
which reads it: its fields are declared here (``_feed.pxd``), beside their
consumer, and nothing else crosses.

Compiled by Cython (typed by ``_feed.pxd``) and runnable as plain Python,
like every module of the hit path (``_compiled``).
"""
import operator
import threading

# Bumped whenever the fields of the fast-path data change; cache_miss stamps it.
FASTPATH_VERSION = 6
# Sharding objects remembered per input as equivalent to the compiled one,
# and as not (each distinct producer of inputs brings one; more evict the
# oldest).
MAX_EQUIVALENTS = 8


class ArgumentAliasError(ValueError):
    """One array passed in two argument positions, at least one donated.

    Raised by the miss path before anything runs. It depends on the values of
    one call, not on its signature, so it never marks a cache entry."""


class FastpathData:
    """What one compiled signature's calls need to run without Python: the
    miss path's product, read once by ``CacheEntry.populate``.

    ``in_shardings``/``host_specs`` are per kept input; ``kept`` maps kept
    input j to flat leaf index (None: all leaves kept, in order). Its
    seventeen fields are declared (``_feed.pxd``): a field the consumer
    does not know cannot be written (compiled build).
    """

    def __init__(self):
        # ``FASTPATH_VERSION`` when the writer made it for this core.
        self.version = None
        self.program = None
        self.n_inputs = 0  # flat leaves a call passes
        self.executable = None
        self.kept = None
        self.in_shardings = None
        self.host_specs = None
        self.out_handlers = None
        self.out_treedef = None
        self.shard_fallback = None
        self.is_equivalent = None
        # Moves misplaced device arrays, all of a call's in one go (None:
        # each goes to ``shard_fallback``).
        self.mover = None
        # Whether global arrays must sign apart from local ones of the same
        # shape (``DispatchFunction`` then keys them apart).
        self.signs_global = False
        # Flat indices of donated leaves (None: the program donates nothing).
        self.donated = None
        # JAX's C++ call for calls carrying host values (None: they are put
        # by ``host_specs``, for the reason ``host_refusal`` names).
        self.host_call = None
        self.host_refusal = "not decided"
        # Makes the express call of a signature with one numpy input
        # (``_express``); None: never.
        self.make_express = None


class LeafTypes:
    """The leaf classes the hot path recognises and how it treats them; made
    once (see ``pmapkit.core.programs.compiled_program.LEAF_TYPES``) and shared by every entry.

    ``readers``: ``(aval_of, sharding_of, committed_of, is_deleted_of)``,
    each called with one array of exactly ``array_type``: its ``aval``, its
    ``sharding_attr``, its ``_committed``, its ``is_deleted()``. Given the
    getters themselves (``_jax_private.array_readers``), a read is one call,
    not Python's attribute protocol (a lookup through the type, then the
    property); None: read by name."""

    def __init__(self, array_type, ndarray_type, host_scalar_type, asarray,
                 sharding_attr, raise_deleted, key_type=None, readers=None):
        self.array_type = array_type
        self.ndarray_type = ndarray_type
        self.host_scalar_type = host_scalar_type
        self.asarray = asarray
        self.sharding_attr = sharding_attr
        self.raise_deleted = raise_deleted
        # Typed PRNG key arrays: a logical view over a ``_base_array`` of
        # ``array_type`` (the physical buffers the executable takes).
        self.key_type = key_type
        if readers is None:
            readers = (operator.attrgetter("aval"), operator.attrgetter(sharding_attr),
                       operator.attrgetter("_committed"), operator.methodcaller("is_deleted"))
        self.aval_of, self.sharding_of, self.committed_of, self.is_deleted_of = readers


class CacheEntry:
    """What one call signature compiled to, and how to feed it.

    ``ready`` flips once the compiling thread is done (successfully or not);
    threads that find a not-ready entry wait on ``event`` (the wait releases
    the GIL). ``failure`` (``"TypeError: ..."``) marks an entry whose compile
    raised: for that caller's arguments, which may be values another call of
    the signature does not share (a committed device, an alias), so no other
    call ever gets that error; the next call of the signature compiles anew.
    """

    def __init__(self):
        self.ready = False
        self.fallback = False
        self.failure = None
        self.event = threading.Event()
        self.executable = None
        # ``executable.execute_sharded`` and ``out_treedef.unflatten``, bound
        # once (the hit path skips two attribute lookups per call).
        self.execute = None
        self.unflatten = None
        # The output is one bare leaf: the hit path returns it without
        # unflattening.
        self.single_out = False
        self.kept = None
        self.in_shardings = None
        self.host_specs = None
        self.out_handlers = None
        self.out_treedef = None
        self.shard_fallback = None
        # JAX's C++ call of the program, for calls carrying host values
        # (None: they are put by ``host_specs``); see ``run``.
        self.host_call = None
        self.host_refusal = None
        self.mover = None
        self.is_equivalent = None
        self.equivalents = None
        self.differents = None
        # Per kept input: the last sharding object found equal (not
        # identical) to the compiled one or a remembered equivalent, asked
        # by identity first (a producer handing the same object each call
        # pays its ``==`` once).
        self.last_equal = None
        self.types = None
        self.donated = None
        self.resharded = 0
        self.n_inputs = 0
        # The key object its cache holds it under.
        self.key = None
        # Its recency: the shared LRU's clock at its last use (``_lru``).
        self.last_use = 0
        self.held_scalars = None
        # Flat inputs whose host values are put without a copy (a large one
        # on CPU: ``HostSpec.aliases``); a call passing a host value there
        # returns once the program has run (``_wait_for_host_reads``). None:
        # no such input.
        self.host_waits = None
        # The express call (numpy inputs, perhaps beside device arrays, on
        # the host route): a C++ call of the program whose cache holds
        # exactly the signature and jit configs of the call that primed it;
        # ``make_express(guard, slot, refuse)`` makes one (None: never for
        # this entry). See ``_express.prime`` and ``_express.ExpressCall``.
        self.make_express = None
        self.express = None
        self.express_epoch = -1
        self.express_builds = 0

    def populate(self, fastpath, types):
        """Fill the entry from the miss path's ``FastpathData`` (its declared
        fields only) and the hit path's ``LeafTypes``."""
        if not isinstance(fastpath, FastpathData):
            raise RuntimeError(
                f"pmapkit internal error: the miss path handed {type(fastpath).__name__}, "
                "not FastpathData, to the dispatch core.")
        data = fastpath
        if data.version != FASTPATH_VERSION:
            raise RuntimeError(
                f"pmapkit fast-path data version {data.version!r} does not match "
                f"the dispatch core's version {FASTPATH_VERSION}; the "
                "installed pmapkit is inconsistent (reinstall it).")
        self.n_inputs = data.n_inputs
        self.executable = data.executable
        self.kept = data.kept
        self.in_shardings = tuple(data.in_shardings)
        self.host_specs = tuple(data.host_specs)
        self.out_handlers = list(data.out_handlers)
        self.out_treedef = data.out_treedef
        self.execute = self.executable.execute_sharded
        treedef = self.out_treedef
        if treedef is not None:
            self.unflatten = treedef.unflatten
            self.single_out = treedef.num_leaves == 1 and treedef.num_nodes == 1
        self.shard_fallback = data.shard_fallback
        # Decided once, by the program; why not, in words (``host_refusal``).
        self.host_call = data.host_call
        self.host_refusal = data.host_refusal
        if self.host_call is not None and self.kept is not None:
            # ``_host_routable`` reads leaf j as input j: never guess.
            raise RuntimeError("pmapkit internal error: a host route for a "
                               "program with pruned inputs.")
        # Moves misplaced device arrays, all of a call's in one go (None:
        # each goes to ``shard_fallback``).
        self.mover = data.mover
        self.is_equivalent = data.is_equivalent
        # Per kept input: sharding objects seen and found to lay the array
        # out exactly as the compiled one (other mesh axis names, jax.pmap's
        # or device_put's meshes); their arrays are passed on as they are.
        self.equivalents = [()] * len(self.in_shardings)
        # ... and those found to lay it out otherwise (resharded every call).
        self.differents = [()] * len(self.in_shardings)
        self.last_equal = [None] * len(self.in_shardings)
        self.types = types
        donated = data.donated
        self.donated = tuple(donated) if donated else None
        # Per kept input: the last scalar passed there and, once passed
        # twice, its device array (``_held_scalar``); None: never held.
        self.held_scalars = None if self.donated is not None else [None] * len(self.in_shardings)
        kept = self.kept
        waits = tuple([j if kept is None else kept[j]
                       for j, spec in enumerate(self.host_specs)
                       if getattr(spec, "aliases", False)])
        self.host_waits = waits if waits else None
        if self.host_call is not None and self.donated is None:
            self.make_express = data.make_express

    def aliases_donated(self, leaves):
        """Whether a donated leaf (an array) is also another leaf of the call
        (``find_donated_alias``, counting every donated array: the miss path
        it then hands the call to leaves out those that move)."""
        return find_donated_alias(leaves, self.donated, self.types, None) is not None

    def run(self, leaves):
        """The flat outputs of one call of ``leaves`` (not donating)."""
        if self.host_call is not None and self.n_inputs == 1:
            x = leaves[0]
            if type(x) is self.types.ndarray_type:
                # One numpy input (the host route's usual call): straight to
                # JAX's call, on a copy of its bytes (``_host_snapshot``).
                return self.host_call(host_copy(x))
        arrays = self.shard(leaves)
        if arrays is None:
            # Host values, every device array placed as compiled: JAX's C++
            # call puts the host values and runs the same executable.
            return self.host_call(*self._host_snapshot(leaves))
        outs = self.execute(arrays).consume_with_handlers(self.out_handlers)
        if self.host_waits is not None:
            self._wait_for_host_reads(leaves, outs)
        return outs

    def _wait_for_host_reads(self, leaves, outs):
        """Return once the program has run when a caller's host array was
        put without a copy (``host_waits``): the program reads it in place,
        and a write after the call must not reach it (read at the call, as
        classic JAX's synchronous CPU calls did). Calls passing device
        arrays there return at once."""
        array_type = self.types.array_type
        for i in self.host_waits:
            if type(leaves[i]) is not array_type:
                for y in outs:
                    # Every result but a float0 one (a numpy array) waits.
                    wait = getattr(y, "block_until_ready", None)
                    if wait is not None:
                        wait()
                return

    def shard(self, leaves):
        """The device arrays the executable takes, one per kept input:
        ``leaves`` itself when every leaf is kept and passed on as it is;
        None when the call carries host values and ``host_call`` can run it
        (``_host_routable``).

        An array whose sharding is the compiled one, or one remembered as
        equivalent to it, is passed as is (no copy); host arrays and scalars
        are sliced and put per device; anything else is classified once per
        sharding object (``_first_sight``) and remembered, or is moved:
        all such arrays of the call by one ``mover.move`` (resharding).
        """
        if len(leaves) != self.n_inputs:
            # Indexing below is unchecked in the compiled build: never guess.
            raise RuntimeError(
                f"pmapkit internal error: a call signed {len(leaves)} argument "
                f"leaves for a program of {self.n_inputs} inputs.")
        leaf_types = self.types
        kept = self.kept
        in_shardings = self.in_shardings
        n = len(in_shardings)
        # Made on the first input not passed on as it is (None: none yet).
        out = None if kept is None else [None] * n
        pending = None
        # Whether host_call may run the call: asked at its first host value.
        routable = self.host_call is not None
        # Whether every leaf so far is passed on as it is, or is a scalar
        # (then host_call may still take the leaves themselves).
        clean = True
        for j in range(n):
            i = j if kept is None else kept[j]
            x = leaves[i]
            t = type(x)
            scalar = False
            if t is leaf_types.array_type:
                have = leaf_types.sharding_of(x)
                if have is in_shardings[j] or self._seen_equivalent(j, have):
                    # Asked every call: the runtime does not refuse every
                    # deleted input (a donated one can crash the process).
                    if leaf_types.is_deleted_of(x):
                        leaf_types.raise_deleted(x)  # donated earlier: JAX's error
                    y = x
                else:
                    y = self._first_sight(x, x, have, i, j)
            elif t is leaf_types.ndarray_type:
                if routable:
                    # Every leaf before j passed on as it is (checked above):
                    # only the ones after it are left to ask.
                    if clean and self._host_routable(leaves, j + 1):
                        return None
                    routable = False
                y = self.host_specs[j].put(x)
            elif (t is float or t is int or t is bool or t is complex
                  or isinstance(x, leaf_types.host_scalar_type)):
                scalar = True
                y = self._held_scalar(x, j)
                if y is None:
                    if routable:
                        if clean and self._host_routable(leaves, j + 1):
                            return None
                        routable = False
                    spec = self.host_specs[j]
                    y = spec.put_own(leaf_types.asarray(x, spec.dtype))
            elif t is leaf_types.key_type:
                # in_shardings hold the physical sharding of key inputs.
                base = x._base_array
                have = leaf_types.sharding_of(base)
                if ((have is in_shardings[j] or self._seen_equivalent(j, have))
                        and not leaf_types.is_deleted_of(base)):
                    y = base
                else:
                    y = self._first_sight(x, base, have, i, j)
            else:
                self.resharded += 1
                y = self.shard_fallback(x, i)
            if y is None:
                pending = _pend(pending, j)  # moved below, with the others
                clean = False
            elif y is not x and not scalar:
                clean = False
            if out is not None:
                out[j] = y
            elif y is not x:
                out = list(leaves)
                out[j] = y
        if pending is not None:
            self._move(leaves, out, pending)
        if out is None:
            return leaves
        return out

    def _held_scalar(self, x, j):
        """The device array of scalar ``x`` for input ``j`` when the previous
        call passed the same scalar there (a learning rate, a step size: a
        Python scalar cannot change, so its device value is put once and
        kept); None otherwise (the caller puts it, or JAX's call does).
        Seen once, a value is remembered; seen again, put and held. Never
        for a program that donates (its inputs are handed over to be
        overwritten)."""
        held = self.held_scalars
        if held is None:
            return None
        seen = held[j]
        if seen is not None:
            v = seen[0]
            if v is x or (type(v) is type(x) and v == x and v != 0):
                # ``v != 0``: 0.0 and -0.0 are equal but not the same value.
                y = seen[1]
                if y is None:
                    spec = self.host_specs[j]
                    y = spec.put_own(self.types.asarray(x, spec.dtype))
                    held[j] = (v, y)
                return y
        held[j] = (x, None)
        return None

    def _host_routable(self, leaves, start):
        """Whether ``host_call`` can run this call, given that the leaves
        before ``start`` can: each leaf a host value or a live device array
        laid out as compiled (its sharding the compiled one or one already
        found equivalent: on the program's one device, JAX's call takes
        those as they are). Others are left to the hit path, which moves
        them, and raises JAX's error for a deleted one. Its entries keep
        every input."""
        leaf_types = self.types
        in_shardings = self.in_shardings
        for j in range(start, len(in_shardings)):
            x = leaves[j]
            t = type(x)
            if t is leaf_types.array_type:
                have = leaf_types.sharding_of(x)
                if have is not in_shardings[j] and not self._seen_equivalent(j, have):
                    return False
                if leaf_types.is_deleted_of(x):
                    return False
            elif not (t is leaf_types.ndarray_type or t is float or t is int
                      or t is bool or t is complex
                      or isinstance(x, leaf_types.host_scalar_type)):
                return False
        return True

    def _host_snapshot(self, leaves):
        """``leaves`` for ``host_call`` (a tuple), each numpy array a copy:
        JAX's call puts a numpy array without a copy where it can (and CPU
        dispatch is asynchronous), so the caller's later writes would reach
        the computation. Scalars it converts itself. The host route takes
        only small inputs (``CompiledProgram.host_call``): one small copy
        each, made by ``host_copy``."""
        ndarray_type = self.types.ndarray_type
        if _COMPILED:
            # One new tuple, made in C (``_snapshot_leaves``).
            return _snapshot_leaves(leaves, ndarray_type)
        n = len(leaves)
        if n == 1:
            x = leaves[0]
            if type(x) is ndarray_type:
                return (host_copy(x),)
            return tuple(leaves)
        out = list(leaves)
        for j in range(n):
            x = out[j]
            if type(x) is ndarray_type:
                out[j] = host_copy(x)
        return tuple(out)

    def _move(self, leaves, out, pending):
        """Fill ``out[j]`` for the kept inputs ``pending`` with the moved
        arrays, in one ``mover.move`` call."""
        kept = self.kept
        flat = [j if kept is None else kept[j] for j in pending]
        moved = self.mover.move([leaves[i] for i in flat], flat, self.shard_fallback)
        self.resharded += len(pending)
        for k in range(len(pending)):
            out[pending[k]] = moved[k]

    def _seen_equivalent(self, j, have):
        if have is self.last_equal[j]:
            return True
        seen = self.equivalents[j]
        for s in seen:
            if s is have:
                return True
        # A fresh object equal to a known one (a producer that builds its
        # sharding anew per call, or hands one it made itself each call):
        # equal shardings lay arrays out alike. Kept as the input's last
        # equal one, which the next call asks by identity.
        if have == self.in_shardings[j]:
            self.last_equal[j] = have
            return True
        for s in seen:
            if have == s:
                self.last_equal[j] = have
                return True
        return False

    def _first_sight(self, x, physical, have, i, j):
        """A sharding object not remembered as equivalent on input ``j``:
        decided once per object (both ways, bounded): one that lays the
        array out as the program wants is remembered and its buffers passed
        on; one that does not is moved, without asking again: None (the
        caller collects it for ``mover``), or the fallback's array."""
        if physical.is_deleted():
            self.resharded += 1
            return self.shard_fallback(x, i)  # raises JAX's deleted-array error
        other = self.differents[j]
        for s in other:
            if s is have:
                return self._misplaced(x, i)
        # A fresh object equal to a known one (``jax.device_put(x, device)``
        # makes its sharding anew per call): not asked again either.
        for s in other:
            if have == s:
                return self._misplaced(x, i)
        if self.is_equivalent(physical, i):
            self.equivalents[j] = _remember(self.equivalents[j], have)
            return physical
        self.differents[j] = _remember(other, have)
        return self._misplaced(x, i)

    def _misplaced(self, x, i):
        if self.mover is not None:
            return None
        self.resharded += 1
        return self.shard_fallback(x, i)


def find_donated_alias(leaves, donated, leaf_types, in_place):
    """``(i, j)``, ``i < j``: leaves ``i`` and ``j`` are one device array (of
    ``leaf_types``' array or key type) and one of them is donated
    (``donated``: flat indices); None when no donated array appears twice.
    Executing would hand one buffer to two inputs, one of them donated.

    The one alias rule: the hit path asks it with ``in_place`` None (every
    donated array counts), the miss path (``compiled_program.find_donated_alias``)
    with ``in_place(x, i)``: whether donated array ``x`` is laid out as
    input ``i`` takes it. One that is not is moved, and a donated input that
    moves is a copy (``moves.Mover``), so it aliases nothing."""
    first = {}
    for i in donated:
        x = leaves[i]
        t = type(x)
        if t is leaf_types.array_type or t is leaf_types.key_type:
            if in_place is not None and not in_place(x, i):
                continue
            if id(x) in first:
                return (first[id(x)], i)
            first[id(x)] = i
    if not first:
        return None
    for j in range(len(leaves)):
        i = first.get(id(leaves[j]), j)
        if i != j:
            return (i, j) if i < j else (j, i)
    return None


def _pend(pending, j):
    """``pending`` (a list or None) with kept input ``j`` appended."""
    if pending is None:
        return [j]
    pending.append(j)
    return pending


def _remember(seen, sharding):
    """``seen`` with ``sharding`` added, the oldest dropped beyond the bound."""
    if len(seen) >= MAX_EQUIVALENTS:
        seen = seen[1:]
    return seen + (sharding,)


# One lock for every execution that donates: checking that an input is not
# deleted and handing it to the executable (which deletes it) must not
# interleave with another thread donating the same array (PjRt crashes on a
# buffer donated twice).
DONATION_LOCK = threading.Lock()


def execute_donating(entry, leaves):
    """``entry``'s executable run on ``leaves``, under ``DONATION_LOCK``."""
    with DONATION_LOCK:
        return entry.execute(entry.shard(leaves))


def host_copy(x):
    """A copy of numpy array ``x`` for a call that reads it later (JAX's
    call, asynchronous): compiled, its bytes into a new aligned array in C
    (``_copy_host_array``), else numpy's copy."""
    if _COMPILED:
        return _copy_host_array(x)
    return x.copy()


def same_host_signature(x, dtype, shape):
    """Whether numpy array ``x`` has dtype object ``dtype`` and ``shape``;
    compiled, asked in C without making ``x``'s dtype and shape objects."""
    if _COMPILED:
        return _same_host_signature(x, dtype, shape) == 1
    return x.dtype is dtype and x.shape == shape


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_pend).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
