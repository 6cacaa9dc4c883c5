"""JAX's C++ call made twice: the express call of a program (its misses
pmapkit's), and which config states of the trace context that call does not
key on, watched so that a change makes every express stale."""
from __future__ import annotations

import numpy as _np
from jax._src import api as _api
from jax._src import config as _config
from jax._src import core as _core
from jax._src import tree_util as _tree_util
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import _jax as _jaxlib_ext

from pmapkit._jax_private import probes as _probes
from pmapkit._jax_private.core import trace_context_names
from pmapkit._jax_private.runtime import compiled_cpp_call

#: jaxlib's C++ ``pjit`` constructor (the ``"express"`` probe's input).
cpp_pjit = _jaxlib_ext.pjit
_probes.register("express", lambda: _probes.cpp_pjit_reason(cpp_pjit))


def express_cpp_call(host_call, miss_for, refuse):
    """A second C++ call of ``host_call``'s program (``compiled_cpp_call``)
    whose misses are pmapkit's: ``miss_for(jax_miss)`` is called once and
    returns the function JAX's C++ calls where its cache has no entry for a
    call's signature (argument types, and the values of every config in
    JAX's jit key: the trace state, the axis env, x64, the mesh contexts,
    ...), ``jax_miss`` being JAX's own (which runs the program and gives
    the C++ call its entry); ``refuse`` is what the C++ call runs under
    ``jax.disable_jit``. None where JAX has no C++ call, or where its
    constructor does not take pmapkit's arguments (``probes``)."""
    if host_call is None or _probes.off("express") is not None:
        return None
    return cpp_pjit(
        getattr(host_call, "__name__", "pmapkit_express"), refuse,
        miss_for(host_call._cache_miss), [], [], _pxla.JitGlobalCppCacheKeys(),
        _tree_util.dispatch_registry, _pxla.cc_shard_arg)


# The trace-context states already classified by ``watch_trace_context_states``
# (by id), and the callbacks their hooks call.
_classified_states = set()
_state_watchers = []


def watch_trace_context_states(callback):
    """Call ``callback()`` whenever a config state of JAX's trace context
    that JAX's C++ call does not key on changes (globally or for a thread:
    ``jax.config.update``, a ``with`` block). Which ones is asked of this
    jaxlib (``_keyed_by_cpp_call``): on jax 0.10.2 four (the HLO source
    regex, mutable-array checks, the high-dynamic-range Gumbel sampler,
    ``jax_disable_jit``, which the C++ call answers by running its
    function); the states JAX flips itself on every eager op or trace
    (constant folding, ``check_vma``, dtype promotion) are keyed, so they
    cost nothing here. States made later are classified when this is called
    again. Returns the number of entries of the trace context, or None when
    some state JAX's C++ call does not key on has no hooks either (or the
    trace context cannot be named): then no change of it could be heard;
    -1 when the probe could not run in this context (asked again later)."""
    if _probes.off("express") is not None:
        return None  # no express calls to keep fresh
    if callback not in _state_watchers:
        _state_watchers.append(callback)
    _watch_new_states()
    names = trace_context_names()
    if names is None:
        return None
    fresh = []
    hookable = []
    for name in names:
        state = _config.config_states.get(name)
        if state is None:
            # A raw config_ext.Config (no hooks): the mesh and compute-on
            # contexts live in config, the axis env in core; a user
            # context (JAX makes those keyed) is found by neither.
            state = getattr(_config, name, None) or getattr(_core, name, None)
            if not isinstance(state, _jaxlib_ext.config.Config):
                continue
        if id(state) in _classified_states:
            continue
        fresh.append(state)
        hookable.append(hasattr(state, "_update_thread_local_hook"))
    if fresh:
        try:
            keyed = _keyed_by_cpp_call(fresh)
        except Exception:  # noqa: BLE001 - the probe could not run here: ask again later
            return -1
        for state, can_hook, is_keyed in zip(fresh, hookable, keyed):
            if not is_keyed and not can_hook:
                return None  # a change nothing would tell: no express calls
        for state, can_hook, is_keyed in zip(fresh, hookable, keyed):
            _classified_states.add(id(state))
            if not is_keyed:
                _chain_change_hooks(state)
    return len(names)


_state_init = None


def _watch_new_states():
    """A config state made from now on calls the watchers once made (JAX's
    ``State`` is the class every ``jax.config`` option is): it may be a
    trace-context state JAX's C++ call does not key on, not yet hooked; the
    next ``watch_trace_context_states`` classifies it."""
    global _state_init
    if _state_init is not None:
        return
    _state_init = _config.State.__init__

    def init(self, *args, **kwargs):
        _state_init(self, *args, **kwargs)
        for watcher in _state_watchers:
            watcher()
    _config.State.__init__ = init


class _Probed(Exception):
    pass


def _keyed_by_cpp_call(states):
    """Per state, whether JAX's C++ call of a program misses (or runs its
    Python function) when that state holds another value on this thread:
    a probe program's call is primed, then each state is set, for this
    thread only and for one call of the probe, to another value (a bool's
    other one, else a fresh object equal to nothing), and restored. Anything else (the primed entry ran, or an
    error) counts as not keyed: it is then watched."""
    compiled = _api.jit(lambda v: v).lower(_np.float32(0)).compile()
    base = compiled_cpp_call(compiled)
    if base is None:
        return [False] * len(states)
    inner = base._cache_miss
    primed = [False]
    seen = [0]

    def miss(*args, **kwargs):
        if primed[0]:
            seen[0] += 1
            raise _Probed()
        return inner(*args, **kwargs)

    def fun(*args, **kwargs):
        seen[0] += 1
        raise _Probed()

    call = express_cpp_call(base, lambda _: miss, fun)
    x = _np.zeros((), _np.float32)
    call(x)
    primed[0] = True
    keyed = []
    for state in states:
        before = seen[0]
        value = state.value
        # Another value: the other truth value, or an object equal to none.
        previous = state.swap_local((not value) if type(value) is bool else object())
        try:
            try:
                call(x)
            except Exception:  # noqa: BLE001 - anything but a miss: watched
                pass
        finally:
            state.set_local(previous)
        keyed.append(seen[0] > before)
    return keyed


def _chain_change_hooks(state):
    global_hook = state._update_global_hook
    local_hook = state._update_thread_local_hook

    def on_global(value):
        if global_hook is not None:
            global_hook(value)
        for watcher in _state_watchers:
            watcher()

    def on_local(value):
        if local_hook is not None:
            local_hook(value)
        for watcher in _state_watchers:
            watcher()

    state._update_global_hook = on_global
    state._update_thread_local_hook = on_local
