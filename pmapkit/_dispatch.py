"""The dispatch core shared by pmapkit's pmap and pjit.

One source, two builds: Cython compiles this file (typed by ``_dispatch.pxd``)
into the ``pmapkit._dispatch`` extension; the same file runs as plain Python
when ``PMAPKIT_PUREPYTHON=1`` or when the extension is missing (see
``pmapkit._compiled``). Keep it free of ``import cython`` so the pure build
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

# Bumped whenever the fields of the fast-path data change; cache_miss stamps it.
FASTPATH_VERSION = 2


class ArgumentAliasError(ValueError):
    """One array passed in two argument positions, at least one donated.

    Raised by the miss path before anything runs. It depends on the values of
    one call, not on its signature, so it never marks a cache entry."""
# Bumped whenever the pickled state of a DispatchFunction changes shape.
PICKLE_VERSION = 1
# Marks the keys of calls with keyword arguments: ``f(x, k=y)`` flattens to
# the same treedef as ``f((x,), {"k": y})`` and must not share its entry.
KWARGS_MARK = "**kwargs"


class LeafTypes:
    """The leaf classes the hot path recognises and how it treats them; made
    once (see ``pmapkit.lowering.LEAF_TYPES``) and shared by every entry."""

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
    the GIL).
    """

    def __init__(self):
        self.ready = False
        self.fallback = False
        self.error = None
        self.event = threading.Event()
        self.fastpath = None
        self.executable = None
        self.kept = None
        self.in_shardings = None
        self.host_specs = None
        self.out_handlers = None
        self.out_treedef = None
        self.shard_fallback = None
        self.types = None
        self.donated = None

    def populate(self, fastpath, types):
        version = getattr(fastpath, "version", None)
        if version != FASTPATH_VERSION:
            raise RuntimeError(
                f"pmapkit fast-path data version {version!r} does not match "
                f"the dispatch core's version {FASTPATH_VERSION}; the "
                "installed pmapkit is inconsistent (reinstall it).")
        self.fastpath = fastpath
        self.executable = fastpath.executable
        self.kept = fastpath.kept
        self.in_shardings = tuple(fastpath.in_shardings)
        self.host_specs = tuple(fastpath.host_specs)
        self.out_handlers = list(fastpath.out_handlers)
        self.out_treedef = fastpath.out_treedef
        self.shard_fallback = fastpath.shard_fallback
        self.types = types
        donated = fastpath.donated
        self.donated = tuple(donated) if donated else None

    def aliases_donated(self, leaves):
        """Whether a donated leaf (an array) is also another leaf of the call:
        executing would hand one buffer to two inputs, one of them donated."""
        leaf_types = self.types
        donated = self.donated
        first = {}
        for i in donated:
            x = leaves[i]
            t = type(x)
            if t is leaf_types.array_type or t is leaf_types.key_type:
                if id(x) in first:
                    return True
                first[id(x)] = i
        if not first:
            return False
        for j in range(len(leaves)):
            i = first.get(id(leaves[j]), j)
            if i != j:
                return True
        return False

    def shard(self, leaves):
        """The device arrays the executable takes, one per kept input.

        An array already carrying the compiled sharding is passed as is (no
        copy); host arrays and scalars are sliced and put per device; anything
        else goes to the Python ``shard_fallback`` (resharding, zero-copy
        re-views of equivalent shardings).
        """
        leaf_types = self.types
        kept = self.kept
        in_shardings = self.in_shardings
        n = len(in_shardings)
        out = [None] * n
        for j in range(n):
            i = j if kept is None else kept[j]
            x = leaves[i]
            t = type(x)
            if t is leaf_types.array_type:
                want = in_shardings[j]
                have = getattr(x, leaf_types.sharding_attr)
                if have is want or have == want:
                    if x.is_deleted():
                        leaf_types.raise_deleted(x)  # donated earlier: JAX's error
                    out[j] = x
                else:
                    out[j] = self.shard_fallback(x, i)
            elif t is leaf_types.ndarray_type:
                out[j] = self.host_specs[j].put(x)
            elif (t is float or t is int or t is bool or t is complex
                  or isinstance(x, leaf_types.host_scalar_type)):
                spec = self.host_specs[j]
                out[j] = spec.put(leaf_types.asarray(x, spec.dtype))
            elif t is leaf_types.key_type:
                # in_shardings hold the physical sharding of key inputs.
                base = x._base_array
                want = in_shardings[j]
                have = getattr(base, leaf_types.sharding_attr)
                if (have is want or have == want) and not base.is_deleted():
                    out[j] = base
                else:
                    out[j] = self.shard_fallback(x, i)
            else:
                out[j] = self.shard_fallback(x, i)
        return out


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
      trace_context: returns JAX's trace-context tuple (part of every key).
      probe: ``(trace_state, eval_ref, axis_env_state, top_env)``; see
        ``_jax_private.top_level_probe``.
      lower: ``lower(*args, **kwargs)`` for ``.lower``.
      reduce_fn: returns ``(callable, args)`` for pickling.
    """

    def __init__(self, fun, cache_miss, static_argnums, types, canonical_dtypes,
                 flatten, trace_context, probe, lower, reduce_fn):
        self.fun = fun
        self._cache_miss = cache_miss
        self._static_argnums = tuple(static_argnums)
        self._static_set = frozenset(static_argnums)
        self._max_static = max(static_argnums) if static_argnums else -1
        self._types = types
        self._array_type = types.array_type
        self._ndarray_type = types.ndarray_type
        self._host_scalar_type = types.host_scalar_type
        self._key_type = types.key_type
        # Leaf signatures are interned to small ints, so keys hash and compare
        # fast; device arrays made by one result handler share an aval object,
        # so their ids are found by identity without rebuilding the signature.
        self._sig_ids = {}
        self._aval_ids = {}
        self._next_id = itertools.count()
        self._canonical_dtypes = frozenset(canonical_dtypes)
        self._flatten = flatten
        self._trace_context = trace_context
        self._trace_state = probe[0]
        self._eval_ref = probe[1]
        self._axis_env_state = probe[2]
        self._top_env = probe[3]
        self._lower = lower
        self._reduce_fn = reduce_fn
        self._caches = {}
        self._current = (None, {})
        self._always_fallback = False
        # Called by clear_cache: the Python side's caches of traced bodies.
        self._on_clear = None

    # -- the call -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self._dispatch(args, kwargs)

    def _dispatch(self, args, kwargs):
        if self._always_fallback or not self._is_top_level():
            # Under a JAX trace the call must bind our primitive; never cache it.
            return self._cache_miss(*args, **kwargs)[0]
        signed = self._sign(args, kwargs)
        if signed is None:
            return self._cache_miss(*args, **kwargs)[0]
        key = signed[0]
        leaves = signed[1]
        # JAX's trace context (x64, default device, ...) selects a cache; it is
        # compared, not hashed, per call: equal contexts share elements.
        ctx = self._trace_context()
        current = self._current
        if current[0] != ctx:
            current = self._select_context(ctx)
        cache = current[1]
        try:
            entry = cache.get(key)
        except TypeError:
            # An unhashable static argument: cache_miss raises the clear error.
            return self._cache_miss(*args, **kwargs)[0]
        if entry is None:
            fresh = CacheEntry()
            entry = cache.setdefault(key, fresh)
            if entry is fresh:
                return self._compile_entry(entry, args, kwargs, cache, key)
        if not entry.ready:
            entry.event.wait()
            if entry.error is not None:
                raise entry.error
        if entry.fallback:
            return self._cache_miss(*args, **kwargs)[0]
        if entry.donated is not None and entry.aliases_donated(leaves):
            # The miss path names both positions in its error, before running.
            return self._cache_miss(*args, **kwargs)[0]
        arrays = entry.shard(leaves)
        results = entry.executable.execute_sharded(arrays)
        outs = results.consume_with_handlers(entry.out_handlers)
        return entry.out_treedef.unflatten(outs)

    def _select_context(self, ctx):
        cache = self._caches.setdefault(ctx, {})
        current = (ctx, cache)
        self._current = current
        return current

    def _is_top_level(self):
        return (self._trace_state.value is self._eval_ref
                and self._axis_env_state.value is self._top_env)

    def _compile_entry(self, entry, args, kwargs, cache, key):
        # Only the thread that inserted the entry gets here; others wait.
        try:
            result = self._cache_miss(*args, **kwargs)
            fastpath = result[1]
            if fastpath is None:
                entry.fallback = True
            else:
                entry.populate(fastpath, self._types)
        except ArgumentAliasError:
            # About this call's values only: waiters take Python with their
            # own arguments, and the next call of the signature compiles.
            entry.fallback = True
            if cache.get(key) is entry:
                del cache[key]
            raise
        except BaseException as exc:
            entry.fallback = True
            entry.error = exc
            raise
        finally:
            entry.ready = True
            entry.event.set()
        return result[0]

    def _sign(self, args, kwargs):
        """``(key, flat dynamic leaves)``, or None when some leaf has no cheap
        signature (tracers, unknown types): those calls always take Python."""
        nargs = len(args)
        if self._max_static < 0 and not kwargs:
            # Common shapes signed without pytree flattening: each argument a
            # leaf, or a plain list/tuple of leaves. Such keys start with an
            # int and mark each list/tuple with a negative int encoding its
            # type and length (leaf ids are >= 0), so they never collide with
            # the treedef-keyed ones below.
            key = [nargs]
            leaves = []
            simple = True
            for x in args:
                t = type(x)
                if t is list or t is tuple:
                    key.append((-2 if t is list else -3) - 2 * len(x))
                    for y in x:
                        leaf_id = self._leaf_id(y)
                        if leaf_id < 0:
                            simple = False
                            break
                        key.append(leaf_id)
                        leaves.append(y)
                    if not simple:
                        break
                else:
                    leaf_id = self._leaf_id(x)
                    if leaf_id < 0:
                        simple = False
                        break
                    key.append(leaf_id)
                    leaves.append(x)
            if simple:
                return (tuple(key), leaves)
        if self._max_static >= 0:
            if self._max_static >= nargs:
                return None
            statics = []
            dyn = []
            for i in range(nargs):
                if i in self._static_set:
                    # The type too: 1, 1.0 and True are == but trace differently.
                    statics.append((type(args[i]), args[i]))
                else:
                    dyn.append(args[i])
            if kwargs:
                flat = self._flatten((tuple(dyn), kwargs))
                key = [flat[1], tuple(statics), KWARGS_MARK]
            else:
                flat = self._flatten(tuple(dyn))
                key = [flat[1], tuple(statics)]
        elif kwargs:
            flat = self._flatten((args, kwargs))
            key = [flat[1], KWARGS_MARK]
        else:
            # Without keyword arguments the args tuple alone flattens to the
            # same leaves, faster.
            flat = self._flatten(args)
            key = [flat[1]]
        leaves = flat[0]
        for x in leaves:
            leaf_id = self._leaf_id(x)
            if leaf_id < 0:
                return None
            key.append(leaf_id)
        return (tuple(key), leaves)

    def _leaf_id(self, x):
        """The interned signature id of one leaf, or -1 if it has none."""
        t = type(x)
        if t is self._array_type:
            aval = x.aval
            found = self._aval_ids.get(aval)
            if found is not None:
                return found
            leaf_id = self._intern((aval.dtype, aval.shape, aval.weak_type))
            if len(self._aval_ids) >= 256:
                self._aval_ids = {}  # bound the memory held by remembered avals
            self._aval_ids[aval] = leaf_id
            return leaf_id
        if t is self._ndarray_type:
            dt = x.dtype
            if dt in self._canonical_dtypes:
                # Signs like a device array of the same aval: shares entries.
                return self._intern((dt, x.shape, False))
            return self._intern((t, dt, x.shape))
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

    def _intern(self, sig):
        found = self._sig_ids.get(sig)
        if found is None:
            found = self._sig_ids.setdefault(sig, next(self._next_id))
        return found

    # -- introspection ---------------------------------------------------------
    @property
    def _cache_size(self):
        return sum([len(c) for c in self._caches.values()])

    def _debug_cache_keys(self):
        """A readable description of every cache entry (all trace contexts):
        "The cache contains N elements:" then, per entry, its argument
        signatures, tree structures, static values, the shardings it was
        compiled for and its trace context, to see why a call missed."""
        from pmapkit import _cache_keys  # pure Python, needed only here

        elements = []
        for ctx, cache in list(self._caches.items()):
            for key, entry in list(cache.items()):
                elements.append((ctx, key, entry))
        return _cache_keys.describe(elements, dict(self._sig_ids),
                                    self._static_argnums)

    def _debug_compute_cache_key(self, *args, **kwargs):
        signed = self._sign(args, kwargs)
        return None if signed is None else signed[0]

    def clear_cache(self):
        self._caches = {}
        self._current = (None, {})
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
        name = getattr(self.fun, "__qualname__", None) or repr(self.fun)
        return f"<pmapkit DispatchFunction of {name}>"
