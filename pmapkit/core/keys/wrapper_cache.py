"""What wrappers of one function share, held weakly on the function.

``pmapkit.pmap(f, ...)`` or ``pmapkit.pjit(f, ...)`` built anew (in a loop,
inside a loss under ``grad``, by every ``jax.pmap`` of a script run with
``--route-pmap``) finds here what an earlier wrapper of the same ``f`` with
the same parameters made: its validated options, traced bodies and compiled
entries. So a fresh wrapper traces and compiles nothing, as with
``jax.pmap``/``jax.jit``, whose caches are keyed by the function weakly.

Functions are told apart by identity (a closure or lambda made anew is a
new function, as in JAX); a bound method by its ``__self__`` (held weakly)
and ``__func__``, since the method object itself is made anew on every
attribute read. What cannot be referenced weakly shares nothing. Values
must not refer to the function, or it would never die.

Parameters are keyed with their types (``_cache_keys.params_key``): ``1``,
``1.0`` and ``True`` are equal in Python but not the same option. ``clear()`` (run by
``pmapkit.clear_caches()`` / ``jax.clear_caches()``) drops everything.
"""
from __future__ import annotations

import threading
import types
import weakref

from pmapkit.core.keys import caches
from pmapkit.core.hitpath._compiled import lru as _lru_mod

# Distinct parameter sets kept per function; more evict the oldest (they
# only cost a trace and a compile when used again).
MAX_PER_FUNCTION = 32

# Reentrant: a weak reference's callback may run (at a collection) while
# this thread holds it.
_lock = threading.RLock()
_slots: dict = {}  # id(anchor) -> _Slot


class _Slot:
    __slots__ = ("ref", "entries")

    def __init__(self, ref):
        self.ref = ref
        self.entries = {}


def _anchor(fun, key):
    """``(object held weakly, key within it)`` for ``fun``."""
    if type(fun) is types.MethodType:
        return fun.__self__, (fun.__func__, key)
    return fun, key


def lookup(fun, key):
    """What ``store`` kept for ``fun`` and ``key``, or None."""
    if key is None:
        return None
    anchor, key = _anchor(fun, key)
    slot = _slots.get(id(anchor))
    if slot is None or slot.ref() is not anchor:
        return None
    return slot.entries.get(key)


def store(fun, key, value):
    """Keep ``value`` for ``fun`` and ``key`` while ``fun`` (a method's
    ``__self__``) lives; returns the value kept (an earlier one wins a race).
    Does nothing for a key of None or an object without weak references."""
    if key is None:
        return value
    anchor, key = _anchor(fun, key)
    with _lock:
        slot = _slots.get(id(anchor))
        if slot is None or slot.ref() is not anchor:
            ident = id(anchor)
            try:
                ref = weakref.ref(anchor, lambda _, ident=ident: _forget(ident))
            except TypeError:
                return value
            slot = _slots[ident] = _Slot(ref)
        kept = slot.entries.setdefault(key, value)
        while len(slot.entries) > MAX_PER_FUNCTION:
            del slot.entries[next(iter(slot.entries))]
    return kept


class _Shared:
    """One function's validated options (without the function) and the
    dispatch core's caches, for every wrapper with those parameters."""

    __slots__ = ("cls", "template", "caches")

    def __init__(self, spec):
        self.cls = type(spec)
        self.template = {k: v for k, v in vars(spec).items() if k != "fun"}
        self.caches = _lru_mod.SharedCaches()

    def spec_for(self, fun):
        spec = self.cls.__new__(self.cls)
        spec.__dict__.update(self.template)
        spec.fun = fun
        return spec


def spec_and_caches(fun, key, make_spec, *spec_args):
    """``(spec, SharedCaches)`` of a wrapper of ``fun`` with parameters
    ``key``: an earlier wrapper's (its options are already validated), else
    ``make_spec(*spec_args)``'s, kept for the next one. ``make_spec`` must
    return an object whose ``__dict__`` holds the options and ``fun``.
    (The arguments come apart, not in a closure: a wrapper built per call
    would make the closure, and its cells, every call.)"""
    found = lookup(fun, key)
    if found is None:
        found = store(fun, key, _Shared(make_spec(*spec_args)))
    return found.spec_for(fun), found.caches


def _forget(ident):
    with _lock:
        slot = _slots.get(ident)
        if slot is not None and slot.ref() is None:
            del _slots[ident]


def clear():
    with _lock:
        _slots.clear()


def size():
    """Functions with something kept (for tests and introspection)."""
    return len(_slots)


caches.register_clear(clear)
