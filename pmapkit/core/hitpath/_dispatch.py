"""The dispatch core shared by pmapkit's pmap and pjit.

One source, two builds: Cython compiles this file (typed by ``_dispatch.pxd``)
into the ``pmapkit.core.hitpath._dispatch`` extension; the same file runs as plain Python
when ``PMAPKIT_PUREPYTHON=1`` or when the extension is missing (see
``pmapkit.core.hitpath._compiled``). Keep it free of ``import cython`` so the pure build
needs no Cython at run time.

A ``DispatchFunction`` owns, per user function: argument parsing (static
argnums, pytree flattening), the call signature, the signature -> entry map
with one compile per signature, and the hit path. Everything that needs
tracing or compiling lives behind ``cache_miss``, a Python callable returning
``(outputs, fastpath_data | None)``.
"""
import itertools
import threading
import types
import weakref

# Bumped whenever the fields of the fast-path data change; cache_miss stamps it.
FASTPATH_VERSION = 6
# Sharding objects remembered per input as equivalent to the compiled one,
# and as not (each distinct producer of inputs brings one; more evict the
# oldest).
MAX_EQUIVALENTS = 8
# Cached signatures per function (per trace context) unless set otherwise;
# the least recently used is evicted beyond it.
DEFAULT_CACHE_SIZE = 256
# Interned leaf signatures kept per function before the table starts afresh.
MAX_SIGNATURES = 1 << 16


class ArgumentAliasError(ValueError):
    """One array passed in two argument positions, at least one donated.

    Raised by the miss path before anything runs. It depends on the values of
    one call, not on its signature, so it never marks a cache entry."""
# Builds of an entry's express call (``CacheEntry.express``) before it stops
# making them: each change of a watched config state makes the next one.
MAX_EXPRESS_BUILDS = 8


# What an express call (``CacheEntry.express``) returns for a call its C++
# cache has no entry for: not the call it was made for (another trace
# context, a trace, ``jax.disable_jit``); that call takes the hit path. Its
# miss gives the C++ call no entry and has it drop the one it made (no
# exception crosses C++, and nothing builds up there).
_EXPRESS_MISSED = object()


# Bumped (``new_express_epoch``) whenever a config state of JAX's trace
# context that JAX's C++ call does not key on may have changed; an express
# made before is not used again.
_express_epoch = 0


def new_express_epoch():
    """Every express made so far is stale (a watched config state changed)."""
    global _express_epoch
    _express_epoch += 1


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


# What ``DispatchFunction._run_express`` returns for a call it does not run.
_NOT_EXPRESS = object()


# Bumped whenever the pickled state of a DispatchFunction changes shape.
PICKLE_VERSION = 1

# -- the key format ------------------------------------------------------------
# Bumped with every change to what ``DispatchFunction._sign*`` puts in a key;
# ``decode_key`` (at the end of this file) reads exactly this version, and tests/test_key_format.py holds a
# literal key of every form to it: a change to one without the other fails
# there, never silently in ``_debug_cache_keys``.
KEY_VERSION = 1
# Marks the keys of calls with keyword arguments: ``f(x, k=y)`` flattens to
# the same treedef as ``f((x,), {"k": y})`` and must not share its entry.
KWARGS_MARK = "**kwargs"
# A list/tuple argument of n leaves in a simple key: ``LIST_MARK - 2 * n`` /
# ``TUPLE_MARK - 2 * n`` (negative: leaf ids are >= 0; the parity tells them
# apart).
LIST_MARK = -2
TUPLE_MARK = -3


def static_entry(where, value):
    """A static argument's key: where it came (its position, or its keyword
    name), its type and its value. The type too: ``1``, ``1.0`` and ``True``
    are ``==`` but trace differently. The one rule for statics: every key of
    pmapkit keys them with it (``_cache_keys`` uses this function)."""
    return (where, type(value), value)


