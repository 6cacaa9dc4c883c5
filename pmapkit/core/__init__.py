"""The core shared by every system, in rooms, bottom to top (a room imports
only itself and the rooms below it):

- ``hitpath/``: the compiled hit path (``_dispatch``, ``_shard_arg``, picked by
  ``_compiled``);
- ``keys/``: cache keys, cache bounds and clearing, what wrappers share;
- ``sharding/``: spec parsing, the mesh, the classic sharding-spec types;
- ``rules/``: pmapkit's primitives and their transformation rules;
- ``lowering/``: lowering rules, manual regions, where nested pmaps sit,
  the kind of program each primitive makes and its shardings, which
  shardings are pmap results;
- ``programs/``: compiling, compiled programs, input moves, collectives in
  flight, NaN checks, programs spanning processes;
- ``misses/``: the miss path (``calls``), committed inputs laid out
  otherwise;
- ``aot/``: the ``jax.stages`` objects (``lower()``, ``compile()``).

Internal: the systems (``pmapkit.pmap``, ``pmapkit.pjit``, ...) build on it;
it imports none of them. The public names it defines are re-exported by
public modules outside it (``pmapkit.mesh``, ``pmapkit.caches``,
``pmapkit.inflight``, ``pmapkit.sharding_specs``)."""
import importlib as _importlib


def __getattr__(name):
    # ``pmapkit.core.programs`` read as an attribute loads the module, as
    # ``pmapkit.host_callback`` does on the package.
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
