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

Besides those globals, pmapkit chains hooks onto JAX objects it does not
replace: the runtime-token class's ``set_output_runtime_token`` and
``get_token_input`` and ``ExecuteReplicated._handle_token_bufs``
(``effects``), ``config.State.__init__`` and the change hooks of the states
it watches (``express``), and the debug_nans/infs hooks (``core``).
"""
from __future__ import annotations

from pmapkit._jax_private.core import *  # noqa: F401,F403
from pmapkit._jax_private.core import _sharding_impls  # noqa: F401  (tests read it)
from pmapkit._jax_private.runtime import *  # noqa: F401,F403
from pmapkit._jax_private.effects import *  # noqa: F401,F403
from pmapkit._jax_private.express import *  # noqa: F401,F403
from pmapkit._jax_private.interop import *  # noqa: F401,F403
from pmapkit._jax_private.interop import __getattr__  # noqa: F401  (checkify, lazily)
from pmapkit._jax_private import probes
from pmapkit._jax_private import replaced
from pmapkit._jax_private.replaced import fast_dispatch_despite, watch_jax_pmap_outputs  # noqa: F401
