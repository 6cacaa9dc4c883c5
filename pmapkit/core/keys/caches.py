"""pmapkit's caches: bounded, and emptied together.

Per pmapped / pjit'd function: the dispatch core's signature cache (least
recently used entries evicted beyond ``per_function`` entries per trace
context) and its cache of traced bodies, both shared by the wrappers of one
function with equal parameters (``pmapkit.core.keys.wrapper_cache``). Process-wide: compiled programs
(least recently used evicted beyond ``programs``) and the jits that wrap our
equations under JAX transformations.

``pmapkit.clear_caches()`` and ``jax.clear_caches()`` empty every one of them
(compiled programs are released once no array or function refers to them);
``pmapkit.set_cache_size(per_function=..., programs=...)`` changes the bounds,
for live functions too. The defaults come from ``PMAPKIT_CACHE_SIZE`` and
``PMAPKIT_PROGRAM_CACHE_SIZE`` when set at import.
"""
from __future__ import annotations

import os
import threading
import weakref

from pmapkit import _jax_private as jp

__all__ = ["clear_caches", "set_cache_size", "cache_sizes"]

DEFAULT_PER_FUNCTION = 256
DEFAULT_PROGRAMS = 512


def _env_size(name, default):
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    return value


_lock = threading.Lock()
_sizes = {"per_function": _env_size("PMAPKIT_CACHE_SIZE", DEFAULT_PER_FUNCTION),
          "programs": _env_size("PMAPKIT_PROGRAM_CACHE_SIZE", DEFAULT_PROGRAMS)}
# Weak references to the live dispatch functions, without callbacks: a
# wrapper built per call (``pmap(f)(x)`` in a loop) then costs one
# ``weakref.ref`` to register and nothing when it dies (a WeakSet's add, and
# its Python removal callback at the death, were a measurable part of such a
# call). Dead references are dropped when the list has doubled since the
# last sweep.
_functions: list = []
_sweep_at = 64
_process_caches = []  # (clear, resize) of each process-wide cache
_clear_hooks = []  # unbounded process-wide stores, emptied with the caches


def cache_sizes():
    """The current bounds: ``{"per_function": n, "programs": m}``."""
    return dict(_sizes)


def per_function_size():
    return _sizes["per_function"]


def programs_size():
    return _sizes["programs"]


def register_function(fn):
    """Track a dispatch function so clearing and resizing reach it."""
    global _sweep_at
    ref = weakref.ref(fn)
    with _lock:
        _functions.append(ref)
        if len(_functions) > _sweep_at:
            _functions[:] = [r for r in _functions if r() is not None]
            _sweep_at = max(64, 2 * len(_functions))


def _live_functions():
    """The registered functions still alive (strong references)."""
    with _lock:
        refs = list(_functions)
    return [fn for ref in refs if (fn := ref()) is not None]


def register_process_cache(clear, resize):
    """A process-wide cache: ``clear()`` empties it, ``resize(n)`` bounds it."""
    with _lock:
        _process_caches.append((clear, resize))


def register_clear(clear):
    """A process-wide store with no bound of its own: ``clear()`` empties it
    (after every function's caches, so nothing refills it meanwhile)."""
    with _lock:
        _clear_hooks.append(clear)


def _check_size(value, what):
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ValueError(f"pmapkit.set_cache_size: {what} must be a positive int "
                         f"(entries kept), got {value!r}")
    return value


def set_cache_size(per_function=None, programs=None):
    """Bound the signature cache of every pmapkit function (``per_function``
    entries per trace context; default 256) and the process-wide cache of
    compiled programs (``programs``; default 512). Least recently used
    entries are evicted; a later call of an evicted signature compiles
    again. Applies to existing functions too."""
    per_function = _check_size(per_function, "per_function")
    programs = _check_size(programs, "programs")
    with _lock:
        if per_function is not None:
            _sizes["per_function"] = per_function
        if programs is not None:
            _sizes["programs"] = programs
        process = list(_process_caches)
    functions = _live_functions()
    if per_function is not None:
        for fn in functions:
            fn._set_cache_size(per_function)
    if programs is not None:
        for _, resize in process:
            resize(programs)


def clear_caches():
    """Empty every pmapkit cache: each function's signatures and traced
    bodies, the compiled programs, the wrapping jits."""
    with _lock:
        process = list(_process_caches)
        hooks = list(_clear_hooks)
    functions = _live_functions()
    for fn in functions:
        fn.clear_cache()
    for clear, _ in process:
        clear()
    for clear in hooks:
        clear()


class _JaxClearHook:
    """Registered with JAX so ``jax.clear_caches()`` empties ours too."""

    def cache_clear(self):
        clear_caches()

    def cache_info(self):
        return {"functions": len(_live_functions()), **cache_sizes()}

    def cache_keys(self):
        return []


_jax_hook = _JaxClearHook()  # JAX keeps a weak reference only
jp.register_cache(_jax_hook, "pmapkit: signature caches and compiled programs")
