"""Helpers shared by the pmap rules."""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import no_mesh, per_device_context, plain_avals, remove_axis


def select(flags, items, keep=True):
    return [x for f, x in zip(flags, items) if bool(f) == keep]


def local_aval(aval, axis):
    """Per-device aval of a global operand mapped (or not) on ``axis``."""
    return aval if axis is None else remove_axis(aval, axis)


def trace_body(fun, local_avals, axis_name, axis_size, what):
    """Trace ``fun`` (flat in, flat out) per device, with the axis bound."""
    with per_device_context(axis_name, axis_size):
        return _trace(fun, local_avals, what)


def trace_program(fun, avals, what):
    """Trace ``fun`` (flat in, flat out) as a whole-mesh program body."""
    with no_mesh():
        return _trace(fun, avals, what)


def _trace(fun, avals, what):
    debug = jp.DebugInfo(what, getattr(fun, "__name__", what),
                         tuple(f"x{i}" for i in range(len(avals))), None)
    jaxpr, _, consts = jp.trace_to_jaxpr_dynamic(
        jp.wrap_init(fun, debug_info=debug), plain_avals(avals))
    return jp.ClosedJaxpr(jaxpr, consts)


def transpose_body(jaxpr, linear, nonzero_cts):
    """The flat function computing the cotangents of ``jaxpr``'s linear
    inputs from its non-linear inputs and nonzero output cotangents."""
    in_avals = jaxpr.in_avals
    out_avals = jaxpr.out_avals

    def transposed(*flat):
        n_primal = len(linear) - sum(linear)
        primal_iter, ct_iter = iter(flat[:n_primal]), iter(flat[n_primal:])
        primals = [jp.UndefinedPrimal(a) if lin else next(primal_iter)
                   for a, lin in zip(in_avals, linear)]
        cts = [next(ct_iter) if nz else jp.Zero(a.to_tangent_aval())
               for nz, a in zip(nonzero_cts, out_avals)]
        arg_cts = jp.backward_pass(jaxpr.jaxpr, False, jaxpr.consts, primals, cts)
        return [jp.instantiate_zeros(ct) for ct, lin in zip(arg_cts, linear) if lin]

    return transposed


def axis_bound(params):
    """Context binding the pmap's axis, for re-tracing a body with collectives."""
    return per_device_context(params["axis_name"], params["axis_size"])


def with_params(params, **updates):
    new = dict(params)
    new.update(updates)
    return new
