"""Dead-code elimination: unused pmap / pjit outputs (and the inputs only
they need) leave the equation and its body."""
from __future__ import annotations

import functools

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import body_effects, no_mesh, pjit_p, pmap_p
from pmapkit.core.rules.common import axis_bound, select, with_params


def _dce(used_outputs, eqn, *, in_params, out_params, effects, context):
    """``in_params`` / ``out_params``: the params holding one entry per
    operand / result, filtered alongside the equation's vars. ``context``
    gives the context the body is traced in (under ``jax_enable_checks``
    ``dce_jaxpr`` typechecks the pruned body, which needs the pmap's axis)."""
    if not any(used_outputs) and not jp.has_effects(eqn):
        return [False] * len(eqn.invars), None
    params = eqn.params
    closed = params["jaxpr"]
    with context(params):
        jaxpr, used_inputs = jp.dce_jaxpr(closed.jaxpr, used_outputs)
    body = jp.ClosedJaxpr(jaxpr, closed.consts)
    updates = {k: tuple(select(used_inputs, params[k])) for k in in_params}
    updates.update({k: tuple(select(used_outputs, params[k])) for k in out_params})
    new_params = with_params(params, jaxpr=body, **updates)
    new_eqn = jp.new_jaxpr_eqn(
        select(used_inputs, eqn.invars), select(used_outputs, eqn.outvars),
        eqn.primitive, new_params, effects(body, params), eqn.source_info, eqn.ctx)
    return used_inputs, new_eqn


jp.pe.dce_rules[pmap_p] = functools.partial(
    _dce, in_params=("in_axes", "donated_invars"), out_params=("out_axes",),
    effects=lambda body, params: body_effects(body, params["axis_name"]),
    context=axis_bound)
jp.pe.dce_rules[pjit_p] = functools.partial(
    _dce, in_params=("in_shardings", "donated_invars"), out_params=("out_shardings",),
    effects=lambda body, params: body.effects,
    context=lambda params: no_mesh())