class LeafTypes:
    """The leaf classes the hot path recognises and how it treats them; made
    once (see ``pmapkit.core.programs.compiled_program.LEAF_TYPES``) and shared by every entry."""

    def __init__(self, array_type, ndarray_type, host_scalar_type, asarray,
                 sharding_attr, raise_deleted, key_type=None):
        self.array_type = array_type
        self.ndarray_type = ndarray_type
        self.host_scalar_type = host_scalar_type
        self.asarray = asarray
        self.sharding_attr = sharding_attr
        self.raise_deleted = raise_deleted
        # Typed PRNG key arrays: a logical view over a ``_base_array`` of
        # ``array_type`` (the physical buffers the executable takes).
        self.key_type = key_type


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
        self.types = None
        self.donated = None
        self.resharded = 0
        self.n_inputs = 0
        # The key object its cache holds it under: a move of the entry finds
        # it by identity (no comparison of the keys' items).
        self.key = None
        self.held_scalars = None
        # Flat inputs whose host values are put without a copy (a large one
        # on CPU: ``HostSpec.aliases``); a call passing a host value there
        # returns once the program has run (``_wait_for_host_reads``). None:
        # no such input.
        self.host_waits = None
        # The express call (one numpy input on the host route): a C++ call
        # of the program whose cache holds exactly the signature and jit
        # configs of the call that primed it; ``make_express(miss_for,
        # refuse)`` makes one (None: never for this entry). See
        # ``DispatchFunction._express_first``.
        self.make_express = None
        self.express = None
        self.express_epoch = -1
        self.express_builds = 0

    def populate(self, fastpath, types):
        version = getattr(fastpath, "version", None)
        if version != FASTPATH_VERSION:
            raise RuntimeError(
                f"pmapkit fast-path data version {version!r} does not match "
                f"the dispatch core's version {FASTPATH_VERSION}; the "
                "installed pmapkit is inconsistent (reinstall it).")
        self.n_inputs = fastpath.n_inputs
        self.executable = fastpath.executable
        self.kept = fastpath.kept
        self.in_shardings = tuple(fastpath.in_shardings)
        self.host_specs = tuple(fastpath.host_specs)
        self.out_handlers = list(fastpath.out_handlers)
        self.out_treedef = fastpath.out_treedef
        self.execute = self.executable.execute_sharded
        treedef = self.out_treedef
        if treedef is not None:
            self.unflatten = treedef.unflatten
            self.single_out = treedef.num_leaves == 1 and treedef.num_nodes == 1
        self.shard_fallback = fastpath.shard_fallback
        # Decided once, by the program; why not, in words (``host_refusal``).
        self.host_call = fastpath.host_call
        self.host_refusal = fastpath.host_refusal
        if self.host_call is not None and self.kept is not None:
            # ``_host_routable`` reads leaf j as input j: never guess.
            raise RuntimeError("pmapkit internal error: a host route for a "
                               "program with pruned inputs.")
        # Moves misplaced device arrays, all of a call's in one go (None:
        # each goes to ``shard_fallback``).
        self.mover = getattr(fastpath, "mover", None)
        self.is_equivalent = fastpath.is_equivalent
        # Per kept input: sharding objects seen and found to lay the array
        # out exactly as the compiled one (other mesh axis names, jax.pmap's
        # or device_put's meshes); their arrays are passed on as they are.
        self.equivalents = [()] * len(self.in_shardings)
        # ... and those found to lay it out otherwise (resharded every call).
        self.differents = [()] * len(self.in_shardings)
        self.types = types
        donated = fastpath.donated
        self.donated = tuple(donated) if donated else None
        # Per kept input: the last scalar passed there and, once passed
        # twice, its device array (``_held_scalar``); None: never held.
        self.held_scalars = None if self.donated is not None else [None] * len(self.in_shardings)
        kept = self.kept
        waits = tuple([j if kept is None else kept[j]
                       for j, spec in enumerate(self.host_specs)
                       if getattr(spec, "aliases", False)])
        self.host_waits = waits if waits else None
        if self.host_call is not None and self.n_inputs == 1 and self.donated is None:
            self.make_express = getattr(fastpath, "make_express", None)

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
                return self.host_call(_copy_host_array(x) if _COMPILED else x.copy())
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
                have = getattr(x, leaf_types.sharding_attr)
                if have is in_shardings[j] or self._seen_equivalent(j, have):
                    # Asked every call: the runtime does not refuse every
                    # deleted input (a donated one can crash the process).
                    if x.is_deleted():
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
                have = getattr(base, leaf_types.sharding_attr)
                if ((have is in_shardings[j] or self._seen_equivalent(j, have))
                        and not base.is_deleted()):
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
                have = getattr(x, leaf_types.sharding_attr)
                if have is not in_shardings[j] and not self._seen_equivalent(j, have):
                    return False
                if x.is_deleted():
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
        each, made in C where compiled (``_copy_host_array``: the bytes
        into a new array, no more), else by numpy."""
        ndarray_type = self.types.ndarray_type
        n = len(leaves)
        if n == 1:
            x = leaves[0]
            if type(x) is ndarray_type:
                return (_copy_host_array(x) if _COMPILED else x.copy(),)
            return tuple(leaves)
        out = list(leaves)
        for j in range(n):
            x = out[j]
            if type(x) is ndarray_type:
                out[j] = _copy_host_array(x) if _COMPILED else x.copy()
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
        seen = self.equivalents[j]
        for s in seen:
            if s is have:
                return True
        # A fresh object equal to a known one (a producer that builds its
        # sharding anew per call): equal shardings lay arrays out alike.
        if have == self.in_shardings[j]:
            return True
        for s in seen:
            if have == s:
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


class SharedCaches:
    """What every wrapper of one function with one set of parameters shares:
    the signature caches (per trace context), the leaf-signature tables that
    key them, the id counter, the lock, and whether global arrays sign apart.

    A cache's order is its recency, oldest first: a hit moves its entry to
    the end (whichever sharer hits it), a compile puts it there, eviction
    pops from the front. ``newest`` is the entry last put at the end of its
    cache: a hit on it moves nothing (the common case, one signature called
    again and again, costs a pointer comparison). Every change of a cache's
    keys holds ``lock``: a call finding its key gone while another moves it
    waits for the move there instead of compiling it anew.

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


