"""JAX's core as pmapkit reaches it: arrays and avals, tracing, pytrees, the
config and trace context, the transformation tables, typecheck rules and
typed keys, stages."""
from __future__ import annotations

from jax._src import api_util as _api_util
from jax._src import config as _config
from jax._src import core as _core
from jax._src import linear_util as _lu
from jax._src import sharding_impls as _sharding_impls
from jax._src import source_info_util as _source_info_util
from jax._src import stages as _stages
from jax._src import tree_util as _tree_util
from jax._src.interpreters import ad as _ad
from jax._src.interpreters import batching as _batching
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc
from jax._src.random import prng as _prng

import inspect as _inspect
import operator as _operator

from pmapkit._jax_private import probes as _probes

# --- arrays, avals, dtypes -------------------------------------------------
ArrayImpl = _xc.ArrayImpl
# jax.extend.core.Primitive is this class; importing it from there loads
# jax.extend's whole package (pallas and more: tens of ms at start-up).
Primitive = _core.Primitive
Tracer = _core.Tracer
ShapedArray = _core.ShapedArray
ClosedJaxpr = _core.ClosedJaxpr
# A closed jaxpr as a Python function (what jax.extend.core.jaxpr_as_fun is).
jaxpr_as_fun = _core.jaxpr_as_fun
Jaxpr = _core.Jaxpr
Literal = _core.Literal
Var = _core.Var
DebugInfo = _lu.DebugInfo
shaped_abstractify = _core.shaped_abstractify
get_aval = _core.typeof
eval_jaxpr = _core.eval_jaxpr
new_jaxpr_eqn = _core.new_jaxpr_eqn
jaxprs_in_params = _core.jaxprs_in_params
remove_named_axis_effects = _core.remove_named_axis_effects
# The effect of a collective over a named axis (renamed with its axis).
NamedAxisEffect = _core.NamedAxisEffect

# --- tracing -----------------------------------------------------------------
wrap_init = _lu.wrap_init
trace_to_jaxpr_dynamic = _pe.trace_to_jaxpr_dynamic
convert_constvars_jaxpr = _pe.convert_constvars_jaxpr
extend_axis_env_nd = _core.extend_axis_env_nd
trace_state_clean = _core.trace_state_clean
fun_sourceinfo = _api_util.fun_sourceinfo

# --- pytrees -------------------------------------------------------------------
tree_registry = _tree_util.default_registry
broadcast_prefix = _tree_util.broadcast_prefix
prefix_errors = _tree_util.prefix_errors

# --- config / trace context ---------------------------------------------------
trace_context = _config.trace_context
debug_nans = _config.debug_nans
debug_infs = _config.debug_infs


def when_turned_on(state, callback):
    """Call ``callback()`` whenever the boolean config ``state`` is set to
    True: globally (``jax.config.update``, absl flags) or for a block
    (``with jax.debug_nans(True):``); and once now if it is on already (an
    environment variable). JAX keeps no list of hooks, only one slot of each
    kind: ours runs after any hook already there. Neither debug_nans nor
    debug_infs is in JAX's trace context, so this is how a flip reaches
    pmapkit's dispatch core without a per-call read."""
    global_hook = state._update_global_hook
    local_hook = state._update_thread_local_hook

    def on_global(value):
        if global_hook is not None:
            global_hook(value)
        if value:
            callback()

    def on_local(value):
        if local_hook is not None:
            local_hook(value)
        if value:
            callback()

    state._update_global_hook = on_global
    state._update_thread_local_hook = on_local
    if state.value:
        callback()


def make_trace_context_state(name, help):
    """A thread-local JAX config state that joins jit cache keys and the trace
    context: a value set with ``with state(value):`` makes every jit (ours
    and JAX's) trace and cache separately for it."""
    return _config.string_or_object_state(
        name, None, help, include_in_jit_key=True, include_in_trace_context=True)


# The mesh entered with ``with pmapkit.Mesh(...)`` (``core.sharding.mesh``),
# defined when pmapkit first reaches JAX (every system, and the export
# package, import this module), never in the middle of a program: JAX's own
# test base fails a test during which a config option appeared.
active_mesh_state = make_trace_context_state(
    "pmapkit_active_mesh", "The mesh entered with `with pmapkit.Mesh(...)`.")


