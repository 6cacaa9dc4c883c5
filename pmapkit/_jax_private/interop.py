"""JAX's other systems pmapkit meets: shard_map and lowering rules, export,
colocated Python, meshes and staging traces, checkify, config options,
actions on import, jax.util and the classic internals pmapkit.legacy serves."""
from __future__ import annotations

from jax._src import api as _api
from jax._src import config as _config
from jax._src import core as _core
from jax._src import mesh as _mesh_lib
from jax._src import tree_util as _tree_util
from jax._src import xla_bridge as _xb
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.lib.mlir.dialects import hlo as _hlo

def shard_map_primitive():
    """The primitive of ``jax.shard_map`` regions (not exported publicly)."""
    from jax._src import shard_map as _shard_map_mod
    return _shard_map_mod.shard_map_p


def lowering_rule(primitive):
    """``(rule, inline)`` of the common (all-platform) lowering of ``primitive``."""
    from jax.interpreters import mlir as _mlir
    entry = _mlir._lowerings[primitive]
    return entry.rule, entry.inline


# --- export ---------------------------------------------------------------------
# The StableHLO versions a serialized export artifact is written against
# (recorded in pmapkit's export container next to the producer versions).


def stablehlo_versions():
    """``(current, target)``: the StableHLO version of this jaxlib and the one
    jax.export serializes modules for (its 4-week compatibility window)."""
    target = _hlo.get_version_from_compatibility_requirement(
        _hlo.StablehloCompatibilityRequirement.WEEK_4)
    return str(_hlo.get_current_version()), str(target)


# Call-time checks of an exported function, as jax.export words them: the
# structural differences of two pytrees, and its abstract-evaluation rule
# (ranks, dtypes, constant dimensions, dimension variables solved and checked).
from jax._src.export import _export as _export_impl  # noqa: E402

tree_equality_errors = _tree_util.equality_errors


def check_exported_call_avals(jax_exported, avals):
    """Raise jax.export's own ValueError if ``avals`` cannot call it."""
    _export_impl._call_exported_abstract_eval(*avals, exported=jax_exported)


# jax.export's primitive calling an artifact (``call_exported_p.bind(*flat,
# exported=...)``): what ``Exported.call`` binds inside its AD rule.
call_exported_p = _export_impl.call_exported_p


# --- colocated_python ------------------------------------------------------------
from jax._src import util as _colocated_util  # noqa: E402
from jax._src.lib import _jax as _colocated_jax  # noqa: E402

DeviceList = _xc.DeviceList
# jax.clear_caches() calls cache_clear() on every object registered here.
register_cache = _colocated_util.register_cache
# Named events JAX's tests count ("colocated_python_func._get_specialized_func").
test_event = _colocated_util.test_event
# jaxlib's IFRT program API: colocated Python programs, their compile options.
ifrt_programs = _colocated_jax.ifrt_programs
JaxRuntimeError = _colocated_jax.JaxRuntimeError
global_avals_to_results_handler = _pxla.global_avals_to_results_handler
xla_backends = _xb.backends

#: JAX's jit and vmap where JAX defines them. pmapkit builds its own programs
#: with these, never with what ``jax.jit`` names at the call: test helpers
#: patch ``jax.jit`` (``chex.fake_jit`` makes it the identity) and classic
#: pmap compiled its body all the same.
jit = _api.jit
vmap = _api.vmap


def started_backends():
    """The backends JAX has started so far, by platform (none before its
    first operation); starts none."""
    return _xb._backends
jax_util = _colocated_util  # tests set jax_util.test_event_listener


def prng_impl_name(key_dtype):
    """The PRNG implementation name ("threefry2x32", ...) of a key dtype."""
    return key_dtype._impl.name


# --- mesh interop (pmapkit.Mesh is a jax Mesh; pjit reads JAX's mesh contexts) ---

#: JAX's classic resource environment (``with jax_mesh:`` sets it, deprecated).
thread_resources = _mesh_lib.thread_resources
#: The concrete mesh ``jax.set_mesh`` sets (not part of the trace context).
get_concrete_mesh = _mesh_lib.get_concrete_mesh
device_context = _config.device_context
empty_concrete_mesh = _mesh_lib.empty_concrete_mesh


def concrete_mesh_context(mesh):
    """Set JAX's concrete (``jax.set_mesh``) mesh for a block, also under a
    trace (where ``jax.set_mesh`` refuses)."""
    from jax._src import sharding_impls as _sharding_impls
    return _sharding_impls._internal_use_concrete_mesh(mesh)