class DispatchFunction:
    """A compiled-dispatch callable wrapping one user function.

    Args:
      fun: the user's function (kept for ``__wrapped__`` and introspection).
      cache_miss: ``cache_miss(*args, **kwargs) -> (out, fastpath | None)``.
      static_argnums: sorted tuple of non-negative positional indices.
      types: the ``LeafTypes`` of the hot path.
      canonical_dtypes: numpy dtypes that need no canonicalization, so a numpy
        leaf of such a dtype signs like a device array of the same aval.
      flatten: pytree flatten returning ``(leaves, treedef)``.
      trace_context: returns JAX's trace context (x64, mesh contexts, ...),
        which selects a cache.
      context_state: optional object whose ``.value`` selects a cache too
        (pjit: the concrete mesh of ``jax.set_mesh``, not in JAX's trace
        context); the cache key is then ``(trace context, value)``.
      probe: ``(trace_state, eval_ref, axis_env_state, top_env[,
        axis_env_index])``; see ``_jax_private.top_level_probe``.
      lower: ``lower(*args, **kwargs)`` for ``.lower``.
      reduce_fn: returns ``(callable, args)`` for pickling.
      static_argnames: keyword names whose values are compile-time constants
        (signed by value). With names, static positions may also be absent
        from a call (the argument came by keyword).
      sign_shardings: sign committed device arrays by their sharding too
        (for programs whose input placement follows the arguments').
      cache_size: entries kept per trace context (least recently used are
        evicted beyond it); None: ``DEFAULT_CACHE_SIZE``.
      describe: ``describe(elements, sig_ids, static_argnums)`` for
        ``_debug_cache_keys`` (the core itself imports nothing of JAX).
      shared: a ``SharedCaches`` of another wrapper of the same function with
        the same parameters and static/signing options: this one then starts
        with (and keeps adding to) that one's compiled entries. None: its own.
    """

    def __init__(self, fun, cache_miss, static_argnums, types, canonical_dtypes,
                 flatten, trace_context, probe, lower, reduce_fn,
                 static_argnames=(), sign_shardings=False, cache_size=None,
                 describe=None, context_state=None, shared=None):
        self.fun = fun
        self._cache_miss = cache_miss
        self._static_argnums = tuple(static_argnums)
        self._static_set = frozenset(static_argnums)
        self._max_static = max(static_argnums) if static_argnums else -1
        self._static_names = frozenset(static_argnames)
        self._sign_shardings = bool(sign_shardings)
        if shared is None:
            shared = SharedCaches()
        self._shared = shared
        shared.members.add(self)
        # Set (at a miss) once a program spans processes: arrays that are not
        # fully addressable (global arrays) then sign apart from local ones.
        self._sign_global = shared.sign_global
        self._types = types
        self._array_type = types.array_type
        self._ndarray_type = types.ndarray_type
        self._host_scalar_type = types.host_scalar_type
        self._key_type = types.key_type
        self._sharding_attr = types.sharding_attr
        # Leaf signatures are interned to small ints, so keys hash and compare
        # fast; device arrays made by one result handler share an aval object,
        # so their ids are found by identity without rebuilding the signature.
        self._sig_ids = shared.sig_ids
        self._aval_ids = shared.aval_ids
        self._placed_ids = shared.placed_ids
        self._next_id = shared.next_id
        self._canonical_dtypes = frozenset(canonical_dtypes)
        self._flatten = flatten
        self._trace_context = trace_context
        self._trace_state = probe[0]
        self._eval_ref = probe[1]
        self._axis_env_state = probe[2]
        self._top_env = probe[3]
        # Where the trace context holds the axis env (read there, not asked
        # again), or -1: ask ``axis_env_state``.
        self._axis_env_index = probe[4] if len(probe) > 4 else -1
        self._lower = lower
        self._reduce_fn = reduce_fn
        self._describe = describe
        self._caches = shared.caches
        self._current = shared.current
        self._context_state = context_state
        self._cache_size_limit = DEFAULT_CACHE_SIZE if cache_size is None else int(cache_size)
        self._misses = 0
        self._evictions = 0
        self._lock = shared.lock
        # Called by clear_cache: the Python side's caches of traced bodies.
        self._on_clear = None
        # The key of the last one-leaf call signed (see ``_sign_one``).
        self._last_key1 = None
        # (dtype, shape, id) of the last numpy leaf signed (see ``_leaf_id``).
        self._last_host = None
        # The entry whose express call runs a call of one numpy argument of
        # ``_express_host``'s dtype and shape, and its cache (None: none).
        self._express = None
        self._express_host = None
        self._express_cache = None

    # -- the call -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self._dispatch(args, kwargs)

    def _dispatch(self, args, kwargs):
        # Read before the trace context: a watched state changing after it
        # makes an express primed by this call stale.
        epoch = _express_epoch
        if _special_flags is not None and (_special_flags[0].value
                                           or _special_flags[1].value):
            # jax_debug_nans/infs on: Python checks the outputs (and keeps
            # donation off); nothing is cached for such calls.
            return self._python_call(args, kwargs)
        if self._express is not None:
            out = self._run_express(args, kwargs)
            if out is not _NOT_EXPRESS:
                return out
        if self._trace_state.value is not self._eval_ref:
            # Under a JAX trace the call must bind our primitive; never cache it.
            return self._python_call(args, kwargs)
        key = None
        leaves = args
        if len(args) == 1 and self._max_static < 0 and not kwargs:
            key = self._sign_one(args[0])
        if key is None:
            signed = self._sign(args, kwargs)
            if signed is None:
                return self._python_call(args, kwargs)
            key = signed[0]
            leaves = signed[1]
        # The trace context (x64, default device, mesh ...) selects a cache;
        # it is compared, not hashed, per call: equal contexts share elements.
        ctx = self._trace_context()
        if self._axis_env_index >= 0:
            top = ctx[self._axis_env_index] is self._top_env
        else:
            top = self._axis_env_state.value is self._top_env
        if not top:
            # Inside a named axis (a pmap body run eagerly, ...): as traced.
            return self._python_call(args, kwargs)
        extra = None if self._context_state is None else self._context_state.value
        current = self._current
        if (not _same_context(current[0], ctx)
                or (current[1] is not extra and current[1] != extra)):
            current = self._select_context(ctx, extra)
        cache = current[2]
        try:
            entry = cache.get(key)
        except TypeError:
            # An unhashable static argument: cache_miss raises the clear error.
            return self._python_call(args, kwargs)
        if entry is None:
            fresh = CacheEntry()
            entry = self._insert(cache, key, fresh)
            if entry is fresh:
                return self._compile_entry(entry, args, kwargs, cache, key, leaves)
        if not entry.ready:
            entry.event.wait()
        if entry.fallback:
            if entry.failure is not None:
                return self._retry_failed(entry, args, kwargs, cache, key, leaves)
            return self._python_call(args, kwargs)
        # Recency is the cache's order, shared by every wrapper: a hit moves
        # its entry to the end unless it is the newest already.
        if entry is not self._shared.newest:
            self._refresh(cache, entry)
        try:
            if entry.donated is not None:
                if entry.aliases_donated(leaves):
                    # The miss path names both positions in its error, before running.
                    return self._python_call(args, kwargs)
                outs = execute_donating(entry, leaves).consume_with_handlers(
                    entry.out_handlers)
            elif (entry.make_express is not None and len(args) == 1
                    and type(args[0]) is self._ndarray_type and not kwargs
                    and self._max_static < 0 and self._context_state is None):
                outs = self._express_first(entry, args[0], cache, epoch)
                if outs is None:
                    outs = entry.run(leaves)
            else:
                outs = entry.run(leaves)
        except OverflowError:
            # A Python int out of range of its dtype, found by the put of
            # host values (before anything ran): the miss path's error names
            # the argument.
            return self._python_call(args, kwargs)
        if entry.single_out:
            return outs[0]
        return entry.unflatten(outs)

    def _run_express(self, args, kwargs):
        """The result of a call of one numpy argument of the express's dtype
        and shape, run by its C++ call on a snapshot of the array; or
        ``_NOT_EXPRESS``: any other call, or one the express refuses
        (then dropped: the next hit makes it the express again).

        That C++ call checks the rest itself: its cache holds one signature
        with JAX's jit configs (the trace state, so a call under a trace
        misses; the axis env, x64, the mesh contexts, ...); the
        trace-context states it does not key on are watched
        (``_express_epoch``). Any other call gets ``_EXPRESS_MISSED``."""
        express = self._express
        if len(args) != 1 or kwargs:
            return _NOT_EXPRESS
        x = args[0]
        # Read once: another thread may drop it (a clear, an eviction).
        call = express.express
        if (type(x) is not self._ndarray_type or express.express_epoch != _express_epoch
                or call is None or not self._is_express_host(x)):
            return _NOT_EXPRESS
        outs = call(_copy_host_array(x) if _COMPILED else x.copy())
        if outs is _EXPRESS_MISSED:
            self._express = None
            return _NOT_EXPRESS
        if express is not self._shared.newest:
            self._refresh(self._express_cache, express)
        if express.single_out:
            return outs[0]
        return express.unflatten(outs)

    def _is_express_host(self, x):
        """Whether numpy array ``x`` has the express's dtype and shape."""
        host = self._express_host
        if _COMPILED:
            return _same_host_signature(x, host[0], host[1]) == 1
        return x.dtype is host[0] and x.shape == host[1]

    def _express_first(self, entry, x, cache, epoch):
        """The outputs of this call (one numpy argument ``x``, its trace
        context and signature found to be ``entry``'s) run by ``entry``'s
        express call, made and primed by it if need be (at most
        ``MAX_EXPRESS_BUILDS`` times), which then takes the next such calls;
        None: run it as usual. ``epoch``: ``_express_epoch`` as it was before
        the call read its trace context."""
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
            snapshot = _copy_host_array(x) if _COMPILED else x.copy()
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
        else:
            outs = call(_copy_host_array(x) if _COMPILED else x.copy())
            if outs is _EXPRESS_MISSED:
                # Its C++ call lost its entry (JAX's cache evicts too): the
                # next call that gets here makes a fresh one.
                entry.express = None
                return None
        last = self._last_host
        if last is not None:
            self._express_host = (last[0], last[1])
            self._express_cache = cache
            self._express = entry
        return outs

    def _python_call(self, args, kwargs):
        self._misses += 1
        return self._cache_miss(*args, **kwargs)[0]

    def _select_context(self, ctx, extra):
        key = ctx if self._context_state is None else (ctx, extra)
        cache = self._caches.setdefault(key, {})
        current = (ctx, extra, cache)
        self._current = current
        self._shared.current = current
        return current

    def _compile_entry(self, entry, args, kwargs, cache, key, leaves):
        # Only the thread that inserted the entry gets here; others wait.
        self._misses += 1
        drop = False
        try:
            result = self._cache_miss(*args, **kwargs)
            drop = not self._fill(entry, result[1], leaves)
        except ArgumentAliasError:
            # About this call's values only: waiters take Python with their
            # own arguments, and the next call of the signature compiles.
            entry.fallback = True
            drop = True
            raise
        except BaseException as exc:
            # Waiters and later calls of the signature run their own miss
            # (``_retry_failed``); only the text is kept (for
            # ``_debug_cache_keys``), not the exception and the frames, with
            # this call's arguments, its traceback holds.
            entry.fallback = True
            entry.failure = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._finish(entry, cache, key, drop)
        return result[0]

    def _fill(self, entry, fastpath, leaves):
        """``entry`` made from a miss's fast-path data (None: the signature
        runs on the Python path); False when the entry must not be kept."""
        if fastpath is None:
            entry.fallback = True
            return True
        if fastpath.signs_global and not self._sign_global and self._has_global(leaves):
            # Global arrays must sign apart from local ones of their shape,
            # and this key was made without telling them apart: sign them
            # apart from now on and key this call anew. (A key of local
            # arrays only stays valid: they sign the same.)
            self._set_sign_global()
            entry.fallback = True
            return False
        if fastpath.signs_global:
            self._set_sign_global()
        entry.populate(fastpath, self._types)
        return True

    def _finish(self, entry, cache, key, drop):
        """Mark ``entry`` ready (waking its waiters); drop it from ``cache``
        or keep the cache within its bound."""
        entry.ready = True
        entry.event.set()
        with self._lock:
            if cache.get(key) is entry:
                del cache[key]
                if not drop:
                    # A compile is a use: the entry is the newest.
                    cache[key] = entry
                    entry.key = key
                    self._shared.newest = entry
            if not drop and len(cache) > self._cache_size_limit:
                self._evict(cache)

    def _insert(self, cache, key, fresh):
        """The entry of ``key`` in ``cache``: ``fresh``, put there now, unless
        one is there. (Apart from ``_dispatch``: a ``with`` there costs every
        hit the set-up and clean-up of its temporaries.)"""
        fresh.key = key
        with self._lock:
            return cache.setdefault(key, fresh)

    def _refresh(self, cache, entry):
        """Move ``entry`` to the end of ``cache`` (the newest), if its key is
        still there (not evicted or cleared meanwhile; the entry there may be
        one that replaced it)."""
        key = entry.key
        lock = self._lock
        # The lock's methods called, not ``with``: half the cost here.
        lock.acquire()
        try:
            held = cache.pop(key, None)
            if held is not None:
                cache[key] = held
                held.key = key
                self._shared.newest = held
        finally:
            lock.release()

    def _retry_failed(self, failed, args, kwargs, cache, key, leaves):
        """A call whose entry's compile failed (for another call's arguments,
        or this signature's: its own miss tells) runs its own miss, never
        the failed call's error. The first such call puts a fresh entry in
        place of the failed one and compiles it (calls arriving meanwhile
        wait on it, as on any miss: one compile, not one per thread); any
        other (the entry already replaced or cleared) takes Python with its
        own arguments, never waiting on another failure."""
        fresh = CacheEntry()
        fresh.key = failed.key  # the key object the cache keeps
        with self._lock:
            replace = cache.get(key) is failed
            if replace:
                cache[key] = fresh
        if replace:
            return self._compile_entry(fresh, args, kwargs, cache, key, leaves)
        return self._python_call(args, kwargs)

    def _set_sign_global(self):
        # Keys of every sharer must tell global arrays apart from now on.
        shared = self._shared
        shared.sign_global = True
        for member in list(shared.members):
            member._sign_global = True

    def _has_global(self, leaves):
        for x in leaves:
            if type(x) is self._key_type:
                x = x._base_array
            if type(x) is self._array_type and not x.is_fully_addressable:
                return True
        return False

    def _evict(self, cache):
        """Drop the least recently used ready entries, the first in the
        cache's order, until it fits (caller holds the lock)."""
        excess = len(cache) - self._cache_size_limit
        if excess <= 0:
            return
        doomed = []
        for k, e in cache.items():
            if e.ready:  # one being compiled stays: its callers wait on it
                doomed.append(k)
                if len(doomed) == excess:
                    break
        shared = self._shared
        for k in doomed:
            e = cache.pop(k)
            e.express = None
            if e is shared.newest:
                shared.newest = None
            self._evictions += 1

    def _sign(self, args, kwargs):
        """``(key, flat dynamic leaves)``, or None when some leaf has no cheap
        signature (tracers, unknown types): those calls always take Python."""
        nargs = len(args)
        if self._max_static >= nargs and not self._static_names and not kwargs:
            return None  # the miss path says which static is missing
        signed = self._sign_simple(args, kwargs)
        if signed is not None:
            return signed
        if self._max_static >= 0:
            statics = []
            dyn = []
            for i in range(nargs):
                if i in self._static_set:
                    statics.append(static_entry(i, args[i]))
                else:
                    dyn.append(args[i])
            key = [None, tuple(statics)]
            dyn_args = tuple(dyn)
        else:
            key = [None]
            dyn_args = args
        if kwargs:
            static_kw = ()
            if self._static_names:
                static_kw, kwargs = self._split_static_kwargs(kwargs)
            flat = self._flatten((dyn_args, kwargs))
            key.append(KWARGS_MARK)
            key.append(static_kw)
        else:
            # Without keyword arguments the args tuple alone flattens to the
            # same leaves, faster.
            flat = self._flatten(dyn_args)
        key[0] = flat[1]
        leaves = flat[0]
        for x in leaves:
            leaf_id = self._leaf_id(x)
            if leaf_id < 0:
                return None
            key.append(leaf_id)
        return (tuple(key), leaves)

    def _sign_simple(self, args, kwargs):
        """The common shapes, signed without pytree flattening: each argument
        a leaf, a plain list/tuple of leaves or static (by position), and
        keyword arguments that are leaves or static (by name); None for any
        other shape (``_sign`` then flattens).

        Such keys start with an int (the argument count) and mark each
        list/tuple with a negative int encoding its type and length
        (``LIST_MARK``/``TUPLE_MARK``; leaf ids are >= 0), so they never
        collide with the treedef-keyed ones; a static argument is its
        ``static_entry``; keywords follow KWARGS_MARK in name order (JAX's
        order for a dict), each as its name and leaf id, or as its
        ``static_entry`` when static. ``decode_key`` reads them back."""
        nargs = len(args)
        if nargs == 1 and self._max_static < 0 and not kwargs:
            key1 = self._sign_one(args[0])
            if key1 is not None:
                return (key1, args)  # the args tuple is the leaves
        key = [nargs]
        leaves = []
        for i in range(nargs):
            x = args[i]
            if self._max_static >= i and i in self._static_set:
                key.append(static_entry(i, x))
                continue
            t = type(x)
            if t is list or t is tuple:
                key.append((LIST_MARK if t is list else TUPLE_MARK) - 2 * len(x))
                for y in x:
                    leaf_id = self._leaf_id(y)
                    if leaf_id < 0:
                        return None
                    key.append(leaf_id)
                    leaves.append(y)
            else:
                leaf_id = self._leaf_id(x)
                if leaf_id < 0:
                    return None
                key.append(leaf_id)
                leaves.append(x)
        if kwargs:
            key.append(KWARGS_MARK)
            for name in sorted(kwargs):
                x = kwargs[name]
                if name in self._static_names:
                    key.append(static_entry(name, x))
                    continue
                leaf_id = self._leaf_id(x)
                if leaf_id < 0:
                    return None
                key.append(name)
                key.append(leaf_id)
                leaves.append(x)
        return (tuple(key), leaves)

    def _sign_one(self, x):
        """The key of a call whose one argument ``x`` is a leaf (what
        ``_sign_simple`` makes of it), or None (not such a leaf). The last
        key made is reused: the very object the cache holds, so the lookup
        finds it by identity and nothing is allocated."""
        t = type(x)
        if t is list or t is tuple:
            return None
        leaf_id = self._leaf_id(x)
        if leaf_id < 0:
            return None
        key1 = self._last_key1
        if key1 is None or key1[1] != leaf_id:
            key1 = (1, leaf_id)
            self._last_key1 = key1
        return key1

    def _split_static_kwargs(self, kwargs):
        """``(sorted (name, type, value) of static keywords, dynamic ones)``."""
        static_kw = []
        dyn_kw = {}
        for name, value in kwargs.items():
            if name in self._static_names:
                static_kw.append(static_entry(name, value))
            else:
                dyn_kw[name] = value
        static_kw.sort(key=_first)
        return tuple(static_kw), dyn_kw

    def _leaf_id(self, x):
        """The interned signature id of one leaf, or -1 if it has none."""
        t = type(x)
        if t is self._array_type:
            aval = x.aval
            leaf_id = self._aval_ids.get(aval)
            if leaf_id is None:
                leaf_id = self._intern((aval.dtype, aval.shape, aval.weak_type))
                if len(self._aval_ids) >= 256:
                    self._aval_ids.clear()  # bound the memory held by remembered avals
                self._aval_ids[aval] = leaf_id
            if self._sign_shardings and x._committed:
                leaf_id = self._placed_id(leaf_id, getattr(x, self._sharding_attr))
            if self._sign_global and not x.is_fully_addressable:
                leaf_id = self._intern(("global", leaf_id))
            return leaf_id
        if t is self._ndarray_type:
            # The last host array's signature, reused (a loop feeds batches
            # of one dtype and shape): hashing a numpy dtype is not cheap.
            # Compiled, asked in C (``_same_host_signature``), without
            # making the array's dtype and shape objects.
            last = self._last_host
            if last is not None:
                if _COMPILED:
                    if _same_host_signature(x, last[0], last[1]):
                        return last[2]
                elif last[0] is x.dtype and last[1] == x.shape:
                    return last[2]
            dt = x.dtype
            shape = x.shape
            if dt in self._canonical_dtypes:
                # Signs like a device array of the same aval: shares entries.
                leaf_id = self._intern((dt, shape, False))
            else:
                leaf_id = self._intern((t, dt, shape))
            self._last_host = (dt, shape, leaf_id)
            return leaf_id
        if (t is float or t is int or t is bool or t is complex
                or isinstance(x, self._host_scalar_type)):
            return self._intern(t)  # the Python/numpy scalar type fixes the dtype
        if t is self._key_type:
            # The physical array's signature and the key implementation (two
            # implementations may share a physical shape).
            base_id = self._leaf_id(x._base_array)
            if base_id < 0:
                return -1
            return self._intern((t, x._impl, base_id))
        return -1

    def _placed_id(self, leaf_id, sharding):
        """The id of a committed array of signature ``leaf_id`` placed with
        ``sharding`` (uncommitted arrays sign like host values)."""
        by_leaf = self._placed_ids.get(sharding)
        if by_leaf is None:
            if len(self._placed_ids) >= 256:
                self._placed_ids.clear()
            by_leaf = self._placed_ids.setdefault(sharding, {})
        found = by_leaf.get(leaf_id)
        if found is None:
            found = by_leaf.setdefault(leaf_id, self._intern(("placed", leaf_id, sharding)))
        return found

    def _intern(self, sig):
        found = self._sig_ids.get(sig)
        if found is None:
            if len(self._sig_ids) >= MAX_SIGNATURES:
                self._forget_signatures()
            found = self._sig_ids.setdefault(sig, next(self._next_id))
        return found

    def _forget_signatures(self):
        # Ids are never reused (the counter goes on), so keys made with the
        # forgotten ids can only miss; the LRU bound drops their entries.
        # Cleared in place: the tables are shared with the other wrappers.
        self._sig_ids.clear()
        self._aval_ids.clear()
        self._placed_ids.clear()
        self._last_host = None

    # -- introspection and control ---------------------------------------------
    @property
    def _cache_size(self):
        return sum([len(c) for c in self._caches.values()])

    def _debug_cache_keys(self):
        """A readable description of every cache entry (all trace contexts):
        "The cache contains N elements:" then, per entry, its argument
        signatures, tree structures, static values, the shardings it was
        compiled for and its trace context, to see why a call missed."""
        elements = []
        for ctx, cache in list(self._caches.items()):
            for key, entry in list(cache.items()):
                elements.append((ctx, key, entry))
        return self._describe(elements, dict(self._sig_ids), self._static_argnums)

    def _debug_compute_cache_key(self, *args, **kwargs):
        signed = self._sign(args, kwargs)
        return None if signed is None else signed[0]

    def _debug_decode_key(self, key):
        """``decode_key`` of one of this function's keys."""
        return decode_key(key, self._max_static >= 0)

    def _debug_dispatch_stats(self):
        """Counters of the slow paths: calls that ran Python (``misses``),
        inputs moved or put by the Python fallback on hit-path calls
        (``resharded``), sharding objects accepted as equivalent
        (``equivalent_shardings``) and LRU ``evictions``."""
        resharded = 0
        equivalent = 0
        for cache in list(self._caches.values()):
            for entry in list(cache.values()):
                if entry.ready and entry.equivalents is not None:
                    resharded += entry.resharded
                    equivalent += sum([len(e) for e in entry.equivalents])
        return {"misses": self._misses, "resharded": resharded,
                "equivalent_shardings": equivalent, "evictions": self._evictions,
                "cache_size": self._cache_size, "cache_size_limit": self._cache_size_limit}

    def _set_cache_size(self, size):
        """Bound this function's cache to ``size`` entries per context."""
        if type(size) is not int or size < 1:
            raise ValueError(f"cache size must be a positive int, got {size!r}")
        self._cache_size_limit = size
        with self._lock:
            for cache in list(self._caches.values()):
                self._evict(cache)

    def clear_cache(self):
        """Empty the entries of this wrapper and of every wrapper sharing
        them (in place: each sharer's selected context stays one of them)."""
        with self._lock:
            for cache in list(self._caches.values()):
                for entry in list(cache.values()):
                    entry.express = None
                cache.clear()
            self._shared.newest = None
        self._current = (None, None, {})
        self._express = None
        self._forget_signatures()
        if self._on_clear is not None:
            self._on_clear()

    def lower(self, *args, **kwargs):
        return self._lower(*args, **kwargs)

    def __get__(self, obj, objtype):
        # Behave like a function: bind as a method when read off an instance.
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __reduce__(self):
        return self._reduce_fn()

    def __repr__(self):
        # Classic pmap and pjit returned a functools.wraps of the user's function:
        # printed, it read as that function (the address is this object's).
        name = getattr(self.fun, "__qualname__", None)
        if not isinstance(name, str):
            return f"<pmapkit DispatchFunction of {self.fun!r}>"
        return f"<function {name} at {id(self):#x}>"


