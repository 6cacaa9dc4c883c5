"""The one module of pmapkit allowed to import ``jax._src``.

Every private JAX name pmapkit relies on is bound here, so a JAX upgrade that
moves or renames internals touches this file only. Everything else imports
from here (or from public ``jax``). Names keep JAX's spelling where the thing
is JAX's, so that a reader can find it in JAX's sources.
"""
from __future__ import annotations

import functools as _functools
import hashlib as _hashlib

import numpy as _np

from jax._src import api as _api
from jax._src import api_util as _api_util
from jax._src import config as _config
from jax._src import core as _core
from jax._src import linear_util as _lu
from jax._src import source_info_util as _source_info_util
from jax._src import tree_util as _tree_util
from jax._src import xla_bridge as _xb
from jax._src.interpreters import ad as _ad
from jax._src.interpreters import batching as _batching
from jax._src.interpreters import partial_eval as _pe
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc

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


def top_level_probe():
    """The objects that tell, cheaply, whether no JAX trace is active.

    Returns ``(trace_state, eval_trace_ref, axis_env_state, top_axis_env,
    axis_env_index)``: the state is top level when ``trace_state.value is
    eval_trace_ref`` and ``axis_env_state.value is top_axis_env`` (what
    ``trace_state_clean()`` checks, minus two Python frames).
    ``axis_env_index`` is where ``trace_context()`` holds that same value
    (so a caller that reads the context anyway need not ask again), or -1.
    """
    return (_core.trace_state, _core.eval_trace._weakref,
            _core.axis_env_state, _core.top_axis_env, _axis_env_index())


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


# --- devices, sharding, execution ----------------------------------------------
batched_device_put = _xc.batched_device_put
# How ``batched_device_put`` treats a caller's host buffer. Its default
# (ZERO_COPY) lets the CPU client alias a 64-byte-aligned numpy array, or copy
# a large one later on a worker thread: either way a write after the call
# returns can reach a computation still queued (CPU dispatch is asynchronous).
# IMMUTABLE_ONLY_DURING_CALL makes the client finish with the buffer before
# returning, by one copy: the value at the call is the value computed, as in
# classic JAX (which dispatched synchronously on CPU).
HOST_READ_DURING_CALL = _xc.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL
# Copies whole arrays to other devices keeping their split, many in one call
# (what jax.jit does with inputs laid out right on the wrong devices).
batched_copy_array_to_devices_with_sharding = _xc.batched_copy_array_to_devices_with_sharding
ArrayCopySemantics = _xc.ArrayCopySemantics
# The attribute a jax.Array keeps its sharding in (the public ``.sharding`` is
# a Python property over it, twice as slow on the hit path).
ARRAY_SHARDING_ATTR = "_sharding"


OpSharding = _xc.OpSharding
HloSharding = _xc.HloSharding


def custom_device_order(named_sharding):
    """A NamedSharding's explicit logical device order, or None."""
    return getattr(named_sharding, "_logical_device_ids", None)


def raise_if_deleted(x):
    """Raise JAX's own error for a deleted (e.g. donated) array."""
    x._check_if_deleted()
global_aval_to_result_handler = _pxla.global_aval_to_result_handler
process_count = _xb.process_count


def mesh_executable_parts(compiled):
    """(LoadedExecutable, kept input indices or None).

    ``compiled`` is a ``jax.stages.Compiled`` from ``jit(...).lower().compile()``.
    """
    mesh_exec = compiled._executable
    kept = getattr(mesh_exec, "_kept_var_idx", None)
    return mesh_exec.xla_executable, kept


