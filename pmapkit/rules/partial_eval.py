"""Partial evaluation (linearize, grad): split a pmap into a known pmap, run
now, and an unknown pmap, staged.

The known pmap also returns the residuals the unknown part needs; residuals
are per-device values, so they travel mapped on axis 0 between the two.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.primitives import body_effects, global_out_avals, pmap_p
from pmapkit.rules.common import axis_bound, select, with_params


def _pmap_partial_eval(trace, *tracers, **params):
    unknowns = [not t.pval.is_known() for t in tracers]
    with axis_bound(params):
        jaxpr_known, jaxpr_unknown, out_unknowns, res_avals = \
            jp.partial_eval_jaxpr_nounits(params["jaxpr"], unknowns, instantiate=False)
    num_res = len(res_avals)
    in_axes, out_axes = params["in_axes"], params["out_axes"]
    known_params = with_params(
        params, jaxpr=jaxpr_known,
        in_axes=tuple(select(unknowns, in_axes, keep=False)),
        out_axes=(*select(out_unknowns, out_axes, keep=False), *[0] * num_res),
        donated_invars=(False,) * (len(tracers) - sum(unknowns)),
        name=f"known({params['name']})")
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    known_outs = pmap_p.bind(*known_vals, **known_params)
    known_outs, residuals = known_outs[:len(known_outs) - num_res], known_outs[len(known_outs) - num_res:]

    unknown_axes = select(out_unknowns, out_axes)
    unknown_params = with_params(
        params, jaxpr=jaxpr_unknown,
        in_axes=(*[0] * num_res, *select(unknowns, in_axes)),
        out_axes=tuple(unknown_axes),
        donated_invars=(False,) * (num_res + sum(unknowns)),
        name=f"unknown({params['name']})")
    res_tracers = [trace.new_instantiated_const(r) for r in residuals]
    in_tracers = [trace.instantiate_const(t) for t, u in zip(tracers, unknowns) if u]
    out_avals = global_out_avals(jaxpr_unknown, params["axis_size"], unknown_axes)
    out_tracers = [jp.JaxprTracer(trace, jp.PartialVal.unknown(a), None)
                   for a in out_avals]
    eqn = jp.new_eqn_recipe(
        trace, [*res_tracers, *in_tracers], out_tracers, pmap_p, unknown_params,
        body_effects(jaxpr_unknown, params["axis_name"]), jp.current_source_info())
    for t in out_tracers:
        t.recipe = eqn
    known_iter, unknown_iter = iter(known_outs), iter(out_tracers)
    return [next(unknown_iter) if u else next(known_iter) for u in out_unknowns]


jp.pe.custom_partial_eval_rules[pmap_p] = _pmap_partial_eval