def _first(item):
    return item[0]


class KeyFormatError(ValueError):
    """A key that is not of the format ``KEY_VERSION`` describes: the
    encoder changed without ``decode_key``."""


def decode_key(key, has_static_argnums):
    """The parts of a key made by ``DispatchFunction._sign*`` (format
    ``KEY_VERSION``), read back exactly, never guessed: a dict of
    ``version``; ``statics`` and ``static_keywords`` (their
    ``static_entry``s); ``kwargs_marked``: the call had keyword arguments
    (``KWARGS_MARK``); ``arguments``: per dynamic positional argument of a
    simple key, ``"leaf"`` or ``("list" | "tuple", n)`` (None for a
    flattened key, whose ``treedef`` is the whole structure);
    ``keywords``: the names of dynamic keyword leaves of a simple key, in
    order; ``leaf_ids``: every dynamic leaf's signature id, in order.
    ``has_static_argnums``: the function has static positions (a flattened
    key then holds their slot). Raises ``KeyFormatError`` for anything
    else."""
    if type(key) is not tuple or not key:
        _bad_key(key, "not a non-empty tuple")
    if type(key[0]) is int:
        return _decode_simple(key)
    return _decode_flattened(key, has_static_argnums)


def _decode_simple(key):
    # (nargs, per argument: a leaf id | a static_entry | a container mark and
    # its leaf ids, [KWARGS_MARK, per keyword: name, leaf id | static_entry])
    nargs = key[0]
    pos = 1
    statics = []
    arguments = []
    leaf_ids = []
    for i in range(nargs):
        if pos >= len(key):
            _bad_key(key, f"ends before argument {i} of {nargs}")
        item = key[pos]
        pos += 1
        if type(item) is tuple:
            if len(item) != 3 or item[0] != i or not isinstance(item[1], type):
                _bad_key(key, f"argument {i}: {item!r} is no static_entry({i}, value)")
            statics.append(item)
        elif type(item) is not int:
            _bad_key(key, f"argument {i}: {item!r} is neither a leaf id, a static "
                     "nor a container mark")
        elif item >= 0:
            arguments.append("leaf")
            leaf_ids.append(item)
        else:
            kind = "list" if (item - LIST_MARK) % 2 == 0 else "tuple"
            n = ((LIST_MARK if kind == "list" else TUPLE_MARK) - item) // 2
            if n < 0:
                _bad_key(key, f"argument {i}: mark {item} encodes no container")
            ids = key[pos:pos + n]
            if len(ids) != n or not all([_is_leaf_id(x) for x in ids]):
                _bad_key(key, f"argument {i}: a {kind} of {n} leaves wants {n} leaf ids")
            arguments.append((kind, n))
            leaf_ids.extend(ids)
            pos += n
    static_kw = []
    keywords = []
    marked = pos < len(key)
    if marked:
        if key[pos] != KWARGS_MARK:
            _bad_key(key, f"item {pos}: {key[pos]!r} after the {nargs} arguments, "
                     "where only KWARGS_MARK may follow")
        pos += 1
        while pos < len(key):
            item = key[pos]
            if type(item) is tuple and len(item) == 3 and type(item[0]) is str:
                static_kw.append(item)
                pos += 1
            elif type(item) is str and pos + 1 < len(key) and _is_leaf_id(key[pos + 1]):
                keywords.append(item)
                leaf_ids.append(key[pos + 1])
                pos += 2
            else:
                _bad_key(key, f"item {pos}: {item!r} is no keyword (a name and its "
                         "leaf id, or a static_entry)")
    return {"version": KEY_VERSION, "statics": tuple(statics),
            "static_keywords": tuple(static_kw), "kwargs_marked": marked,
            "arguments": arguments, "treedef": None, "keywords": keywords,
            "leaf_ids": leaf_ids}


