"""Devices, shardings and execution: putting arrays, the parts of a compiled
program, the identity of a lowering, and JAX's calls of a compiled one."""
from __future__ import annotations

import hashlib as _hashlib
import inspect as _inspect
import operator as _operator

from jax._src import config as _config
from jax._src import xla_bridge as _xb
from jax._src.interpreters import pxla as _pxla
from jax._src.lib import xla_client as _xc

from pmapkit._jax_private import probes as _probes

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


def array_readers():
    """``(aval_of, sharding_of, committed_of, is_deleted_of)``: what the
    hit path reads of a ``jax.Array`` (exactly ``ArrayImpl``), each called
    with the array. The class's own getters where the ``"hit-path
    getters"`` probe found them (a read is then one call, not a lookup
    through the type first); else reads by name. (The probe is registered
    in ``core``.)"""
    if _probes.off("hit-path getters") is None:
        cls = _xc.ArrayImpl
        return (_inspect.getattr_static(cls, "aval").fget,
                _inspect.getattr_static(cls, ARRAY_SHARDING_ATTR).fget,
                _inspect.getattr_static(cls, "_committed").fget,
                _inspect.getattr_static(cls, "is_deleted"))
    return (_operator.attrgetter("aval"), _operator.attrgetter(ARRAY_SHARDING_ATTR),
            _operator.attrgetter("_committed"), _operator.methodcaller("is_deleted"))


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