def program_identity(lowered):
    """A key equal for two lowerings that compile to the same executable,
    or None when the module does not say everything about the program.

    The key: a digest of the StableHLO module's text (constants and
    shardings included, locations left out), the device assignment, the flat in/out avals (weak
    types included), donation, kept inputs, platforms and compiler options.
    None for host callbacks and kept-alive objects (tied to the Python
    objects of one lowering), constants passed as arguments (their values
    are not in the module) and effects.
    """
    lowering = getattr(lowered, "_lowering", None)
    if not isinstance(lowering, _pxla.MeshComputation):
        return None
    args = lowering.compile_args
    if (lowering.const_args or args.get("host_callbacks") or args.get("keepalive")
            or args.get("ordered_effects") or args.get("unordered_effects")):
        return None
    # The module without locations (as JAX's persistent cache keys it): the
    # same program traced on another source line is the same program.
    text = lowering.stablehlo().operation.get_asm(binary=True, enable_debug_info=False)
    devices = lowering._device_list
    kept = args.get("kept_var_idx")
    key = (_hashlib.sha256(text).digest(),
           None if devices is None else tuple((d.platform, d.id) for d in devices),
           tuple(args.get("global_in_avals", ())),
           tuple(args.get("global_out_avals", ())),
           tuple(lowering._donated_invars),
           None if kept is None else tuple(sorted(kept)),
           tuple(lowering._platforms), lowering._compiler_options_kvs,
           tuple(args.get("in_layouts", ())), tuple(args.get("out_layouts", ())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


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
from jax._src import sharding_impls as _sharding_impls  # noqa: E402
from jax._src.random import prng as _prng  # noqa: E402

#: The class of typed PRNG key arrays (``jax.random.key``): a logical view
#: over the uint32 ``_base_array`` executables take and return.
PRNGKeyArray = _prng.PRNGKeyArray
physical_aval = _core.physical_aval


def physical_sharding(aval, sharding):
    """The sharding of the physical buffers of a value of ``aval`` placed with
    ``sharding`` (itself, except for extended dtypes such as PRNG keys)."""
    return _sharding_impls.physical_sharding(aval, sharding)


# --- stages and cache-key descriptions ------------------------------------------
from jax._src import stages as _stages  # noqa: E402

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


# --- host_callback ---------------------------------------------------------------
# Names pmapkit.host_callback needs: the effect registries its ordered effect
# joins, eager evaluation of one equation, the sharding annotations a host
# callback op carries, PartitionId (which device of a manual SPMD region is
# calling back) and JAX's per-thread runtime tokens (barrier_wait).
from jax._src import dispatch as _hcb_dispatch
from jax._src import pjit as _pjit_lib
from jax._src import effects as _hcb_effects
from jax._src import sharding_impls as _hcb_sharding_impls
from jax._src.lib.mlir.dialects import hlo as _hcb_hlo

Effect = _hcb_effects.Effect
ordered_effects = _hcb_effects.ordered_effects
shardable_ordered_effects = _hcb_effects.shardable_ordered_effects
lowerable_effects = _hcb_effects.lowerable_effects
control_flow_allowed_effects = _hcb_effects.control_flow_allowed_effects
custom_derivatives_allowed_effects = _hcb_effects.custom_derivatives_allowed_effects
remat_allowed_effects = _hcb_effects.remat_allowed_effects
partial_eval_kept_effects = _hcb_effects.partial_eval_kept_effects
apply_primitive = _hcb_dispatch.apply_primitive
prim_requires_devices_during_lowering = _hcb_dispatch.prim_requires_devices_during_lowering
SdyArray = _hcb_sharding_impls.SdyArray
SdyArrayList = _hcb_sharding_impls.SdyArrayList
SdyDim = _hcb_sharding_impls.SdyDim
use_shardy_partitioner = _config.use_shardy_partitioner
dce_rules = _pe.dce_rules
DropVar = _core.DropVar
abstract_token = _core.abstract_token


def partition_id_op():
    """An ``stablehlo.partition_id`` op (a ``ui32[]`` value)."""
    return _hcb_hlo.partition_id()


def create_token_op():
    """A ``stablehlo.create_token`` op (a fresh token value)."""
    return _hcb_hlo.create_token()


def watch_runtime_tokens(hook):
    """Call ``hook(device, token)`` whenever any thread records the runtime
    token of a computation it dispatched with effects or host callbacks.

    JAX keeps those tokens per thread (``jax.effects_barrier`` waits for the
    calling thread's only); the classic ``barrier_wait`` waited for every
    thread, so pmapkit mirrors each token into a process-wide table. The hook
    is installed once on JAX's token-set class and runs after JAX's own code.
    """
    cls = type(_hcb_dispatch.runtime_tokens)
    original = cls.set_output_runtime_token
    if getattr(original, "_pmapkit_hooks", None) is not None:
        original._pmapkit_hooks.append(hook)
        return

    def set_output_runtime_token(self, device, token):
        original(self, device, token)
        for h in set_output_runtime_token._pmapkit_hooks:
            h(device, token)

    set_output_runtime_token._pmapkit_hooks = [hook]
    cls.set_output_runtime_token = set_output_runtime_token


def hand_on_effect_tokens(effect_type):
    """Thread the tokens of ``effect_type`` from one computation into the
    next the cheap way, and let a failed computation not fail the next.

    For an ordered effect JAX waits for the previous computation's output
    token, then builds a fresh empty token on the computation's devices (a
    ``Mesh``, a ``NamedSharding`` and a ``device_put`` per call, about a
    third of a one-device program's dispatch). The wait is the ordering; the
    value is always the same empty array. Here the wait stays, and the
    empty array is built once per device list. A failed computation (a host
    callback raised) leaves a failed token; JAX would hand its error to every
    later computation with the effect: the wait here swallows it (that
    computation's error went to its caller).

    On the way out, JAX assembles a computation's per-device output tokens
    into one global array (a ``Mesh`` of the devices, a ``NamedSharding``,
    an array made of the single-device tokens: about half of an 8-device
    program's dispatch with a tap), only to wait on it before the next
    computation. Here the per-device tokens are kept as they come, and that
    wait (or ``jax.effects_barrier``) waits on each of them.
    """
    cls = type(_hcb_dispatch.runtime_tokens)
    original = cls.get_token_input
    watched = getattr(original, "_pmapkit_watched", None)
    if watched is not None:
        watched.add(effect_type)
        return

    def get_token_input(self, eff, devices):
        if type(eff) not in get_token_input._pmapkit_watched:
            return original(self, eff, devices)
        token = self.current_tokens.get(eff)
        if token is not None:
            try:
                token.block_until_ready()
            except Exception:  # noqa: BLE001 - that computation's error went to its caller
                del self.current_tokens[eff]
        return _core.Token(_empty_token_array(tuple(devices)))

    get_token_input._pmapkit_watched = watched = {effect_type}
    cls.get_token_input = get_token_input
    _keep_output_tokens_per_device(watched)


class _DeviceTokens:
    """The output tokens of one computation's effect, one per device, as
    they came out (what JAX's ``Token`` would wrap as one global array):
    waiting on it waits on each."""

    __slots__ = ("buffers",)

    def __init__(self, buffers):
        self.buffers = buffers

    def block_until_ready(self):
        _xc.batched_block_until_ready(self.buffers)  # one wait for all
        return self


def _keep_output_tokens_per_device(watched):
    """``ExecuteReplicated._handle_token_bufs``: a computation whose ordered
    effects are all ``watched`` keeps its output tokens per device
    (``_DeviceTokens``); any other goes JAX's way."""
    original = _pxla.ExecuteReplicated._handle_token_bufs

    def _handle_token_bufs(self, token_bufs, sharded_token):
        effects = self.ordered_effects
        if not all(type(eff) in watched for eff in effects):
            return original(self, token_bufs, sharded_token)
        tokens = _hcb_dispatch.runtime_tokens
        for i, device in enumerate(self._local_devices):
            tokens.set_output_runtime_token(device, sharded_token.get_token(i))
        for eff, buffers in zip(effects, token_bufs):
            tokens.set_token_result(eff, _core.Token(_DeviceTokens(buffers)))

    _pxla.ExecuteReplicated._handle_token_bufs = _handle_token_bufs


@_functools.lru_cache(maxsize=64)
def _empty_token_array(devices):
    sharding = _hcb_sharding_impls.GSPMDSharding.get_replicated(devices)
    return _pxla.shard_args([sharding], [None], [_xc.ArrayCopySemantics.REUSE_INPUT],
                            [_np.zeros(0, _np.bool_)])[0]


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
    _pjit_lib._get_fastpath_data = _get_fastpath_data


def watch_jax_pmap_outputs(hook):
    """Call ``hook(out_shardings)`` each time ``jax.pmap`` (JAX's own, a
    ``jit`` of a ``shard_map``) picks the program for a call or a lower:
    ``out_shardings`` is the pytree (prefix) of the ``NamedSharding``
    objects its results carry, the same objects on every call of that
    program. They are the only mark of a pmap result: with an
    ``axis_name`` the sharding is equal to one a caller builds over a
    one-axis mesh of that name. Installed once; the hook must be cheap.
    Called now too for the programs JAX holds already (calls made before)."""
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
    _pmap_lib._cached_shard_map = _cached_shard_map


def in_named_axis_scope():
    """Whether the code being traced runs per device: inside a manual
    region (``shard_map``, a pmap body) or under a named axis."""
    if _core.get_axis_env().axis_sizes:
        return True
    return bool(_mesh_lib.get_abstract_mesh().manual_axes)


def clear_runtime_tokens():
    """Forget the calling thread's runtime tokens (all already waited for)."""
    _hcb_dispatch.runtime_tokens.clear()


def effectful_runner(compiled):
    """The callable that runs a ``jax.stages.Compiled`` on already-placed
    global arrays, threading JAX's effect tokens (ordered effects, host
    callbacks) — what ``Compiled.__call__`` ends in, minus argument checks.
    It takes every input (pruned ones are skipped by position)."""
    return compiled._executable.unsafe_call


def jit_disabled():
    """Whether ``jax.disable_jit()`` (or the config) is on here: JAX's C++
    call of a compiled program then refuses to run."""
    return bool(_config.disable_jit.value)


def compiled_cpp_call(compiled):
    """JAX's C++ call of a ``jax.stages.Compiled`` (the jit fast path over
    its executable): it puts host values (numpy arrays, scalars) on the
    devices inside C++, without a Python array per input. A fresh one, not
    the one ``Compiled.__call__`` keeps. None where JAX has none (effects,
    host callbacks) or the program takes constants as arguments."""
    if compiled._params.const_args:
        return None
    return compiled._executable.create_cpp_call(compiled._params)


from jax._src.lib import _jax as _jaxlib_ext  # noqa: E402


def express_cpp_call(host_call, miss_for, refuse):
    """A second C++ call of ``host_call``'s program (``compiled_cpp_call``)
    whose misses are pmapkit's: ``miss_for(jax_miss)`` is called once and
    returns the function JAX's C++ calls where its cache has no entry for a
    call's signature (argument types, and the values of every config in
    JAX's jit key: the trace state, the axis env, x64, the mesh contexts,
    ...), ``jax_miss`` being JAX's own (which runs the program and gives
    the C++ call its entry); ``refuse`` is what the C++ call runs under
    ``jax.disable_jit``. None where JAX has no C++ call."""
    if host_call is None:
        return None
    return _jaxlib_ext.pjit(
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
from jax._src.lib.mlir.dialects import hlo as _hlo  # noqa: E402


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
from jax._src import mesh as _mesh_lib  # noqa: E402

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
