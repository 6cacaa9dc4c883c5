"""Transpose (reverse mode): the transpose of a pmap (pjit) is a pmap (pjit)
of the body's transpose. For pjit, cotangents enter placed like the outputs
and leave placed like the inputs. For pmap:

Non-linear operands keep their axes; each nonzero output cotangent enters
mapped like its output (that of an unmapped output is divided equally among
the devices, as jax.pmap does). Cotangents of mapped linear operands leave mapped
like the operand; those of broadcast (``in_axes=None``) operands leave mapped
on axis 0 and are summed over the devices afterwards: the dual of fanning a
value out to every device is adding the per-device cotangents back up.
"""
from __future__ import annotations

import jax

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import pjit_p, pmap_p
from pmapkit.core.rules.common import (local_aval, select, trace_body, trace_program,
                                  transpose_body, with_params)


def _pmap_transpose(cts, *args, **params):
    jaxpr = params["jaxpr"]
    in_axes, out_axes = params["in_axes"], params["out_axes"]
    linear = [jp.is_undefined_primal(x) for x in args]
    arg_avals = [x.aval if lin else jp.get_aval(x) for x, lin in zip(args, linear)]
    local_in = [local_aval(a, ax) for a, ax in zip(arg_avals, in_axes)]
    nonzero_cts = [type(ct) is not jp.Zero for ct in cts]
    body = trace_body(transpose_body(jaxpr, linear, nonzero_cts),
                      [*select(linear, local_in, keep=False),
                       *select(nonzero_cts, jaxpr.out_avals)],
                      params["axis_name"], params["axis_size"], "pmap_transpose")
    lin_axes = select(linear, in_axes)
    new_params = with_params(
        params, jaxpr=body,
        in_axes=(*select(linear, in_axes, keep=False), *select(nonzero_cts, out_axes)),
        out_axes=tuple(0 if ax is None else ax for ax in lin_axes),
        donated_invars=(False,) * (len(args) - sum(linear) + sum(nonzero_cts)),
        name=f"transpose({params['name']})")
    # An unmapped output is each device's own value (reading it gives the
    # first device's); as jax.pmap, its cotangent is shared out equally.
    size = params["axis_size"]
    ct_in, ct_axes = [], []
    for ct, ax, nz in zip(cts, out_axes, nonzero_cts):
        if not nz:
            continue
        if ax is None:
            ct = ct * (1.0 / size)
        ct_in.append(ct)
        ct_axes.append(ax)
    new_params["in_axes"] = (*select(linear, in_axes, keep=False), *ct_axes)
    outs = pmap_p.bind(*select(linear, args, keep=False), *ct_in, **new_params)
    out_iter = iter(outs)
    result = []
    for lin, ax in zip(linear, in_axes):
        if not lin:
            result.append(None)
            continue
        ct = next(out_iter)
        result.append(ct.sum(0) if ax is None else ct)
    return result


jp.ad.primitive_transposes[pmap_p] = _pmap_transpose


def _pjit_transpose(cts, *args, **params):
    # Cotangents enter placed like the outputs and leave like the inputs.
    jaxpr = params["jaxpr"]
    linear = [jp.is_undefined_primal(x) for x in args]
    nonzero_cts = [type(ct) is not jp.Zero for ct in cts]
    arg_avals = [x.aval if lin else jp.get_aval(x) for x, lin in zip(args, linear)]
    body = trace_program(transpose_body(jaxpr, linear, nonzero_cts),
                         [*select(linear, arg_avals, keep=False),
                          *select(nonzero_cts, jaxpr.out_avals)], "pjit_transpose")
    in_sh, out_sh = params["in_shardings"], params["out_shardings"]
    new_params = with_params(
        params, jaxpr=body,
        in_shardings=(*select(linear, in_sh, keep=False), *select(nonzero_cts, out_sh)),
        out_shardings=tuple(select(linear, in_sh)),
        donated_invars=(False,) * (len(args) - sum(linear) + sum(nonzero_cts)))
    outs = iter(pjit_p.bind(*select(linear, args, keep=False),
                            *select(nonzero_cts, cts), **new_params))
    return [next(outs) if lin else None for lin in linear]


jp.ad.primitive_transposes[pjit_p] = _pjit_transpose
