"""The call: ``DispatchFunction``, the callable pmapkit's pmap and pjit
return. Per call it signs the arguments (the key, format ``_keys``), selects
the cache of the trace context, finds the entry and feeds it (``_feed``);
recency is the shared LRU's (``_lru``), a call of one numpy argument may go
by the express (``_express``), and everything else is the miss path's
(``_miss``, its base class).

One source, two builds: Cython compiles this file (typed by ``_dispatch.pxd``)
into the ``pmapkit.core.hitpath._dispatch`` extension; the same file runs as plain Python
when ``PMAPKIT_PUREPYTHON=1`` or when the extension is missing (see
``pmapkit.core.hitpath._compiled``). Keep it free of ``import cython`` so the pure build
needs no Cython at run time.

Everything that needs tracing or compiling lives behind ``cache_miss``, a
Python callable returning ``(outputs, FastpathData | None)``.
"""
import types

from pmapkit.core.hitpath._express import NOT_EXPRESS as _NOT_EXPRESS
from pmapkit.core.hitpath._express import ExpressCall, express_arguments, express_epoch, prime
from pmapkit.core.hitpath._feed import (CacheEntry, execute_donating,
                                        same_host_signature)
from pmapkit.core.hitpath._keys import (KWARGS_MARK, LIST_MARK, TUPLE_MARK, decode_key,
                                        same_context, static_entry)
from pmapkit.core.hitpath._lru import (DEFAULT_CACHE_SIZE, SharedCaches, clear,
                                       evict_all, insert, touch)
from pmapkit.core.hitpath._miss import MissPath

# Interned leaf signatures kept per function before the table starts afresh.
MAX_SIGNATURES = 1 << 16

# Bumped whenever the pickled state of a DispatchFunction changes shape.
PICKLE_VERSION = 1


