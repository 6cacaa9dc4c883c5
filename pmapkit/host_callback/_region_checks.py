"""The checks at the end of manual regions: a pmapkit.pmap body, a user's
``jax.shard_map``, the regions of nested pmaps, the regions that run a call
on every device.

A failed ``call`` pends on its device (``_runtime.PEND``) and the region
ends with the same checks as a pmap body (``_failures.checks``): every
device takes its failures, the devices sum them, and every device raises if
any failed — no device is left waiting in a collective (XLA:CPU would abort
the process), none hands on a made-up value. JAX's ``shard_map`` lowering is
wrapped: a region whose body has a ``call`` and makes every axis of its mesh
manual, on several devices (of one process or several: the sum is a
collective like any other), is lowered with the checks appended; every
other region lowers as before.
"""
from __future__ import annotations

import jax
from jax.interpreters import mlir

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import manual_regions
from pmapkit.host_callback import _failures, _primitive

_shard_map_p = jp.shard_map_primitive()
_original_rule, _original_inline = jp.lowering_rule(_shard_map_p)


def _region_devices(mesh, newly_manual_axes, jaxpr):
    """The devices of a region that gets the checks, in partition order;
    None for a region lowered as before."""
    if set(newly_manual_axes) | set(mesh.manual_axes) != set(mesh.axis_names):
        return None  # some axes stay automatic: no per-device checks here
    if not _failures.has_call(jaxpr) or _failures.is_checked(jaxpr):
        return None
    if isinstance(mesh, jax.sharding.Mesh):
        concrete = mesh
    else:
        concrete = manual_regions.concrete_mesh(mesh)
        if concrete is None:
            return None
    devices = tuple(concrete.devices.flat)
    if len(devices) < 2:
        return None
    return devices


def _shard_map_lowering(ctx, *args, jaxpr, mesh, in_specs, out_specs, check_vma,
                        newly_manual_axes):
    params = dict(jaxpr=jaxpr, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                  check_vma=check_vma, newly_manual_axes=newly_manual_axes)
    devices = _region_devices(mesh, newly_manual_axes, jaxpr)
    if devices is None:
        return _original_rule(ctx, *args, **params)
    # The checks take the body's calls' token when they have one (not in
    # regions nested in others, where no token may enter).
    ordered = _primitive.host_callback_effect in jaxpr.effects
    axes = tuple(mesh.axis_names)

    def body(*xs):
        outs = jp.eval_jaxpr(jaxpr, (), *xs)
        return tuple(_failures.checks(outs, axes, devices, ordered))

    region = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                           axis_names=set(newly_manual_axes), check_vma=False)
    lower = mlir.lower_fun(region, multiple_results=True)
    with manual_regions.checking_on(mesh):
        if isinstance(mesh, jax.sharding.Mesh):
            return lower(ctx, *args)
        with jax.sharding.use_abstract_mesh(mesh):
            return lower(ctx, *args)


mlir.register_lowering(_shard_map_p, _shard_map_lowering, inline=_original_inline)
