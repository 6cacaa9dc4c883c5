"""Typecheck rules (``jax_enable_checks``): how ``core.check_jaxpr`` checks
an equation of ours.

Without a rule, ``check_jaxpr`` recurses into every jaxpr in an equation's
params with no named axes bound, so a pmap body using a collective over its
own axis fails as "unbound axis name". These rules check the operands against
the body's inputs, check the body in the context it was traced in (the pmap's
axis bound, no ambient mesh), and return the equation's output types and
effects, the same ones abstract evaluation gives.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import (
    body_effects, global_out_avals, no_mesh, per_device_context, pjit_p, pmap_p,
    remove_axis)


def _fail(prim, msg):
    raise jp.JaxprTypeError(f"{prim.name}: {msg}")


def _check_counts(prim, jaxpr, n_in, per_operand, per_result):
    if len(jaxpr.in_avals) != n_in:
        _fail(prim, f"{n_in} operands for a body of {len(jaxpr.in_avals)} inputs")
    for name, values in per_operand.items():
        if len(values) != n_in:
            _fail(prim, f"param {name} has {len(values)} entries for {n_in} operands")
    n_out = len(jaxpr.out_avals)
    for name, values in per_result.items():
        if len(values) != n_out:
            _fail(prim, f"param {name} has {len(values)} entries for {n_out} results")


def _check_operand(prim, k, have, want):
    # Shape and dtype must agree; weak types and the shardings an enclosing
    # jit's mesh puts on its avals do not matter to the body.
    if (tuple(have.shape) != tuple(want.shape) or have.dtype != want.dtype):
        _fail(prim, f"operand {k} of type {have.str_short()} does not match "
                    f"the body's input type {want.str_short()}")


def _pmap_typecheck(_, *in_atoms, jaxpr, axis_name, axis_size, devices,
                    in_axes, out_axes, donated_invars, name):
    del devices, name
    _check_counts(pmap_p, jaxpr, len(in_atoms),
                  {"in_axes": in_axes, "donated_invars": donated_invars},
                  {"out_axes": out_axes})
    for k, (atom, ax, want) in enumerate(zip(in_atoms, in_axes, jaxpr.in_avals)):
        have = atom.aval
        if ax is not None:
            if not 0 <= ax < len(have.shape) or have.shape[ax] != axis_size:
                _fail(pmap_p, f"operand {k} of type {have.str_short()} is not "
                              f"mapped with size {axis_size} on axis {ax}")
            have = remove_axis(have, ax)
        _check_operand(pmap_p, k, have, want)
    for k, (ax, aval) in enumerate(zip(out_axes, jaxpr.out_avals)):
        if ax is not None and not 0 <= ax <= len(aval.shape):
            _fail(pmap_p, f"out_axes {ax} is out of range for result {k} of "
                          f"per-device type {aval.str_short()}")
    with per_device_context(axis_name, axis_size):
        jp.check_jaxpr(jaxpr.jaxpr)
    return (global_out_avals(jaxpr, axis_size, out_axes),
            body_effects(jaxpr, axis_name))


def _pjit_typecheck(_, *in_atoms, jaxpr, in_shardings, out_shardings,
                    donated_invars, name):
    del name
    _check_counts(pjit_p, jaxpr, len(in_atoms),
                  {"in_shardings": in_shardings, "donated_invars": donated_invars},
                  {"out_shardings": out_shardings})
    for k, (atom, want) in enumerate(zip(in_atoms, jaxpr.in_avals)):
        _check_operand(pjit_p, k, atom.aval, want)
    with no_mesh():
        jp.check_jaxpr(jaxpr.jaxpr)
    return list(jaxpr.out_avals), jaxpr.effects


jp.custom_typechecks[pmap_p] = _pmap_typecheck
jp.custom_typechecks[pjit_p] = _pjit_typecheck