def compiling_function_name(traced_for=("jit", "pjit")):
    """The name of the function the innermost trace staging it for one of
    ``traced_for`` (``jax.jit``, pmapkit's pjit) is tracing, or None when
    no such trace is active (eager code, ``make_jaxpr`` ...)."""
    trace = _core.trace_ctx.trace
    while trace is not None:
        if isinstance(trace, _pe.DynamicJaxprTrace):
            info = trace.frame.debug_info
            if info is not None and info.traced_for in traced_for:
                return info.func_name
        trace = getattr(trace, "parent_trace", None)
    return None


def staging_depth():
    """How many traces in the current chain stage a jaxpr: 1 in the body of
    a ``jax.jit`` (or ``make_jaxpr``), 2 or more in a ``scan``/``cond``/
    ``while`` body or a ``jit`` inside it, 0 eagerly."""
    depth, trace = 0, _core.trace_ctx.trace
    while trace is not None:
        depth += isinstance(trace, _pe.DynamicJaxprTrace)
        trace = getattr(trace, "parent_trace", None)
    return depth


def staging_trace_active():
    """Whether some trace in the current chain stages a jaxpr (a jit, scan,
    make_jaxpr...), as opposed to only eager transformations (jvp,
    linearize, vmap evaluated at top level)."""
    trace = _core.trace_ctx.trace
    while trace is not None:
        if isinstance(trace, _pe.DynamicJaxprTrace):
            return True
        trace = getattr(trace, "parent_trace", None)
    return False


# --- checkify ----------------------------------------------------------------------
# checkify's table of rules by primitive, and its tracing of a checked body
# (``(ClosedJaxpr, out tree of (Error, outputs), error effects)``).
# Read on first use (module ``__getattr__``): importing checkify costs start-up
# time, and pmapkit registers its rules only once a program imports it
# (``when_imported``).
_CHECKIFY_NAMES = {"checkify_error_checks": "error_checks",
                   "jaxpr_to_checkify_jaxpr": "jaxpr_to_checkify_jaxpr"}
CHECKIFY_MODULE = "jax._src.checkify"


def __getattr__(name):
    if name in _CHECKIFY_NAMES:
        from jax._src import checkify as _checkify
        return getattr(_checkify, _CHECKIFY_NAMES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def define_bool_option(name, default, help, validator):
    """A ``jax_*`` boolean config option of JAX's config (``jax.config.update``,
    ``jax.config.NAME``, the ``NAME`` environment variable); ``validator(value)``
    raises for a value it refuses. None where JAX already has it."""
    from jax._src import config as _config
    if name in _config.config.values:
        return None
    return _config.bool_state(name, default, help, validator=validator)


def when_imported(module_name, action):
    """Run ``action()`` once ``module_name`` is imported: now if it already
    is, else right after it is (before the import statement returns). For
    rules on JAX systems a program may never load: no trace of such a
    system can begin before its module is imported."""
    import sys
    if module_name in sys.modules:
        action()
        return
    _after_import.setdefault(module_name, []).append(action)
    if _AfterImport not in [type(f) for f in sys.meta_path]:
        sys.meta_path.insert(0, _AfterImport())


_after_import = {}


class _AfterImport:
    """A meta-path finder that finds nothing itself: for a module with
    actions waiting (``when_imported``) it lets the other finders find it and
    runs the actions after the module's code."""

    def find_spec(self, name, path=None, target=None):
        if name not in _after_import:
            return None
        import importlib.util
        import sys
        sys.meta_path.remove(self)  # the others find it
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RunAfter(spec.loader, _after_import.pop(name))
        return spec


class _RunAfter:
    def __init__(self, loader, actions):
        self.loader = loader
        self.actions = actions

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for action in self.actions:
            action()

    def __getattr__(self, name):
        return getattr(self.loader, name)


# --- classic jax.util (pmapkit.legacy serves its helpers: the same objects) ---
from jax._src import util as _util  # noqa: E402


def util_helper(name):
    """``jax._src.util.<name>``, or AttributeError where this JAX lacks it."""
    return getattr(_util, name)


# --- classic internals pmapkit.legacy serves (issue 48) ---------------------
# Classic programs reached JAX internals that JAX 0.10 still holds under
# jax._src; pmapkit.legacy serves those very objects, found here by name.
def private_module(name):
    """The module ``name`` of JAX's ``jax._src`` (imported on first use)."""
    if not (name == "jax._src" or name.startswith("jax._src.")):
        raise ValueError(f"private_module takes a jax._src module; got {name!r}")
    import importlib
    return importlib.import_module(name)


def private_attr(module, attr):
    """``jax._src.<module>.<attr>``, or AttributeError where this JAX lacks it."""
    return getattr(private_module(module), attr)


# jax._src.core.definitely_equal is classic core.symbolic_equal_dim renamed.
definitely_equal = _core.definitely_equal

# jaxlib's extension module: classic jaxlib.xla_extension (renamed jaxlib._jax).
xla_extension = _colocated_jax
