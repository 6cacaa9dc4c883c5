"""A ``call`` in a whole-mesh program (jax.jit, pjit) over several devices.

The call runs the user's function once, with the whole operand, on device
``device_index``. If that device failed alone, the others would wait in the
program's next collective until XLA:CPU aborts the process; if it handed
back zeros, the program would go on with a made-up value. So the call is
lowered as a manual region over all the program's devices (one axis, the
operands replicated to each), where every device takes part:

- devices of one process: the call runs on the caller only, as
  ``jax.pure_callback`` runs; its failure's number (0: none) comes with its
  results, which XLA hands to every device, and on a failure every device
  raises it (``_rendezvous``);
- devices of several processes cannot meet in one process: the caller runs
  the function (a failure leaves zeros and pends), its result is gathered to
  every device, and the region ends with the failure checks
  (``_failures.checks``): every device raises if the caller failed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jax.interpreters import mlir
from jax.sharding import PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import manual_regions
from pmapkit.core.programs import process_local
from pmapkit.host_callback import _failures, _primitive, _rendezvous

AXIS = "_pmapkit_host_callback_devices"


def lower(ctx, args, devices, params):
    mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
    if not process_local.spans_devices(devices):
        return _caller_only(ctx, args, tuple(devices), mesh, params)
    else:
        body = _checked_body(params, tuple(devices))
        region = manual_regions.checking_on(mesh)
    n_out = len(params["flat_results_aval"])
    spmd = jax.shard_map(body, mesh=mesh, in_specs=(PartitionSpec(),) * len(args),
                         out_specs=(PartitionSpec(),) * n_out, check_vma=False)
    # Whatever mesh the program was traced under, this region has its own.
    with region, jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return mlir.lower_fun(spmd, multiple_results=True)(ctx, *args)


_FAILURE_NUMBER = jp.ShapedArray((), np.int32)


def _caller_only(ctx, args, devices, mesh, params):
    """The call over the devices of one process: run on the caller only, as
    ``jax.pure_callback`` runs (its op placed on that device, XLA handing
    its results to the others), with the failure's number (0: none) after
    its results; then every device, in a region of its own, raises when
    the number says the caller's run failed (crossing into Python then
    only)."""
    caller = params["device_index"]
    avals = params["flat_results_aval"]
    numbered = dict(params, flat_results_aval=(*avals, _FAILURE_NUMBER))

    def raise_here(number):
        # An effect of its own (unordered IO), so no DCE drops it.
        return io_callback(
            lambda k: _rendezvous.raise_failure(k, devices[caller]),
            jax.ShapeDtypeStruct((), np.int32), number, ordered=False)

    def check(number):
        return jax.lax.cond(number != 0, raise_here, lambda k: k, number)

    checked = jax.shard_map(check, mesh=mesh, in_specs=PartitionSpec(),
                            out_specs=PartitionSpec(), check_vma=False)

    def body(*xs):
        *outs, number = _primitive.outside_call_p.bind(*xs, **numbered)
        done = checked(number)
        *outs, _ = jax.lax.optimization_barrier((*outs, done))
        return tuple(outs)
    with _rendezvous.caller_op(), jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        return mlir.lower_fun(body, multiple_results=True)(ctx, *args)


def _checked_body(params, devices):
    caller = params["device_index"]
    avals = params["flat_results_aval"]

    def call(xs):
        return tuple(_primitive.outside_call_p.bind(*xs, **params))

    def others(xs):
        del xs
        return tuple(jnp.zeros(a.shape, a.dtype) for a in avals)

    def body(*xs):
        outs = jax.lax.cond(jax.lax.axis_index(AXIS) == caller, call, others, xs)
        # The caller's values, bit for bit, on every device.
        outs = [jax.lax.all_gather(o, AXIS)[caller] for o in outs]
        return tuple(_failures.checks(outs, AXIS, devices, params["ordered"]))
    return body


_primitive.register_whole_mesh_lowering(lower)
