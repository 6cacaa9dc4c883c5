"""Placement: ``x.device_buffers`` / ``x.device_buffer`` and
``jax.device_put_replicated`` / ``jax.device_put_sharded`` (gone in JAX 0.10)."""
from __future__ import annotations

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs


def _device_buffers(ctx, original, updated):
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


def family():
    return Family(
        "placement",
        attributes={"device_buffers": _device_buffers, "device_buffer": _device_buffer},
        calls={"jax.device_put_replicated": _put(helpers.DEVICE_PUT_REPLICATED, ("x", "devices")),
               "jax.device_put_sharded": _put(helpers.DEVICE_PUT_SHARDED, ("shards", "devices"))},
        classic=("jax.device_put_replicated", "jax.device_put_sharded"),
        reasons={"jax.device_put_replicated": "removed in JAX 0.10; use jax.device_put(x, "
                 "NamedSharding(Mesh(devices, ('i',)), P('i'))) on a stacked array",
                 "jax.device_put_sharded": "removed in JAX 0.10; use jax.device_put("
                 "stacked, NamedSharding(Mesh(devices, ('i',)), P('i')))"})
