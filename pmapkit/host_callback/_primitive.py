"""``outside_call_p``: the primitive behind id_tap, id_print and call.

Operands: the flat leaves of the tapped argument (``num_args`` of them), then,
for ``id_tap(..., result=r)``, the leaves of ``r``. A tap (``identity=True``)
returns its operands unchanged; a ``call`` returns what the host function
returned, of the declared ``flat_results_aval``. Only the argument leaves
travel to the host.

Params (hashable, so equal programs share compilations):
  callback          CallbackWrapper of the user's function
  arg_treedef       pytree structure of the argument
  num_args          how many leading operands are the argument's leaves
  identity          True for id_tap / id_print, False for call
  result_treedef    structure of call's result (None for a tap)
  flat_results_aval tuple of ShapedArray of call's result (() for a tap)
  transforms        tuple of ("batch", batch_dims) ... applied so far
  device_index      which device of a whole-mesh (jit/pjit) program calls back

Every equation carries ``host_callback_effect``: ordered (callbacks from one
device run in program order), so no transformation or DCE drops it, and
shardable (allowed in programs spanning several devices).

Lowering: a host callback threaded on the effect's token. In a manual SPMD
region (a pmap body) every device calls back with its own slice and its
partition id (which device it is); in a whole-mesh program it runs once, on
device ``device_index``, with the whole operand.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from pmapkit import _jax_private as jp
from pmapkit.host_callback import _runtime


class HostCallbackEffect(jp.Effect):
    __str__ = lambda self: "HostCallback"  # noqa: E731


host_callback_effect = HostCallbackEffect()
for _registry in (jp.ordered_effects, jp.shardable_ordered_effects,
                  jp.lowerable_effects, jp.control_flow_allowed_effects,
                  jp.custom_derivatives_allowed_effects,
                  jp.remat_allowed_effects, jp.partial_eval_kept_effects):
    _registry.add_type(HostCallbackEffect)

outside_call_p = Primitive("pmapkit_outside_call")
outside_call_p.multiple_results = True
# Lowering needs the device assignment (which device a callback comes from).
jp.prim_requires_devices_during_lowering.add(outside_call_p)


def _abstract_eval(*avals, callback, arg_treedef, num_args, identity,
                   result_treedef, flat_results_aval, transforms, device_index):
    del callback, arg_treedef, num_args, result_treedef, transforms, device_index
    outs = list(avals) if identity else list(flat_results_aval)
    return outs, {host_callback_effect}


outside_call_p.def_effectful_abstract_eval(_abstract_eval)


def _impl(*args, **params):
    # Eagerly, too, the callback runs from a compiled program: its effect
    # token orders it after computations dispatched before it.
    return jp.apply_primitive(outside_call_p, *args, **params)


outside_call_p.def_impl(_impl)


# -- lowering ---------------------------------------------------------------------
_PARTITION_ID_AVAL = jp.ShapedArray((), np.uint32)


def _manual_op_sharding(result_avals):
    # Per-device semantics: nothing is partitioned; one entry per result (at
    # least one: the op needs an annotation even with no results).
    if jp.use_shardy_partitioner.value:
        ndims = [a.ndim for a in result_avals] or [0]
        return jp.SdyArrayList(tuple(
            jp.SdyArray(mesh_shape=(),
                        dim_shardings=(jp.SdyDim(axes=(), is_open=False),) * nd,
                        logical_device_ids=())
            for nd in ndims))
    sharding = jp.OpSharding()
    sharding.type = jp.OpSharding.Type.MANUAL
    return sharding


def _maximal_op_sharding(device_index, result_avals):
    # Whole-mesh semantics: the op runs on one device, with whole values.
    if jp.use_shardy_partitioner.value:
        one = jp.SdyArray(mesh_shape=(), dim_shardings=(),
                          logical_device_ids=(device_index,))
        return jp.SdyArrayList((one,) * max(1, len(result_avals)))
    sharding = jp.OpSharding()
    sharding.type = jp.OpSharding.Type.MAXIMAL
    sharding.tile_assignment_dimensions = [1]
    sharding.tile_assignment_devices = [device_index]
    return sharding


def _per_device_host_fn(devices, invoke, partition_id, *flat):
    return invoke(devices[int(partition_id)], flat)


def _one_device_host_fn(device, invoke, *flat):
    return invoke(device, flat)


def _lowering(ctx, *args, callback, arg_treedef, num_args, identity,
              result_treedef, flat_results_aval, transforms, device_index):
    axis_context = ctx.module_context.axis_context
    tapped, tapped_avals = list(args[:num_args]), list(ctx.avals_in[:num_args])
    result_avals = [] if identity else list(flat_results_aval)
    invoke = functools.partial(_runtime.invoke, callback, arg_treedef, transforms,
                               result_treedef, result_avals)
    if isinstance(axis_context, mlir.SPMDAxisContext):
        mesh = axis_context.mesh
        if set(axis_context.manual_axes) != set(mesh.axis_names):
            raise NotImplementedError(
                "pmapkit host_callback: a callback inside a region where only "
                f"some mesh axes are manual ({sorted(axis_context.manual_axes)} "
                f"of {list(mesh.axis_names)}) is not supported; tap in a region "
                "where every axis is manual (a pmap body, not nested) or "
                "outside manual regions.")
        if not isinstance(mesh, jax.sharding.Mesh):
            # A region nested in another manual region (pmap of pmap): XLA
            # cannot compile effect tokens threaded through nested manual
            # computations (it aborts the process), so refuse it here.
            raise NotImplementedError(
                "pmapkit host_callback: callbacks inside a nested pmap (or a "
                "manual region nested in another) are not supported; tap "
                "outside the nested pmaps.")
        devices = tuple(mesh.devices.flat)
        host_fn = functools.partial(_per_device_host_fn, devices, invoke)
        operands = [jp.partition_id_op(), *tapped]
        operand_avals = [_PARTITION_ID_AVAL, *tapped_avals]
        op_sharding = _manual_op_sharding(result_avals)
    else:
        devices = getattr(axis_context, "device_assignment", None)
        if devices is None:
            raise ValueError("pmapkit host_callback: cannot lower a callback "
                             "without a device assignment.")
        if not 0 <= device_index < len(devices):
            raise ValueError(
                f"host_callback device_index={device_index} is out of range "
                f"for a computation on {len(devices)} device(s).")
        host_fn = functools.partial(_one_device_host_fn, devices[device_index],
                                    invoke)
        operands, operand_avals = tapped, tapped_avals
        op_sharding = _maximal_op_sharding(device_index, result_avals)
    token = ctx.tokens_in.get(host_callback_effect)
    # The callback op takes ``operands`` and returns ``result_avals``; the
    # context handed to JAX describes that op, not this equation.
    op_ctx = dataclasses.replace(ctx, avals_in=operand_avals, avals_out=result_avals)
    results, token, _ = mlir.emit_python_callback(
        op_ctx, host_fn, token, operands, operand_avals, result_avals,
        has_side_effect=True, returns_token=True, sharding=op_sharding)
    ctx.set_tokens_out(ctx.tokens_in.update_tokens(
        mlir.TokenSet({host_callback_effect: token})))
    return list(args) if identity else list(results)


# Not cacheable: a callback is referenced by its index in the module.
mlir.register_lowering(outside_call_p, _lowering, cacheable=False)