def _decode_flattened(key, has_static_argnums):
    # (treedef, [statics: (static_entry, ...)], [KWARGS_MARK, static
    # keywords: (static_entry, ...)], leaf id, ...)
    treedef = key[0]
    pos = 1
    statics = ()
    if has_static_argnums:
        statics = key[pos] if pos < len(key) else None
        if type(statics) is not tuple or not all(
                [type(e) is tuple and len(e) == 3 and type(e[0]) is int for e in statics]):
            _bad_key(key, f"item 1: {statics!r} is no tuple of positional static_entry's")
        pos += 1
    static_kw = ()
    marked = pos < len(key) and type(key[pos]) is str
    if marked:
        if key[pos] != KWARGS_MARK:
            _bad_key(key, f"item {pos}: {key[pos]!r} where KWARGS_MARK or a leaf id belongs")
        static_kw = key[pos + 1] if pos + 1 < len(key) else None
        if type(static_kw) is not tuple or not all(
                [type(e) is tuple and len(e) == 3 and type(e[0]) is str for e in static_kw]):
            _bad_key(key, f"item {pos + 1}: {static_kw!r} is no tuple of keyword "
                     "static_entry's")
        pos += 2
    leaf_ids = list(key[pos:])
    if not all([_is_leaf_id(x) for x in leaf_ids]):
        _bad_key(key, f"items {pos}..: {leaf_ids!r} are not all leaf ids")
    n_leaves = getattr(treedef, "num_leaves", None)
    if n_leaves is not None and n_leaves != len(leaf_ids):
        _bad_key(key, f"its treedef has {n_leaves} leaves, the key {len(leaf_ids)} leaf ids")
    return {"version": KEY_VERSION, "statics": statics, "static_keywords": static_kw,
            "kwargs_marked": marked, "arguments": None, "treedef": treedef,
            "keywords": [], "leaf_ids": leaf_ids}


