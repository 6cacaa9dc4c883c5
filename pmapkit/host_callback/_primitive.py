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
  ordered           whether it threads the ordered effect token (below)

Taps, and calls in per-device code (a pmap body, a ``shard_map``) or in
bodies staged inside a program (``scan``, ``cond``...), carry
``host_callback_effect``: ordered (callbacks from one device run in program
order, across programs too), so no transformation or DCE drops them, and
shardable (allowed in programs spanning several devices). No effect token
can enter nested pmaps (XLA aborts compiling it), so in the body of a pmap
with nested pmaps the equations are rewritten (``manual_regions``) to
``ordered=False`` with the unordered ``host_callback_unordered_effect``:
still never dropped; there a tap hands back its operands through the host
(``_echoed``), so what follows it in the program runs after it. A ``call``
bound directly in a program's body or eagerly (``call_is_ordered``) is
``ordered=False`` from the start: no token enters or leaves its program, which JAX then dispatches on its C++
fast path (``_jax_private.fast_dispatch_despite``), and its lowering keeps
it in program order within the program (``_program_order_token``).

Lowering: a host callback threaded on the effect's token. In a manual SPMD
region (a pmap body) every device calls back with its own slice and its
partition id (which device it is); in the body of a pmap around a nested
pmap (where the inner axes are not manual) every device calls back too, with
its group's whole value, as classic nested pmaps ran that code on every
device; in a whole-mesh program it runs once, on device ``device_index``,
with the whole operand (a ``call`` over several devices as a region where
every device takes part: ``_whole_mesh``).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import manual_regions
from pmapkit.host_callback import _rendezvous, _runtime


class HostCallbackEffect(jp.Effect):
    __str__ = lambda self: "HostCallback"  # noqa: E731


class HostCallbackUnorderedEffect(jp.Effect):
    __str__ = lambda self: "HostCallbackUnordered"  # noqa: E731


host_callback_effect = HostCallbackEffect()
host_callback_unordered_effect = HostCallbackUnorderedEffect()
for _registry in (jp.ordered_effects, jp.shardable_ordered_effects):
    _registry.add_type(HostCallbackEffect)
for _registry in (jp.lowerable_effects, jp.control_flow_allowed_effects,
                  jp.custom_derivatives_allowed_effects,
                  jp.remat_allowed_effects, jp.partial_eval_kept_effects):
    _registry.add_type(HostCallbackEffect)
    _registry.add_type(HostCallbackUnorderedEffect)
# Unordered equations at the top of a jit's jaxpr are ``call`` equations bound
# directly in a program's body (``call_is_ordered``; taps are unordered only in
# the bodies of nested pmaps, rewritten when lowered): kept by every
# transformation, but no token to thread and nothing for ``barrier_wait``
# to wait on (the program's results are what they compute), so their
# programs dispatch on JAX's fast path, as ``jax.pure_callback``'s do.
jp.fast_dispatch_despite(HostCallbackUnorderedEffect)

# A failed call fails its computation (it raises, or every device raises
# with it); the next computation with callbacks must not fail with it too.
# (And the token is handed on without a device_put per call.)
jp.hand_on_effect_tokens(HostCallbackEffect)

outside_call_p = Primitive("pmapkit_outside_call")
outside_call_p.multiple_results = True
# Lowering needs the device assignment (which device a callback comes from).
jp.prim_requires_devices_during_lowering.add(outside_call_p)


def _abstract_eval(*avals, callback, arg_treedef, num_args, identity,
                   result_treedef, flat_results_aval, transforms, device_index,
                   ordered):
    del callback, arg_treedef, num_args, result_treedef, transforms, device_index
    outs = list(avals) if identity else list(flat_results_aval)
    return outs, {host_callback_effect if ordered else host_callback_unordered_effect}


def call_is_ordered():
    """Whether a ``call`` bound now threads the ordered token: in code that
    runs per device (a pmap body, a ``shard_map``), where its failure checks
    and its order with the device's taps go by the token, and in bodies
    staged inside a program (``scan``, ``cond``, ``while``, an inner
    ``jit``), which no token of the program's own chain can enter. Directly
    in a program's body (a jit on one device, a whole-mesh program) or
    eagerly it needs none: its program's results are what it computes, its
    failure fails them, and its lowering keeps it in program order."""
    return jp.in_named_axis_scope() or jp.staging_depth() > 1


outside_call_p.def_effectful_abstract_eval(_abstract_eval)
manual_regions.register_unordered_twin(
    host_callback_effect, host_callback_unordered_effect, outside_call_p,
    lambda params: dict(params, ordered=False))


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


