"""Partial evaluation (linearize, grad): split a pmap (pjit) into a known
one, run now, and an unknown one, staged.

The known half also returns the residuals the unknown half needs. A pmap's
residuals are per-device values and travel mapped on axis 0; a pjit's are
replicated on its mesh.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit.core.rules.primitives import body_effects, global_out_avals, no_mesh, pjit_p, pmap_p
from pmapkit.core.rules.common import axis_bound, select, with_params


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


def _pjit_partial_eval(trace, *tracers, **params):
    # Residuals are replicated on the mesh: always valid, whatever their shape.
    unknowns = [not t.pval.is_known() for t in tracers]
    with no_mesh():
        jaxpr_known, jaxpr_unknown, out_unknowns, res_avals = \
            jp.partial_eval_jaxpr_nounits(params["jaxpr"], unknowns, instantiate=False)
    num_res = len(res_avals)
    in_sh, out_sh = params["in_shardings"], params["out_shardings"]
    mesh = (in_sh or out_sh)[0].mesh
    replicated = NamedSharding(mesh, PartitionSpec())
    known_params = with_params(
        params, jaxpr=jaxpr_known,
        in_shardings=tuple(select(unknowns, in_sh, keep=False)),
        out_shardings=(*select(out_unknowns, out_sh, keep=False), *[replicated] * num_res),
        donated_invars=(False,) * (len(tracers) - sum(unknowns)))
    known_vals = [t.pval.get_known() for t in tracers if t.pval.is_known()]
    known_outs = pjit_p.bind(*known_vals, **known_params)
    split = len(known_outs) - num_res
    known_outs, residuals = known_outs[:split], known_outs[split:]
    unknown_params = with_params(
        params, jaxpr=jaxpr_unknown,
        in_shardings=(*[replicated] * num_res, *select(unknowns, in_sh)),
        out_shardings=tuple(select(out_unknowns, out_sh)),
        donated_invars=(False,) * (num_res + sum(unknowns)))
    res_tracers = [trace.new_instantiated_const(r) for r in residuals]
    in_tracers = [trace.instantiate_const(t) for t, u in zip(tracers, unknowns) if u]
    out_tracers = [jp.JaxprTracer(trace, jp.PartialVal.unknown(a), None)
                   for a in jaxpr_unknown.out_avals]
    eqn = jp.new_eqn_recipe(
        trace, [*res_tracers, *in_tracers], out_tracers, pjit_p, unknown_params,
        jaxpr_unknown.effects, jp.current_source_info())
    for t in out_tracers:
        t.recipe = eqn
    known_iter, unknown_iter = iter(known_outs), iter(out_tracers)
    return [next(unknown_iter) if u else next(known_iter) for u in out_unknowns]


jp.pe.custom_partial_eval_rules[pjit_p] = _pjit_partial_eval
