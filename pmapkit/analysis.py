"""Jaxpr analyses on the miss path.

``varying_outputs`` tells which outputs of a per-device body may differ
between the devices of a mapped axis. Classic pmap refused ``out_axes=None``
for such outputs; this is what lets pmapkit refuse it too instead of silently
returning device 0's value.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp

# Collectives whose result is the same on every device of the reduced axes.
_INVARIANT_RESULT = frozenset({"psum", "pmax", "pmin", "all_gather",
                               "all_gather_invariant", "psum_invariant"})
# Collectives whose result differs per device even for an invariant input.
_ALWAYS_VARYING = frozenset({"axis_index", "ppermute", "psum_scatter",
                             "reduce_scatter", "all_to_all", "pbroadcast"})


def _names_axis(params, axis_name):
    for key in ("axes", "axis_name"):
        names = params.get(key)
        if names is None:
            continue
        if not isinstance(names, (tuple, list)):
            names = (names,)
        if axis_name in names:
            return True
    return False


def _sub_jaxpr(eqn):
    """The one inner jaxpr whose invars match the equation's operands, if any."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        if inner is None:
            continue
        inner = getattr(inner, "jaxpr", inner)
        if isinstance(inner, jp.Jaxpr) and len(inner.invars) == len(eqn.invars):
            return inner
    return None


def _mentions_axis(jaxpr, axis_name):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _ALWAYS_VARYING and _names_axis(eqn.params, axis_name):
            return True
        for inner in jp.jaxprs_in_params(eqn.params):
            if _mentions_axis(inner, axis_name):
                return True
    return False


def varying_outputs(jaxpr, varying_inputs, axis_name):
    """Per output of ``jaxpr``: may it differ across devices of ``axis_name``?"""
    varying = {}

    def read(atom):
        return False if isinstance(atom, jp.Literal) else varying.get(atom, False)

    for var in jaxpr.constvars:
        varying[var] = False
    for var, v in zip(jaxpr.invars, varying_inputs):
        varying[var] = bool(v)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(a) for a in eqn.invars]
        if name in _INVARIANT_RESULT and _names_axis(eqn.params, axis_name):
            outs = [False] * len(eqn.outvars)
        elif name in _ALWAYS_VARYING and _names_axis(eqn.params, axis_name):
            outs = [True] * len(eqn.outvars)
        else:
            inner = _sub_jaxpr(eqn)
            if inner is not None and len(inner.outvars) == len(eqn.outvars):
                outs = varying_outputs(inner, ins, axis_name)
            else:
                any_in = any(ins) or any(
                    _mentions_axis(j, axis_name)
                    for j in jp.jaxprs_in_params(eqn.params))
                outs = [any_in] * len(eqn.outvars)
        for var, v in zip(eqn.outvars, outs):
            varying[var] = v
    return [read(a) for a in jaxpr.outvars]


def nested_pmap_axes(jaxpr, primitive):
    """The chain of pmaps nested in a pmap body: ``((name, size), ...)``,
    outermost first. Nested pmaps of one body must agree on that chain (they
    share the device mesh of the outer pmap)."""
    found = set()

    def visit(j):
        for eqn in j.eqns:
            if eqn.primitive is primitive:
                inner = eqn.params["jaxpr"].jaxpr
                found.add(((eqn.params["axis_name"], eqn.params["axis_size"]),
                           nested_pmap_axes(inner, primitive)))
            else:
                for sub in jp.jaxprs_in_params(eqn.params):
                    visit(sub)

    visit(jaxpr)
    if not found:
        return ()
    if len(found) > 1:
        shapes = sorted(str([axis, *rest]) for axis, rest in found)
        raise ValueError(
            "pmapkit: the pmaps nested in one pmap body must use the same axis "
            f"names and sizes, found {', '.join(shapes)}.")
    (axis, rest), = found
    return (axis, *rest)