def _region_devices(mesh):
    """The devices of a manual region's mesh, in partition-id order."""
    if isinstance(mesh, jax.sharding.Mesh):
        return tuple(mesh.devices.flat)
    # A region nested in another is lowered on an abstract mesh.
    concrete = manual_regions.concrete_mesh(mesh)
    if concrete is None:
        raise NotImplementedError(
            "pmapkit host_callback: a callback inside a manual region nested "
            f"in another on {mesh} is supported inside nested pmapkit.pmap "
            "only; tap outside the nested region.")
    return tuple(concrete.devices.flat)


def _lowering(ctx, *args, callback, arg_treedef, num_args, identity,
              result_treedef, flat_results_aval, transforms, device_index, ordered):
    axis_context = ctx.module_context.axis_context
    tapped, tapped_avals = list(args[:num_args]), list(ctx.avals_in[:num_args])
    result_avals = [] if identity else list(flat_results_aval)

    def invoker(on_failure):
        return functools.partial(_runtime.invoke, callback, arg_treedef, transforms,
                                 result_treedef, result_avals, on_failure)
    if isinstance(axis_context, mlir.SPMDAxisContext):
        mesh = axis_context.mesh
        if set(axis_context.manual_axes) != set(mesh.axis_names):
            if ordered:
                raise NotImplementedError(
                    "pmapkit host_callback: a callback inside a region where only "
                    f"some mesh axes are manual ({sorted(axis_context.manual_axes)} "
                    f"of {list(mesh.axis_names)}) is supported in pmapkit.pmap "
                    "bodies around nested pmaps only; tap in a pmap body or "
                    "outside manual regions.")
            return _lower_on_every_device(ctx, args, axis_context, dict(
                callback=callback, arg_treedef=arg_treedef, num_args=num_args,
                identity=identity, result_treedef=result_treedef,
                flat_results_aval=flat_results_aval, transforms=transforms,
                device_index=device_index, ordered=ordered))
        if ordered and not isinstance(mesh, jax.sharding.Mesh):
            # A token threaded into a nested region aborts XLA's compiler.
            raise NotImplementedError(
                "pmapkit host_callback: an ordered callback inside a manual "
                "region nested in another (not a nested pmapkit.pmap) is not "
                "supported; tap outside the nested region.")
        region_devices = _region_devices(mesh)
        host_fn = functools.partial(_per_device_host_fn, region_devices,
                                    invoker(_region_on_failure(mesh, region_devices)))
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
        caller_op = not identity and len(devices) > 1 and _rendezvous.lowering_caller_op()
        if (not identity and len(devices) > 1 and not caller_op
                and _whole_mesh_lowering is not None):
            params = dict(
                callback=callback, arg_treedef=arg_treedef, num_args=num_args,
                identity=identity, result_treedef=result_treedef,
                flat_results_aval=flat_results_aval, transforms=transforms,
                device_index=device_index, ordered=True)
            if ordered:
                return _whole_mesh_lowering(ctx, args, devices, params)
            # Its region takes the program-order token as an ordered call's
            # region takes the effect's (made in the program when none comes in).
            token, chain = _program_order_token(ctx)
            region_ctx = dataclasses.replace(
                ctx, tokens_in=mlir.TokenSet({host_callback_effect: token}),
                tokens_out=None)
            outs = _whole_mesh_lowering(region_ctx, args, devices, params)
            _chain_on(ctx, chain, region_ctx.tokens_out.get(host_callback_effect))
            return outs
        # A tap never fails its computation; a call on one device fails the
        # whole computation by raising; a whole-mesh call's op on its caller
        # hands the failure's number on after its results (``_whole_mesh``).
        host_fn = functools.partial(_one_device_host_fn, devices[device_index],
                                    invoker(_runtime.FLAG if caller_op else _runtime.RAISE))
        operands, operand_avals = tapped, tapped_avals
        op_sharding = _maximal_op_sharding(device_index, result_avals)
    if identity and not ordered:
        # No token orders this tap before what follows it: its operands come
        # back through the host, so what uses them runs after it.
        host_fn = functools.partial(_echoed, host_fn, len(args) - num_args, len(args))
        operands = [*operands, *args[num_args:]]
        operand_avals = [*operand_avals, *ctx.avals_in[num_args:]]
        result_avals = list(ctx.avals_in)
        op_sharding = (_manual_op_sharding(result_avals)
                       if isinstance(axis_context, mlir.SPMDAxisContext)
                       else _maximal_op_sharding(device_index, result_avals))
    if ordered:
        token, chain = ctx.tokens_in.get(host_callback_effect), "effect"
    elif not identity and not isinstance(axis_context, mlir.SPMDAxisContext):
        token, chain = _program_order_token(ctx)
    else:
        token, chain = None, None
    # The callback op takes ``operands`` and returns ``result_avals``; the
    # context handed to JAX describes that op, not this equation.
    op_ctx = dataclasses.replace(ctx, avals_in=operand_avals, avals_out=result_avals)
    results, token, _ = mlir.emit_python_callback(
        op_ctx, host_fn, token, operands, operand_avals, result_avals,
        has_side_effect=True, returns_token=chain is not None, sharding=op_sharding)
    if chain is not None:
        _chain_on(ctx, chain, token)
    if identity and ordered:
        return list(args)
    return list(results)


