"""Helpers shared by the pmap rules."""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.primitives import per_device_context, plain_avals, remove_axis


def select(flags, items, keep=True):
    return [x for f, x in zip(flags, items) if bool(f) == keep]


def local_aval(aval, axis):
    """Per-device aval of a global operand mapped (or not) on ``axis``."""
    return aval if axis is None else remove_axis(aval, axis)


def trace_body(fun, local_avals, axis_name, axis_size, what):
    """Trace ``fun`` (flat in, flat out) per device, with the axis bound."""
    debug = jp.DebugInfo(what, getattr(fun, "__name__", what),
                         tuple(f"x{i}" for i in range(len(local_avals))), None)
    with per_device_context(axis_name, axis_size):
        jaxpr, _, consts = jp.trace_to_jaxpr_dynamic(
            jp.wrap_init(fun, debug_info=debug), plain_avals(local_avals))
    return jp.ClosedJaxpr(jaxpr, consts)


def axis_bound(params):
    """Context binding the pmap's axis, for re-tracing a body with collectives."""
    return per_device_context(params["axis_name"], params["axis_size"])


def with_params(params, **updates):
    new = dict(params)
    new.update(updates)
    return new