class DispatchFunction(MissPath):
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
        axis_env_index[, value_of]])``; see ``_jax_private.top_level_probe``.
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
        # The array's getters themselves (``LeafTypes.readers``).
        self._aval_of = types.aval_of
        self._sharding_of = types.sharding_of
        self._committed_of = types.committed_of
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
        # Reads a config state's value (its getter, called with the state).
        self._value_of = probe[5] if len(probe) > 5 else _value_attr
        self._lower = lower
        self._reduce_fn = reduce_fn
        self._describe = describe
        self._caches = shared.caches
        self._current = shared.current
        self._context_state = context_state
        self._cache_size_limit = DEFAULT_CACHE_SIZE if cache_size is None else int(cache_size)
        self._misses = 0
        self._evictions = 0
        # Called by clear_cache: the Python side's caches of traced bodies.
        self._on_clear = None
        # The keys of the last two one-leaf calls signed, the last first
        # (see ``_sign_one``).
        self._last_key1 = None
        self._prev_key1 = None
        # ... and of the last two calls of several leaves (``_sign_leaves``).
        self._last_keyn = None
        self._prev_keyn = None
        # (dtype, shape, id) of the last numpy leaf signed (see ``_leaf_id``).
        self._last_host = None
        # Runs the calls of one numpy argument by an entry's express call
        # (None: none).
        self._express = None
        if _COMPILED:
            # Calls come by vectorcall (``_vector_entry``), not through
            # ``__call__``'s tuple and dict.
            self._vectorcall = _vectorcall_function()

    # -- the call -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # The pure build's entry (and the compiled build's for a caller that
        # asks tp_call); compiled calls come by ``_vector_entry``.
        return self._dispatch(args, kwargs)

    def _dispatch(self, args, kwargs):
        # Read before the trace context: a watched state changing after it
        # makes an express primed by this call stale.
        epoch = express_epoch()
        if _special_flags is not None and (_special_flags[0].value
                                           or _special_flags[1].value):
            # jax_debug_nans/infs on: Python checks the outputs (and keeps
            # donation off); nothing is cached for such calls.
            return self._python_call(args, kwargs)
        express = self._express
        if express is not None and not kwargs:
            out = express.run(args)
            if out is not _NOT_EXPRESS:
                return out
            if not express.live:
                self._express = None
        if self._value_of(self._trace_state) is not self._eval_ref:
            # Under a JAX trace the call must bind our primitive; never cache it.
            return self._python_call(args, kwargs)
        key = None
        leaves = args
        if self._max_static < 0 and not kwargs:
            if len(args) == 1:
                key = self._sign_one(args[0])
            elif len(args) > 1:
                key = self._sign_leaves(args)
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
        if (not same_context(current[0], ctx)
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
            entry = insert(self._shared, cache, key, fresh)
            if entry is fresh:
                return self._compile_entry(entry, args, kwargs, cache, key, leaves)
        if not entry.ready:
            entry.event.wait()
        if entry.fallback:
            if entry.failure is not None:
                return self._retry_failed(entry, args, kwargs, cache, key, leaves)
            return self._python_call(args, kwargs)
        # Recency is the shared LRU's clock: a hit stamps its entry.
        touch(self._shared, entry)
        try:
            if entry.donated is not None:
                if entry.aliases_donated(leaves):
                    # The miss path names both positions in its error, before running.
                    return self._python_call(args, kwargs)
                outs = execute_donating(entry, leaves).consume_with_handlers(
                    entry.out_handlers)
            elif (entry.make_express is not None and not kwargs
                    and self._max_static < 0 and self._context_state is None
                    # (one device array, the usual call, told in one compare)
                    and (len(args) > 1
                         or (len(args) == 1 and type(args[0]) is self._ndarray_type))
                    and express_arguments(args, entry.types)):
                outs = prime(entry, args, epoch)
                if outs is None:
                    outs = entry.run(leaves)
                else:
                    self._keep_express(entry, cache, args)
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

    def _keep_express(self, entry, cache, args):
        """Let ``entry``'s express (just run by this call of ``args``) take
        the next calls of their kinds, dtypes and shapes first, if it is
        kept."""
        if entry.express is not None:
            self._express = ExpressCall(entry, args, cache, self._shared)

    def _select_context(self, ctx, extra):
        key = ctx if self._context_state is None else (ctx, extra)
        cache = self._caches.setdefault(key, {})
        current = (ctx, extra, cache)
        self._current = current
        self._shared.current = current
        return current

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
        two keys made are reused (two signatures called in turn find theirs
        too): the very object the cache holds, so the lookup finds it by
        identity and nothing is allocated."""
        t = type(x)
        if t is list or t is tuple:
            return None
        leaf_id = self._leaf_id(x)
        if leaf_id < 0:
            return None
        key1 = self._last_key1
        if key1 is not None and key1[1] == leaf_id:
            return key1
        prev = self._prev_key1
        if prev is None or prev[1] != leaf_id:
            prev = (1, leaf_id)
        self._prev_key1 = key1
        self._last_key1 = prev
        return prev

    def _sign_leaves(self, args):
        """The key of a call of several arguments, each a leaf (what
        ``_sign_simple`` makes of them: the count, then each leaf's id), or
        None (some argument is not such a leaf). As ``_sign_one``, the last
        two keys made are reused, and a call matching the last one
        allocates nothing."""
        nargs = len(args)
        for i in range(nargs):
            t = type(args[i])
            if t is list or t is tuple:
                return None
        # Read once: another thread may put its own key there meanwhile
        # (a leaf's signing may run Python code, and let it in).
        last = self._last_keyn
        if last is not None and len(last) != nargs + 1:
            last = None
        key = None  # made at the first id that differs from ``last``'s
        for i in range(nargs):
            leaf_id = self._leaf_id(args[i])
            if leaf_id < 0:
                return None
            if key is None:
                if last is not None and last[i + 1] == leaf_id:
                    continue
                key = [nargs]
                for k in range(1, i + 1):
                    key.append(last[k])  # equal so far (none when ``last`` is None)
            key.append(leaf_id)
        if key is None:
            return last
        fresh = tuple(key)
        prev = self._prev_keyn
        if prev is not None and prev == fresh:
            fresh = prev
        self._prev_keyn = self._last_keyn
        self._last_keyn = fresh
        return fresh

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
            aval = self._aval_of(x)
            leaf_id = self._aval_ids.get(aval)
            if leaf_id is None:
                leaf_id = self._intern((aval.dtype, aval.shape, aval.weak_type))
                if len(self._aval_ids) >= 256:
                    self._aval_ids.clear()  # bound the memory held by remembered avals
                self._aval_ids[aval] = leaf_id
            if self._sign_shardings and self._committed_of(x):
                leaf_id = self._placed_id(leaf_id, self._sharding_of(x))
            if self._sign_global and not x.is_fully_addressable:
                leaf_id = self._intern(("global", leaf_id))
            return leaf_id
        if t is self._ndarray_type:
            # The last host array's signature, reused (a loop feeds batches
            # of one dtype and shape): hashing a numpy dtype is not cheap.
            # Compiled, asked in C (``same_host_signature``), without
            # making the array's dtype and shape objects.
            last = self._last_host
            if last is not None:
                if same_host_signature(x, last[0], last[1]):
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
        self._evictions += evict_all(self._shared, size)

    def clear_cache(self):
        """Empty the entries of this wrapper and of every wrapper sharing
        them (in place: each sharer's selected context stays one of them)."""
        clear(self._shared)
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


def _value_attr(state):
    # A config state's value, read by name (a probe tuple without its reader).
    return state.value


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


def _vector_entry(fn, args, kwargs):
    """What a vectorcall of a compiled ``DispatchFunction`` runs: its C
    entry (``_dispatch.pxd``) makes ``args`` and ``kwargs`` from the
    caller's stack, with one shared empty dict for no keywords (never
    written: the call reads its keywords, or unpacks them into a new dict)."""
    called = fn
    return called._dispatch(args, kwargs)


# Cython turns module-level functions into its own function type; the plain
# interpreter keeps ``function``.
_COMPILED = type(_first).__name__ != "function"

if _COMPILED:
    _install_vectorcall(DispatchFunction, _VECTORCALL_OFFSET, _vector_entry)

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