def _echoed(host_fn, num_extra, num_echoed, *operands):
    """An unordered tap's host side: the tap (on the operands but the last
    ``num_extra``, ``id_tap``'s ``result``), then the last ``num_echoed``
    operands handed back (all but the partition id)."""
    host_fn(*operands[:len(operands) - num_extra])
    return tuple(operands[len(operands) - num_echoed:]) if num_echoed else ()


def _chain_on(ctx, chain, token):
    """Hand ``token``, out of a callback op, to the next one in order."""
    if chain == "effect":
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(
            mlir.TokenSet({host_callback_effect: token})))
    else:
        chain[_current_block()] = token


def _current_block():
    return mlir.ir.InsertionPoint.current.block


def _program_order_token(ctx):
    """The token that keeps an unordered ``call`` (one directly in a
    program's body, token-free so its program dispatches on JAX's fast
    path) in program order with the host callbacks before it on its device: the
    ordered effect's token where the code around it threads one (it has
    taps), else a chain of the calls lowered into the same block (a token
    made inside the program: nothing crosses programs). Returns ``(token,
    chain)``: where the token that comes out goes."""
    if host_callback_effect in ctx.tokens_in.effects():
        return ctx.tokens_in.get(host_callback_effect), "effect"
    # A dict in the module's lowering cache: it lives as long as the module
    # being lowered; a block's calls are lowered in program order.
    chains = ctx.module_context.lowering_cache.setdefault(_CHAINS_KEY, {})
    block = _current_block()
    token = chains.get(block)
    if token is None:
        token = jp.create_token_op()
    return token, chains


_CHAINS_KEY = ("pmapkit_host_callback_call_order",)


# How a ``call`` in a whole-mesh program over several devices is lowered
# (``_whole_mesh``, which needs the failure checks built on this module).
_whole_mesh_lowering = None


def register_whole_mesh_lowering(lower):
    """``lower(ctx, args, devices, params)`` lowers every ``call`` in a
    whole-mesh program over several devices from now on."""
    global _whole_mesh_lowering
    _whole_mesh_lowering = lower


def _region_on_failure(mesh, devices):
    """How a failed call fails its computation in a manual region (see
    ``_runtime``): a region that ends with the checks (``_failures``,
    ``_region_checks``) takes the failure there; elsewhere it raises at once
    (safe on one device)."""
    if len(devices) > 1 and manual_regions.checked_region(mesh):
        return _runtime.PEND
    return _runtime.RAISE


def _lower_on_every_device(ctx, args, axis_context, params):
    # The region's other axes become manual too, the operands replicated
    # over them: each device then calls back with its group's whole value.
    mesh = axis_context.mesh
    manual = set(axis_context.manual_axes)
    free = {a for a in mesh.axis_names if a not in manual}
    abstract = mesh if isinstance(mesh, jax.sharding.AbstractMesh) else mesh.abstract_mesh
    shard_mesh = abstract.update_axis_types(
        {a: jax.sharding.AxisType.Manual for a in manual})
    n_out = len(args) if params["identity"] else len(params["flat_results_aval"])
    spmd = jax.shard_map(
        lambda *xs: tuple(outside_call_p.bind(*xs, **params)), mesh=shard_mesh,
        in_specs=(jax.sharding.PartitionSpec(),) * len(args),
        out_specs=(jax.sharding.PartitionSpec(),) * n_out,
        axis_names=free, check_vma=False)
    with jax.sharding.use_abstract_mesh(shard_mesh):
        return mlir.lower_fun(spmd, multiple_results=True)(ctx, *args)


# Not cacheable: a callback is referenced by its index in the module.
mlir.register_lowering(outside_call_p, _lowering, cacheable=False)
