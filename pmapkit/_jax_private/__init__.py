"""The one room of pmapkit allowed to import ``jax._src``.

Every private JAX name pmapkit relies on is bound in this package, so a JAX
upgrade that moves or renames internals touches it only. Everything else
imports from here (``from pmapkit import _jax_private as jp``; or from
public ``jax``). Names keep JAX's spelling where the thing is JAX's, so that
a reader can find it in JAX's sources. Its modules, by subject:

- ``core``: arrays and avals, tracing, pytrees, config and trace context,
  transformation tables, typecheck rules, typed keys, stages;
- ``runtime``: devices, shardings, execution, JAX's calls of a program;
- ``effects``: effect registries, host-callback ops, runtime tokens;
- ``express``: the express C++ call and the config states it does not key on;
- ``interop``: shard_map, lowering, export, colocated Python, meshes,
  checkify, options, import hooks, classic internals;
- ``probes``: one import-time probe per internal the hit path relies on
  (jaxlib's C++ ``pjit`` constructor, ``_get_fastpath_data``,
  ``_cached_shard_map``); a feature whose internal does not match is off,
  with its reason (``probes.OFF``), and the generic path runs;
- ``replaced``: the JAX module globals pmapkit replaces, only once needed
  and only where probed: ``jax._src.pjit._get_fastpath_data`` (host
  callbacks on JAX's C++ dispatch) and ``jax._src.pmap._cached_shard_map``
  (jax.pmap's result shardings noted); ``replaced.restore()`` puts them back.

``core``, ``interop`` and ``probes`` are imported with the package; the
other rooms at the first read of a name they hold (``jp.NAME``, ``from
pmapkit._jax_private import NAME``), so that loading an exported artifact
imports no more of the boundary than it runs.

Besides those globals, pmapkit chains hooks onto JAX objects it does not
replace: the runtime-token class's ``set_output_runtime_token`` and
``get_token_input`` and ``ExecuteReplicated._handle_token_bufs``
(``effects``), ``config.State.__init__`` and the change hooks of the states
it watches (``express``), and the debug_nans/infs hooks (``core``).
"""
from __future__ import annotations

import importlib as _importlib

from pmapkit._jax_private.core import *  # noqa: F401,F403
from pmapkit._jax_private.core import _sharding_impls  # noqa: F401  (tests read it)
from pmapkit._jax_private.interop import *  # noqa: F401,F403
from pmapkit._jax_private.interop import __getattr__ as _interop_getattr
from pmapkit._jax_private import probes

# ``core`` and ``interop`` (the config options, arrays, tracing, export and
# jit) are bound at this import; the rest of the boundary, the hit path's
# and the host callbacks' rooms, at the first name read from it: a program
# that only loads an exported artifact never imports them. No name is in
# two rooms, so the order they bind in changes nothing.
_LATER = ("runtime", "effects", "express")
_later_bound = False


def _bind_later():
    global _later_bound
    if _later_bound:
        return
    bound = globals()
    for room in _LATER:
        module = _importlib.import_module(f"{__name__}.{room}")
        bound.update((name, value) for name, value in vars(module).items()
                     if not name.startswith("_"))
    replaced = _importlib.import_module(f"{__name__}.replaced")
    bound.update(replaced=replaced, fast_dispatch_despite=replaced.fast_dispatch_despite,
                 watch_jax_pmap_outputs=replaced.watch_jax_pmap_outputs)
    _later_bound = True


probes._register_all = _bind_later


def __getattr__(name):
    if not _later_bound and not name.startswith("__"):
        _bind_later()
        if name in globals():
            return globals()[name]
    return _interop_getattr(name)  # checkify's names, imported when first read
