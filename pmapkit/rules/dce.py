"""Dead-code elimination: unused pmap / pjit outputs (and the inputs only
they need) leave the equation and its body."""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.primitives import body_effects, pjit_p, pmap_p
from pmapkit.rules.common import select, with_params


def _pmap_dce(used_outputs, eqn):
    if not any(used_outputs) and not jp.has_effects(eqn):
        return [False] * len(eqn.invars), None
    params = eqn.params
    closed = params["jaxpr"]
    jaxpr, used_inputs = jp.dce_jaxpr(closed.jaxpr, used_outputs)
    body = jp.ClosedJaxpr(jaxpr, closed.consts)
    new_params = with_params(
        params, jaxpr=body,
        in_axes=tuple(select(used_inputs, params["in_axes"])),
        out_axes=tuple(select(used_outputs, params["out_axes"])),
        donated_invars=tuple(select(used_inputs, params["donated_invars"])))
    new_eqn = jp.new_jaxpr_eqn(
        select(used_inputs, eqn.invars), select(used_outputs, eqn.outvars),
        pmap_p, new_params, body_effects(body, params["axis_name"]),
        eqn.source_info, eqn.ctx)
    return used_inputs, new_eqn


jp.pe.dce_rules[pmap_p] = _pmap_dce


def _pjit_dce(used_outputs, eqn):
    if not any(used_outputs) and not jp.has_effects(eqn):
        return [False] * len(eqn.invars), None
    params = eqn.params
    closed = params["jaxpr"]
    jaxpr, used_inputs = jp.dce_jaxpr(closed.jaxpr, used_outputs)
    body = jp.ClosedJaxpr(jaxpr, closed.consts)
    new_params = with_params(
        params, jaxpr=body,
        in_shardings=tuple(select(used_inputs, params["in_shardings"])),
        out_shardings=tuple(select(used_outputs, params["out_shardings"])),
        donated_invars=tuple(select(used_inputs, params["donated_invars"])))
    new_eqn = jp.new_jaxpr_eqn(
        select(used_inputs, eqn.invars), select(used_outputs, eqn.outvars),
        pjit_p, new_params, body.effects, eqn.source_info, eqn.ctx)
    return used_inputs, new_eqn


jp.pe.dce_rules[pjit_p] = _pjit_dce