_probes.register("hit-path getters", lambda: _probes.getters_reason(
    _xc.ArrayImpl, type(_core.trace_state)))


def state_value_of():
    """A config state's ``value`` reader, called with the state: the getter
    of JAX's config state class where the ``"hit-path getters"`` probe
    found it, else a read by name."""
    if _probes.off("hit-path getters") is None:
        return _inspect.getattr_static(type(_core.trace_state), "value").fget
    return _operator.attrgetter("value")


def top_level_probe():
    """The objects that tell, cheaply, whether no JAX trace is active.

    Returns ``(trace_state, eval_trace_ref, axis_env_state, top_axis_env,
    axis_env_index, value_of)``: the state is top level when
    ``value_of(trace_state) is eval_trace_ref`` and ``axis_env_state.value
    is top_axis_env`` (what ``trace_state_clean()`` checks, minus two
    Python frames). ``axis_env_index`` is where ``trace_context()`` holds
    that same value (so a caller that reads the context anyway need not ask
    again), or -1; ``value_of``: ``state_value_of()``.
    """
    return (_core.trace_state, _core.eval_trace._weakref,
            _core.axis_env_state, _core.top_axis_env, _axis_env_index(), state_value_of())


_AXIS_ENV_INDEX = None


def _axis_env_index():
    # States join the trace context in the order they are made, and are
    # never removed, so a position found once stays right.
    global _AXIS_ENV_INDEX
    if _AXIS_ENV_INDEX is None:
        names = trace_context_names()
        index = -1
        if names is not None and names.count("axis_env_state") == 1:
            index = names.index("axis_env_state")
            context = trace_context()
            if (len(context) != len(names)
                    or context[index] is not _core.axis_env_state.value):
                index = -1
        _AXIS_ENV_INDEX = index
    return _AXIS_ENV_INDEX




# --- transformation tables and helpers -----------------------------------------
ad = _ad
batching = _batching
pe = _pe
filter_named_axis_effects = _core.filter_named_axis_effects
Zero = _ad.Zero
UndefinedPrimal = _ad.UndefinedPrimal
is_undefined_primal = _ad.is_undefined_primal
instantiate_zeros = _ad.instantiate_zeros
jvp_jaxpr = _ad.jvp_jaxpr
backward_pass = _ad.backward_pass
batch_jaxpr = _batching.batch_jaxpr
not_mapped = None  # batching marks an unbatched operand with None (type NotMapped)
partial_eval_jaxpr_nounits = _pe.partial_eval_jaxpr_nounits
new_eqn_recipe = _pe.new_eqn_recipe
JaxprTracer = _pe.JaxprTracer
PartialVal = _pe.PartialVal
dce_jaxpr = _pe.dce_jaxpr
has_effects = _pe.has_effects
partial_eval_jaxpr_custom = _pe.partial_eval_jaxpr_custom


current_source_info = _source_info_util.current


# --- fidelity: typecheck rules, typed keys / float0, compile counting ---
custom_typechecks = _core.custom_typechecks
check_jaxpr = _core.check_jaxpr
JaxprTypeError = _core.JaxprTypeError
typecompat = _core.typecompat

#: The class of typed PRNG key arrays (``jax.random.key``): a logical view
#: over the uint32 ``_base_array`` executables take and return.
PRNGKeyArray = _prng.PRNGKeyArray
physical_aval = _core.physical_aval


def physical_sharding(aval, sharding):
    """The sharding of the physical buffers of a value of ``aval`` placed with
    ``sharding`` (itself, except for extended dtypes such as PRNG keys)."""
    return _sharding_impls.physical_sharding(aval, sharding)


# --- stages and cache-key descriptions ------------------------------------------
StagesExecutable = _stages.Executable
make_args_info = _stages.make_args_info
# JAX's own "Argument types differ ..." TypeError for an AOT-compiled call.
check_arg_avals_for_call = _pxla.check_arg_avals_for_call


def trace_context_names():
    """Names of the entries of ``trace_context()``, or None where this jaxlib
    cannot tell them."""
    try:
        return tuple(_config.trace_context_names())
    except (AttributeError, NotImplementedError):
        return None
