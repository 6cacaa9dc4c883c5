"""Checkpointing (``jax.checkpoint`` / ``remat``): the custom partial-eval rule.

Under remat, an equation is split into a known equation run in the forward
pass and a staged one re-run in the backward pass, with the saveable policy
deciding which intermediates become residuals. For a pmap both halves are
pmaps over the same devices; residuals are per-device values and travel
mapped on axis 0, as in partial eval.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit.core.rules.primitives import body_effects, insert_axis, no_mesh, pjit_p, pmap_p
from pmapkit.core.rules.common import axis_bound, select, with_params


def _pmap_partial_eval_custom(saveable, unks_in, inst_in, eqn):
    params = eqn.params
    closed = params["jaxpr"]
    with axis_bound(params):
        jaxpr_known, jaxpr_staged, unks_out, inst_out, num_res = \
            jp.partial_eval_jaxpr_custom(closed.jaxpr, unks_in, inst_in,
                                         False, False, saveable)
    known = jp.ClosedJaxpr(jaxpr_known, closed.consts)
    staged = jp.ClosedJaxpr(jaxpr_staged, closed.consts)
    in_axes, out_axes = params["in_axes"], params["out_axes"]
    res_local = [v.aval for v in jaxpr_staged.invars[:num_res]]
    residuals = [jp.Var(insert_axis(a, 0, params["axis_size"])) for a in res_local]
    known_params = with_params(
        params, jaxpr=known,
        in_axes=tuple(select(unks_in, in_axes, keep=False)),
        out_axes=(*select(unks_out, out_axes, keep=False), *[0] * num_res),
        donated_invars=(False,) * (len(unks_in) - sum(unks_in)))
    staged_params = with_params(
        params, jaxpr=staged,
        in_axes=(*[0] * num_res, *select(inst_in, in_axes)),
        out_axes=tuple(select(inst_out, out_axes)),
        donated_invars=(False,) * (num_res + sum(inst_in)))
    ins_known = select(unks_in, eqn.invars, keep=False)
    ins_staged = select(inst_in, eqn.invars)
    eqn_known = jp.new_jaxpr_eqn(
        ins_known, [*select(unks_out, eqn.outvars, keep=False), *residuals],
        pmap_p, known_params, body_effects(known, params["axis_name"]),
        eqn.source_info, eqn.ctx)
    eqn_staged = jp.new_jaxpr_eqn(
        [*residuals, *ins_staged], select(inst_out, eqn.outvars), pmap_p,
        staged_params, body_effects(staged, params["axis_name"]),
        eqn.source_info, eqn.ctx)
    new_inst = [x for x, inst in zip(eqn.invars, inst_in)
                if isinstance(x, jp.Var) and not inst]
    return eqn_known, eqn_staged, unks_out, inst_out, new_inst + residuals


jp.pe.partial_eval_jaxpr_custom_rules[pmap_p] = _pmap_partial_eval_custom


def _pjit_partial_eval_custom(saveable, unks_in, inst_in, eqn):
    params = eqn.params
    closed = params["jaxpr"]
    with no_mesh():
        jaxpr_known, jaxpr_staged, unks_out, inst_out, num_res = \
            jp.partial_eval_jaxpr_custom(closed.jaxpr, unks_in, inst_in,
                                         False, False, saveable)
    known = jp.ClosedJaxpr(jaxpr_known, closed.consts)
    staged = jp.ClosedJaxpr(jaxpr_staged, closed.consts)
    in_sh, out_sh = params["in_shardings"], params["out_shardings"]
    replicated = NamedSharding((in_sh or out_sh)[0].mesh, PartitionSpec())
    residuals = [jp.Var(v.aval) for v in jaxpr_staged.invars[:num_res]]
    known_params = with_params(
        params, jaxpr=known,
        in_shardings=tuple(select(unks_in, in_sh, keep=False)),
        out_shardings=(*select(unks_out, out_sh, keep=False), *[replicated] * num_res),
        donated_invars=(False,) * (len(unks_in) - sum(unks_in)))
    staged_params = with_params(
        params, jaxpr=staged,
        in_shardings=(*[replicated] * num_res, *select(inst_in, in_sh)),
        out_shardings=tuple(select(inst_out, out_sh)),
        donated_invars=(False,) * (num_res + sum(inst_in)))
    eqn_known = jp.new_jaxpr_eqn(
        select(unks_in, eqn.invars, keep=False),
        [*select(unks_out, eqn.outvars, keep=False), *residuals],
        pjit_p, known_params, known.effects, eqn.source_info, eqn.ctx)
    eqn_staged = jp.new_jaxpr_eqn(
        [*residuals, *select(inst_in, eqn.invars)], select(inst_out, eqn.outvars),
        pjit_p, staged_params, staged.effects, eqn.source_info, eqn.ctx)
    new_inst = [x for x, inst in zip(eqn.invars, inst_in)
                if isinstance(x, jp.Var) and not inst]
    return eqn_known, eqn_staged, unks_out, inst_out, new_inst + residuals


jp.pe.partial_eval_jaxpr_custom_rules[pjit_p] = _pjit_partial_eval_custom
