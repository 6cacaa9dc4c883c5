"""pmapkit: JAX's classic parallel dispatch layer, compiled, on jax 0.10.

Public surface (explicit re-exports only; the public modules are listed in
``_PUBLIC_MODULES``, every other module is internal):

- ``pmap``: the classic jax.pmap with a compiled per-call fast path
- ``pjit``: the classic pjit (in/out_axis_resources, mesh at the call site)
- ``Mesh``, ``mesh``: a jax.sharding.Mesh that is also pjit's ``with mesh:`` context
- ``maps``: ``Mesh``, ``mesh``, ``thread_resources`` of jax.experimental.maps
- ``with_sharding_constraint``, ``PartitionSpec`` (jax's own class), ``NamedSharding``
- ``ShardingSpec``, ``NoSharding``, ``Chunked``, ``Unstacked``, ``ShardedAxis``,
  ``Replicated``, ``parse_op_sharding``: the classic sharding-spec types and
  conversions
- ``device_put_replicated``, ``device_put_sharded``: the classic placement
  helpers (stacked per-device values, placed as a pmap takes them)
- ``clear_caches``, ``set_cache_size``: empty / bound pmapkit's caches
  (jax.clear_caches() empties them too)
- ``set_cpu_collectives_in_flight``: the bound on executions of collective
  programs in flight on XLA:CPU
- ``COMPILED``: True when the Cython dispatch core is in use
"""
import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys
import types as _types

# Each public name is loaded from its module on first use (module
# ``__getattr__``), so a program pays at start-up only for the systems it
# uses. The transformation rules of pmapkit's primitives are registered by
# ``pmapkit.core.programs.compiling``, which every module binding them reaches.
_LAZY = {
    "NamedSharding": "jax.sharding", "PartitionSpec": "jax.sharding",
    "COMPILED": "pmapkit.core.hitpath._compiled",
    "clear_caches": "pmapkit.caches", "set_cache_size": "pmapkit.caches",
    "set_cpu_collectives_in_flight": "pmapkit.inflight",
    "Mesh": "pmapkit.mesh", "mesh": "pmapkit.mesh",
    "maps": "pmapkit.pjit.maps",
    "pjit": "pmapkit.pjit._pjit", "with_sharding_constraint": "pmapkit.pjit._constraint",
    "device_put_replicated": "pmapkit.pmap.placement",
    "device_put_sharded": "pmapkit.pmap.placement",
    "pmap": "pmapkit.pmap._pmap",
    "Chunked": "pmapkit.sharding_specs", "NoSharding": "pmapkit.sharding_specs",
    "Replicated": "pmapkit.sharding_specs", "ShardedAxis": "pmapkit.sharding_specs",
    "ShardingSpec": "pmapkit.sharding_specs", "Unstacked": "pmapkit.sharding_specs",
    "parse_op_sharding": "pmapkit.sharding_specs",
    # ``%load_ext pmapkit`` in IPython/Jupyter: the classic layer on for the
    # kernel, and ``%pmapkit [options]`` (``pmapkit run``'s) registered.
    "load_ipython_extension": "pmapkit.tools.ipython_extension",
}


def __getattr__(name):
    if name not in _LAZY:
        # ``import pmapkit`` once loaded the core's modules eagerly, so code
        # reading ``pmapkit.host_callback`` after a bare ``import pmapkit``
        # worked: a submodule still answers, loaded now.
        if not name.startswith("__") and _importlib_util.find_spec(
                f"{__name__}.{name}") is not None:
            return _importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _importlib.import_module(_LAZY[name])
    # ``maps`` is a module that is itself the public name.
    value = module if module.__name__.endswith(f".{name}") and name == "maps" \
        else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(_types.ModuleType):
    """``pmapkit.pjit``, ``pmapkit.pmap`` and ``pmapkit.mesh`` are the
    functions, though modules of those names exist: importing the package (which Python then
    sets as this package's attribute) leaves the function in place."""

    def __setattr__(self, name, value):
        if (isinstance(value, _types.ModuleType) and name in ("pjit", "pmap", "mesh")
                and value.__name__ == f"{__name__}.{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

__all__ = ["COMPILED", "Chunked", "Mesh", "NamedSharding", "NoSharding",
           "PartitionSpec", "Replicated", "ShardedAxis", "ShardingSpec",
           "Unstacked", "clear_caches", "device_put_replicated", "device_put_sharded", "maps",
           "mesh", "parse_op_sharding", "pjit", "pmap", "set_cache_size",
           "set_cpu_collectives_in_flight", "with_sharding_constraint"]
# The modules whose names are public: the package's ``__all__``, the
# systems, and the modules the API reference (docs/reference/, a page per
# module) reads names from. Every other module is internal, whatever its name (see
# ARCHITECTURE.md, "Public surface"); tests/test_public_surface.py holds the
# docs to this list.
_PUBLIC_MODULES = (
    "pmapkit", "pmapkit.pmap", "pmapkit.pjit", "pmapkit.pjit.maps",
    "pmapkit.host_callback", "pmapkit.export",
    "pmapkit.colocated_python", "pmapkit.distributed", "pmapkit.legacy",
    "pmapkit.legacy.names", "pmapkit.tools.migrate",
    # where names of pmapkit's ``__all__`` are defined and documented
    "pmapkit.mesh", "pmapkit.pmap.placement",
    "pmapkit.caches", "pmapkit.inflight", "pmapkit.sharding_specs",
)
__version__ = "0.1.0"
