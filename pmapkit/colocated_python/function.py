"""``colocated_python(fun)``: the callable, its specializations and caches.

A call flattens ``(args, kwargs)`` and looks the input signature up in two
maps that lead to the same specialized entry:

- the fast map, keyed by treedef and, per leaf, dtype, shape and ``id`` of the
  sharding (identity: cheap to hash, no sharding ``__eq__``);
- the strong map, keyed by treedef and full specs (sharding equality), which
  also keeps the shardings whose ids the fast key names alive.

A fast miss that hits the strong map moves the entry's one fast key to the
new shardings' ids (so the fast map stays one key per entry). A miss on both
creates the entry (counted by JAX's test event
``colocated_python_func._get_specialized_func``). An entry's first call runs
synchronously and fixes the output specs (or asks ``out_specs_fn``); later
calls go straight to the compiled form. ``jax.clear_caches()`` empties every
function's maps.
"""
from __future__ import annotations

import functools
import threading
import types
import weakref

import jax

from pmapkit import _jax_private as jp
from pmapkit.colocated_python import execution
from pmapkit.colocated_python.specs import (
    Specialization, array_spec, as_device_list, device_list_of, flatten_specs,
    list_outside)

_tree_flatten = jax.tree_util.tree_flatten
_SPECIALIZED_EVENT = "colocated_python_func._get_specialized_func"


class _AllSpecCaches:
    """One object JAX's ``clear_caches`` knows; it clears every live SpecCache."""

    def __init__(self):
        self._caches = weakref.WeakSet()
        self._lock = threading.Lock()
        jp.register_cache(self, "pmapkit_colocated_python_specializations")

    def add(self, cache):
        with self._lock:
            self._caches.add(cache)

    def cache_clear(self):
        with self._lock:
            caches = list(self._caches)
        for cache in caches:
            cache.clear()

    def cache_info(self):
        return None

    def cache_keys(self):
        return []


ALL_SPEC_CACHES = _AllSpecCaches()


class _Entry:
    """One input specialization: its executor, then the call with known outputs."""

    def __init__(self, name, fun, spec, on_devices):
        self.name, self.spec = name, spec
        self.executor = execution.make_executor(name, fun, spec.in_specs, spec.devices)
        if on_devices is not None:
            on_devices(spec.devices)
        self.fast_key = self.strong_key = None
        self._lock = threading.RLock()
        self.call = self._first_call
        if spec.out_specs is not None:
            self.call = self.executor.compile(spec.out_specs)

    def _first_call(self, *args, **kwargs):
        with self._lock:
            if self.call == self._first_call:
                spec = self.spec
                if spec.out_specs_fn is None:
                    result, out_specs = self.executor.discover(args, kwargs)
                    self.call = self.executor.compile(out_specs)
                    self.spec = spec.updated(out_specs=out_specs)
                    return result
                arg_specs, kwarg_specs = jax.tree_util.tree_map(array_spec, (args, kwargs))
                out_specs = flatten_specs(
                    spec.out_specs_fn(*arg_specs, **kwarg_specs),
                    "the result of out_specs_fn")
                self.call = self.executor.compile(out_specs)
                self.spec = spec.updated(out_specs=out_specs)
        return self.call(*args, **kwargs)


class SpecCache:
    """Input signature -> _Entry, for one colocated callable."""

    def __init__(self):
        self.fast: dict = {}
        self._strong: dict = {}
        self._lock = threading.RLock()
        ALL_SPEC_CACHES.add(self)

    def clear(self):
        with self._lock:
            self.fast = {}
            self._strong = {}

    def __len__(self):
        return len(self._strong)

    def lookup(self, fast_key, leaves, treedef, make):
        with self._lock:
            strong_key = (treedef, tuple(array_spec(x) for x in leaves))
            entry = self._strong.pop(strong_key, None)
            if entry is None:
                entry = make(strong_key)
            else:
                self.fast.pop(entry.fast_key, None)
            # Re-insert under the new key object: it holds the shardings the
            # fast key names by id.
            self._strong[strong_key] = entry
            entry.fast_key, entry.strong_key = fast_key, strong_key
            if fast_key is not None:
                self.fast[fast_key] = entry
            return entry


