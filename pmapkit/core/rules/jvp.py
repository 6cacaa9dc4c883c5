"""Forward-mode rules: the jvp of a pmap (pjit) is a pmap (pjit) of the
body's jvp.

Tangents ride along as extra operands mapped like their primals; the body's
jvp jaxpr returns primal outputs then the nonzero tangent outputs.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import no_mesh, pjit_p, pmap_p
from pmapkit.core.rules.common import axis_bound, select, with_params


def _pmap_jvp(primals, tangents, **params):
    jaxpr = params["jaxpr"]
    nonzero = [type(t) is not jp.Zero for t in tangents]
    with axis_bound(params):
        jvp_jaxpr, out_nonzero = jp.jvp_jaxpr(jaxpr, nonzero, instantiate=False)
    in_axes, out_axes = params["in_axes"], params["out_axes"]
    new_params = with_params(
        params, jaxpr=jvp_jaxpr,
        in_axes=(*in_axes, *select(nonzero, in_axes)),
        out_axes=(*out_axes, *select(out_nonzero, out_axes)),
        donated_invars=(*params["donated_invars"], *[False] * sum(nonzero)),
        name=f"jvp({params['name']})")
    outs = pmap_p.bind(*primals, *select(nonzero, tangents), **new_params)
    n_out = len(out_axes)
    primal_outs, tangent_iter = outs[:n_out], iter(outs[n_out:])
    primal_avals = pmap_p.abstract_eval(*[jp.get_aval(p) for p in primals], **params)[0]
    tangent_outs = [next(tangent_iter) if nz else jp.Zero(a.to_tangent_aval())
                    for nz, a in zip(out_nonzero, primal_avals)]
    return primal_outs, tangent_outs


jp.ad.primitive_jvps[pmap_p] = _pmap_jvp


def _pjit_jvp(primals, tangents, **params):
    # Tangents are placed like their primals; output tangents like outputs.
    nonzero = [type(t) is not jp.Zero for t in tangents]
    with no_mesh():
        jvp_jaxpr, out_nonzero = jp.jvp_jaxpr(params["jaxpr"], nonzero, instantiate=False)
    in_sh, out_sh = params["in_shardings"], params["out_shardings"]
    new_params = with_params(
        params, jaxpr=jvp_jaxpr,
        in_shardings=(*in_sh, *select(nonzero, in_sh)),
        out_shardings=(*out_sh, *select(out_nonzero, out_sh)),
        donated_invars=(*params["donated_invars"], *[False] * sum(nonzero)))
    outs = pjit_p.bind(*primals, *select(nonzero, tangents), **new_params)
    n_out = len(out_sh)
    tangent_iter = iter(outs[n_out:])
    tangent_outs = [next(tangent_iter) if nz else jp.Zero(a.to_tangent_aval())
                    for nz, a in zip(out_nonzero, params["jaxpr"].out_avals)]
    return outs[:n_out], tangent_outs


jp.ad.primitive_jvps[pjit_p] = _pjit_jvp
