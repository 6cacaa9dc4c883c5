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
import threading
import types

# Bumped whenever the fields of the fast-path data change; cache_miss stamps it.
FASTPATH_VERSION = 1
# Bumped whenever the pickled state of a DispatchFunction changes shape.
PICKLE_VERSION = 1


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

    def populate(self, fastpath):
        version = getattr(fastpath, "version", None)
        if version != FASTPATH_VERSION:
            raise RuntimeError(
                f"pmapkit fast-path data version {version!r} does not match "
                f"the dispatch core's version {FASTPATH_VERSION}; the "
                "installed pmapkit is inconsistent (reinstall it).")
        self.fastpath = fastpath
        self.executable = fastpath.executable
        self.kept = fastpath.kept
        self.in_shardings = fastpath.in_shardings
        self.host_specs = fastpath.host_specs
        self.out_handlers = fastpath.out_handlers
        self.out_treedef = fastpath.out_treedef
        self.shard_fallback = fastpath.shard_fallback


class DispatchFunction:
    """A compiled-dispatch callable wrapping one user function.

    Args:
      fun: the user's function (kept for ``__wrapped__`` and introspection).
      cache_miss: ``cache_miss(*args, **kwargs) -> (out, fastpath | None)``.
      static_argnums: sorted tuple of non-negative positional indices.
      shard_args: ``shard_args(leaves, entry) -> list`` of device arrays.
      array_type: the jaxlib array class whose instances are signed cheaply.
      ndarray_type: ``numpy.ndarray``.
      host_scalar_type: ``numpy.generic`` (numpy scalars sign by type).
      canonical_dtypes: numpy dtypes that need no canonicalization, so a numpy
        leaf of such a dtype signs like a device array of the same aval.
      flatten: pytree flatten returning ``(leaves, treedef)``.
      trace_context: returns JAX's trace-context tuple (part of every key).
      probe: ``(trace_state, eval_ref, axis_env_state, top_env)``; see
        ``_jax_private.top_level_probe``.
      lower: ``lower(*args, **kwargs)`` for ``.lower``.
      reduce_fn: returns ``(callable, args)`` for pickling.
    """

    def __init__(self, fun, cache_miss, static_argnums, shard_args, array_type,
                 ndarray_type, host_scalar_type, canonical_dtypes, flatten, trace_context, probe,
                 lower, reduce_fn):
        self.fun = fun
        self._cache_miss = cache_miss
        self._static_argnums = tuple(static_argnums)
        self._static_set = frozenset(static_argnums)
        self._max_static = max(static_argnums) if static_argnums else -1
        self._shard_args = shard_args
        self._array_type = array_type
        self._ndarray_type = ndarray_type
        self._host_scalar_type = host_scalar_type
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

    # -- the call -------------------------------------------------------------
    def __call__(self, *args, **kwargs):
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
                return self._compile_entry(entry, args, kwargs)
        if not entry.ready:
            entry.event.wait()
            if entry.error is not None:
                raise entry.error
        if entry.fallback:
            return self._cache_miss(*args, **kwargs)[0]
        arrays = self._shard_args(leaves, entry)
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

    def _compile_entry(self, entry, args, kwargs):
        # Only the thread that inserted the entry gets here; others wait.
        try:
            result = self._cache_miss(*args, **kwargs)
            fastpath = result[1]
            if fastpath is None:
                entry.fallback = True
            else:
                entry.populate(fastpath)
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
            flat = self._flatten((tuple(dyn), kwargs))
            key = [flat[1], tuple(statics)]
        else:
            flat = self._flatten((args, kwargs))
            key = [flat[1]]
        leaves = flat[0]
        array_type = self._array_type
        ndarray_type = self._ndarray_type
        for x in leaves:
            t = type(x)
            if t is array_type:
                aval = x.aval
                key.append((aval.dtype, aval.shape, aval.weak_type))
            elif t is ndarray_type:
                dt = x.dtype
                if dt in self._canonical_dtypes:
                    key.append((dt, x.shape, False))
                else:
                    key.append((t, dt, x.shape))
            elif t is float or t is int or t is bool or t is complex:
                key.append(t)
            elif isinstance(x, self._host_scalar_type):
                key.append(t)  # a numpy scalar's type fixes its dtype
            else:
                return None
        return (tuple(key), leaves)

    # -- introspection ---------------------------------------------------------
    @property
    def _cache_size(self):
        return sum([len(c) for c in self._caches.values()])

    def _debug_cache_keys(self):
        """Signature keys of every cache entry (all trace contexts)."""
        keys = []
        for cache in self._caches.values():
            keys.extend(cache.keys())
        return keys

    def _debug_compute_cache_key(self, *args, **kwargs):
        signed = self._sign(args, kwargs)
        return None if signed is None else signed[0]

    def clear_cache(self):
        self._caches = {}
        self._current = (None, {})

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
