"""Placement: ``x.device_buffers`` / ``x.device_buffer``,
``jax.device_put_replicated`` / ``jax.device_put_sharded`` (gone in JAX 0.10),
and ``GlobalDeviceArray.from_callback(shape, mesh, mesh_axes, callback)``:
``jax.make_array_from_callback(shape, NamedSharding(mesh, P(*mesh_axes)),
callback)``, the jax.Array a GlobalDeviceArray became."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs


PJIT_NAMES = ("jax.experimental.pjit.pjit",)


class PlacementPlan:
    """The names of a file that hold a classic pjit's output: each binding of the
    name is ``name = f(...)``, each binding of ``f`` is ``f = pjit(...)``. Their
    ``device_buffers`` are the array's shards as they are (a pjit's kept every
    axis), in the mesh's device order, as ``addressable_shards`` gives them:
    ``[s.data for s in x.addressable_shards]``, what JAX's own message says,
    with no ``_device_buffers`` (which cannot tell such an array from a pmap's
    output, whose shards lost the mapped axis)."""
    family = "placement"

    def __init__(self, ctx, module):
        bound = sx.bindings(module)

        def all_calls_of(name, callees):
            values = bound.get(name, ())
            return bool(values) and all(
                isinstance(v, cst.Call) and callees(v.func) for v in values)

        pjits = {name for name in bound
                 if all_calls_of(name, lambda f: ctx.qualname(f) in PJIT_NAMES)}
        self.pjit_outputs = {name for name in bound if all_calls_of(
            name, lambda f: isinstance(f, cst.Name) and f.value in pjits)}


def _device_buffers(ctx, original, updated):
    value = original.value
    if isinstance(value, cst.Name) and value.value in ctx.plans["placement"].pjit_outputs:
        return f"[s.data for s in {sx.code(updated.value)}.addressable_shards]"
    ctx.need_helper(helpers.DEVICE_BUFFERS)
    return f"_device_buffers({sx.code(updated.value)})"


def _device_buffer(ctx, original, updated):
    return f"{sx.atom(updated.value)}.addressable_data(0)"


def _put(helper, params):
    def rule(ctx, original, updated):
        try:
            bound = sx.bind(updated, params)
        except sx.Unbindable as exc:
            raise LeaveAsIs(f"{exc}; use jax.device_put with a NamedSharding") from None
        if set(params) != bound.keys():
            raise LeaveAsIs(f"needs {' and '.join(params)}: use jax.device_put with a "
                            "NamedSharding over a 1-D mesh of the devices")
        ctx.need_helper(helper)
        return sx.rewrite_call(updated, helper.name)
    return rule


GDA = "jax.experimental.global_device_array"


def _spec(node):
    """``jax.P(...)`` of a GDA's ``mesh_axes`` (a list or tuple of axis names, None,
    a PartitionSpec, or a name holding one of those but None)."""
    if isinstance(node, (cst.List, cst.Tuple)):
        return sx.call_text("jax.P", [sx.code(e.value) for e in node.elements])
    if isinstance(node, cst.Name) and node.value == "None":
        return "jax.P()"
    return f"jax.P(*{sx.atom(node)})"


def _from_callback(ctx, original, updated):
    try:
        bound = sx.bind(updated, ("global_shape", "global_mesh", "mesh_axes", "data_callback"))
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; use jax.make_array_from_callback(shape, "
                        "NamedSharding(mesh, P(*mesh_axes)), callback)") from None
    if len(bound) != 4:
        raise LeaveAsIs(f"from_callback given {len(bound)} of its 4 arguments: use "
                        "jax.make_array_from_callback(shape, NamedSharding(mesh, "
                        "P(*mesh_axes)), callback)")
    ctx.need_import("jax")
    sharding = sx.call_text("jax.sharding.NamedSharding", [
        sx.value(bound, "global_mesh"), _spec(bound["mesh_axes"].value)])
    return sx.call_text("jax.make_array_from_callback", [
        sx.value(bound, "global_shape"), sharding, sx.value(bound, "data_callback")])


def family():
    return Family(
        "placement",
        attributes={"device_buffers": _device_buffers, "device_buffer": _device_buffer},
        calls={"jax.device_put_replicated": _put(helpers.DEVICE_PUT_REPLICATED, ("x", "devices")),
               "jax.device_put_sharded": _put(helpers.DEVICE_PUT_SHARDED, ("shards", "devices")),
               f"{GDA}.GlobalDeviceArray.from_callback": _from_callback},
        classic=("jax.device_put_replicated", "jax.device_put_sharded"),
        plan=PlacementPlan,
        reasons={"jax.device_put_replicated": "removed in JAX 0.10; use jax.device_put(x, "
                 "NamedSharding(Mesh(devices, ('i',)), P('i'))) on a stacked array",
                 "jax.device_put_sharded": "removed in JAX 0.10; use jax.device_put("
                 "stacked, NamedSharding(Mesh(devices, ('i',)), P('i')))"})
