"""The JAX module globals pmapkit replaces, each only once a pmapkit system
needs it and only where its probe (``probes``) found it shaped as expected:

- ``jax._src.pjit._get_fastpath_data`` (``fast_dispatch_despite``, when
  ``pmapkit.host_callback`` loads): programs whose only effects are
  host_callback's unordered ones get JAX's C++ fast path;
- ``jax._src.pmap._cached_shard_map`` (``watch_jax_pmap_outputs``, when
  pmapkit first classifies a layout): jax.pmap's result shardings are noted.

Each replacement keeps JAX's function (``_pmapkit_original``) and calls it;
``REPLACED`` holds what is replaced now, and ``restore()`` puts JAX's
functions back (pmapkit then runs the generic path: JAX's Python dispatch
for host callbacks, jax.pmap results told by layout).
"""
from __future__ import annotations

from jax._src import core as _core
from jax._src import pjit as _pjit_lib
from jax._src.interpreters import pxla as _pxla

from pmapkit._jax_private import probes as _probes

_probes.register("host callback fast dispatch", lambda: _probes.get_fastpath_data_reason(
    getattr(_pjit_lib, "_get_fastpath_data", None), getattr(_pxla, "ExecuteReplicated", None)))
_probes.register("jax.pmap outputs", lambda: _probes.cached_shard_map_reason(
    _probes.pmap_module()))

#: ``(module name, attribute) -> (module, JAX's function)`` of every global
#: pmapkit has replaced and not restored.
REPLACED: dict = {}


def _replace(module, name, replacement):
    key = (module.__name__, name)
    if key not in REPLACED:
        REPLACED[key] = (module, getattr(module, name))
    setattr(module, name, replacement)


def restore():
    """Put every replaced JAX global back; what pmapkit then runs without
    it is the generic path."""
    for (_, name), (module, original) in list(REPLACED.items()):
        setattr(module, name, original)
    REPLACED.clear()


def fast_dispatch_despite(effect_type):
    """Let ``jax.jit`` programs whose only effects are of ``effect_type``
    take JAX's C++ dispatch path, as programs without effects do.

    JAX sends every program with an effect through its Python dispatch (to
    thread ordered tokens and keep runtime tokens for
    ``jax.effects_barrier``): about 2.5x the per-call cost of an effect-free
    program with the same host callback (``jax.pure_callback``). An effect
    that needs neither (unordered, nothing to wait for but the program's
    results) asks for the fast path here. It is decided once per compiled
    program, when JAX builds its fast-path data.
    """
    if _probes.off("host callback fast dispatch") is not None:
        return  # JAX's Python dispatch runs them (``probes``)
    original = _pjit_lib._get_fastpath_data
    allowed = getattr(original, "_pmapkit_allowed", None)
    if allowed is not None:
        allowed.add(effect_type)
        return

    def _get_fastpath_data(executable, out_tree, args_flat, out_flat, effects,
                           *rest):
        call = getattr(executable, "unsafe_call", None)
        if (effects and all(type(e) in _get_fastpath_data._pmapkit_allowed
                            for e in effects)
                and isinstance(call, _pxla.ExecuteReplicated)
                and not call.ordered_effects):
            # JAX's check reads ``has_unordered_effects``; the Python path
            # reads it only next to ``has_host_callbacks`` (True here), so
            # flipping it for the check changes nothing else.
            saved, call.has_unordered_effects = call.has_unordered_effects, False
            try:
                return original(executable, out_tree, args_flat, out_flat,
                                _core.no_effects, *rest)
            finally:
                call.has_unordered_effects = saved
        return original(executable, out_tree, args_flat, out_flat, effects, *rest)

    _get_fastpath_data._pmapkit_allowed = {effect_type}
    _get_fastpath_data._pmapkit_original = original
    _replace(_pjit_lib, "_get_fastpath_data", _get_fastpath_data)


def watch_jax_pmap_outputs(hook):
    """Call ``hook(out_shardings)`` each time ``jax.pmap`` (JAX's own, a
    ``jit`` of a ``shard_map``) picks the program for a call or a lower:
    ``out_shardings`` is the pytree (prefix) of the ``NamedSharding``
    objects its results carry, the same objects on every call of that
    program. They are the only mark of a pmap result: with an
    ``axis_name`` the sharding is equal to one a caller builds over a
    one-axis mesh of that name. Installed once; the hook must be cheap.
    Called now too for the programs JAX holds already (calls made before)."""
    if _probes.off("jax.pmap outputs") is not None:
        return  # jax.pmap's results are told by their layout (``probes``)
    from jax._src import pmap as _pmap_lib
    original = _pmap_lib._cached_shard_map
    hooks = getattr(original, "_pmapkit_hooks", None)
    if hooks is not None:
        hooks.append(hook)
    else:
        _install_jax_pmap_hook(_pmap_lib, original, hook)
    for cached in _jax_pmap_programs(_pmap_lib._cached_shard_map):
        hook(cached.out_global_shardings)


def _jax_pmap_programs(watched):
    """The programs ``jax.pmap`` holds (its ``lu.cache``: per function, a
    dict of ``(program, stores)``); none where that cache is laid out
    otherwise (then only calls from now on are seen)."""
    original = getattr(watched, "_pmapkit_original", watched)
    tables = getattr(getattr(original, "cache_clear", None), "__self__", None)
    if tables is None or not hasattr(tables, "values"):
        return []
    found = []
    for table in list(tables.values()):
        for entry in list(table.values()) if isinstance(table, dict) else ():
            cached = entry[0] if isinstance(entry, tuple) and entry else None
            if hasattr(cached, "out_global_shardings"):
                found.append(cached)
    return found


def _install_jax_pmap_hook(_pmap_lib, original, hook):
    """Put a wrapper of JAX's ``_cached_shard_map`` (its ``infer_params``
    reads the module global at each call) that hands each program's output
    shardings to the hooks."""

    def _cached_shard_map(*args):
        cached = original(*args)
        for h in _cached_shard_map._pmapkit_hooks:
            h(cached.out_global_shardings)
        return cached

    _cached_shard_map._pmapkit_hooks = [hook]
    _cached_shard_map._pmapkit_original = original
    _replace(_pmap_lib, "_cached_shard_map", _cached_shard_map)