def fast_key(treedef, leaves):
    """Treedef + per leaf (dtype, shape, id(sharding)); AttributeError for a
    leaf that is not an array (the slow path reports it)."""
    key = [treedef]
    for x in leaves:
        key.append(x.dtype)
        key.append(x.shape)
        key.append(id(x.sharding))
    return tuple(key)


class ColocatedFunction:
    """What ``colocated_python(fun)`` returns: call it, or ``specialize`` it."""

    def __init__(self, fun, specialization=None, on_devices=None):
        functools.update_wrapper(self, fun, updated=())
        self._fun = fun
        self._name = getattr(fun, "__name__", None) or type(fun).__name__
        self._spec = specialization or Specialization()
        self._on_devices = on_devices
        self._cache = SpecCache()

    def __repr__(self):
        return f"<colocated_python function {self._name}>"

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    def specialize(self, in_specs=None, out_specs_fn=None, devices=None):
        """A new callable with some of its specs fixed (each at most once).

        ``in_specs``: pytree of ``jax.ShapeDtypeStruct`` for ``(args, kwargs)``;
        ``out_specs_fn``: input specs -> output specs (no synchronous first
        call); ``devices``: where to run (required for functions without
        array inputs).
        """
        if in_specs is not None:
            in_specs = flatten_specs(in_specs, "in_specs")
        if out_specs_fn is not None and not callable(out_specs_fn):
            raise TypeError("out_specs_fn must be callable, got "
                            f"{type(out_specs_fn).__name__}: {out_specs_fn!r}")
        if devices is not None:
            devices = as_device_list(devices)
        spec = self._spec.updated(in_specs=in_specs, out_specs_fn=out_specs_fn,
                                  devices=devices)
        return ColocatedFunction(self._fun, spec, self._on_devices)

    def __call__(self, *args, **kwargs):
        leaves, treedef = _tree_flatten((args, kwargs))
        try:
            key = fast_key(treedef, leaves)
        except AttributeError:
            key = None
        else:
            entry = self._cache.fast.get(key)
            if entry is not None:
                return entry.call(*args, **kwargs)
        entry = self._cache.lookup(key, leaves, treedef, self._make_entry)
        return entry.call(*args, **kwargs)

    def _make_entry(self, strong_key):
        treedef, specs = strong_key
        spec = self._spec
        if spec.in_specs is not None and spec.in_specs != strong_key:
            raise ValueError(
                f"colocated_python function {self._name} was specialized with "
                f"in_specs {spec.in_specs[1]} structured as {spec.in_specs[0]}, "
                f"but was called with {specs} structured as {treedef}")
        if spec.devices is None:
            arg_devices = device_list_of(specs)
            if arg_devices is None:
                raise ValueError(
                    "No devices found. colocated_python function without input"
                    " arguments must be first specialized with devices.")
            spec = spec.updated(devices=arg_devices)
        else:
            # As jax's: once the devices are given, arguments may list them in
            # any order, or use some of them; none may be elsewhere.
            stray = list_outside(specs, spec.devices)
            if stray is not None:
                raise ValueError(
                    f"colocated_python function {self._name} was specialized with "
                    f"devices {list(spec.devices)}, but its arguments are on "
                    f"{list(stray)}")
        if spec.in_specs is None:
            spec = spec.updated(in_specs=strong_key)
        jp.test_event(_SPECIALIZED_EVENT)
        return _Entry(self._name, self._fun, spec, self._on_devices)

    # introspection
    @property
    def _cache_size(self):
        return len(self._cache)


def colocated_python(fun):
    """Run ``fun`` on the host of the devices its jax.Array arguments live on.

    Returns a callable with ``specialize(in_specs=, out_specs_fn=, devices=)``.
    Arguments and results must be jax.Arrays (pytrees of them). The first call
    per input signature runs synchronously to learn the output specs, unless
    ``out_specs_fn`` gives them.
    """
    if not callable(fun):
        raise TypeError("colocated_python expects a callable, got "
                        f"{type(fun).__name__}: {fun!r}")
    return ColocatedFunction(fun)