def _is_leaf_id(x):
    return type(x) is int and x >= 0


def _bad_key(key, why):
    raise KeyFormatError(
        f"pmapkit internal error: cache key {key!r} is not of key format "
        f"{KEY_VERSION} ({why}); the signing in _dispatch.py changed without "
        "decode_key (bump KEY_VERSION and update both).")


# None until jax_debug_nans or jax_debug_infs is first turned on (see
# ``pmapkit.core.programs.special_values``); from then on the two config objects, whose
# ``.value`` is read per call. Until then the hit path pays one pointer compare.
_special_flags = None


def arm_special_checks(flags):
    """Make every later call read ``flags`` (two objects with a ``.value``:
    JAX's debug_nans and debug_infs): while either is on, a call takes the
    Python path, which checks. None: read nothing."""
    global _special_flags
    _special_flags = None if flags is None else tuple(flags)


# One lock for every execution that donates: checking that an input is not
# deleted and handing it to the executable (which deletes it) must not
# interleave with another thread donating the same array (PjRt crashes on a
# buffer donated twice).
DONATION_LOCK = threading.Lock()


def execute_donating(entry, leaves):
    """``entry``'s executable run on ``leaves``, under ``DONATION_LOCK``."""
    with DONATION_LOCK:
        return entry.execute(entry.shard(leaves))


def _same_context(cached, ctx):
    """``cached == ctx`` for two trace contexts (tuples, possibly nested one
    level). Compiled, the usual case (nothing changed: the very same item
    objects) is one ``memcmp`` of the two tuples' item pointers
    (``_identical_items``, the C helper ``_dispatch.pxd`` declares; plain
    Python never gets there and keeps tuple equality)."""
    if not _COMPILED or type(cached) is not tuple:
        return cached == ctx
    a = cached
    b = ctx
    n = len(b)
    if len(a) != n:
        return False
    if _identical_items(a, b, n):
        return True
    return _same_items(a, b, 0)


def _same_items(a, b, start):
    """Item-wise equality from ``start`` on (an item that is not the very
    same object: a nested tuple, or an equal value made anew)."""
    for i in range(start, len(b)):
        x = a[i]
        y = b[i]
        if x is not y:
            if type(x) is tuple and type(y) is tuple:
                if not _same_context(x, y):
                    return False
            elif x != y:
                return False
    return True


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_first).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
