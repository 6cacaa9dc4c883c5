"""A workaround for a JAX 0.10 bug that would give wrong results with taps.

``vmap`` of a ``while_loop`` whose predicate becomes batched keeps iterating
while any lane's predicate holds, and JAX's lowering masks the body with the
per-lane predicate — except when the condition has an ordered effect (a tap
in the condition, or ``jax.debug.callback(ordered=True)``): that lowering
path (``_while_lowering`` in ``jax/_src/lax/control_flow/loops.py``) reduces
the predicate to one boolean and runs the body on every lane, so lanes that
were done keep changing (``vmap`` over ``n=[1, 3]`` of "count to n" gives
``[3, 3]``).

This module wraps the ``while`` lowering: in exactly that case (ordered
effects in the condition, batched predicate) it lowers a loop that keeps each
lane's carry once its predicate is false, evaluating the condition (and its
taps) once per iteration; every other loop lowers as before.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core.primitives import while_p
from jax.interpreters import mlir

from pmapkit import _jax_private as jp

_original_rule, _original_inline = jp.lowering_rule(while_p)


def _masked_while(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    def lanes(cconsts, carry):
        return jp.eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *cconsts, *carry)[0]

    def keep_done_lanes(pred, new, old):
        # A batched predicate's shape is a prefix of every carry's shape.
        mask = jax.lax.broadcast_in_dim(pred, old.shape, tuple(range(pred.ndim)))
        return jnp.where(mask, new, old)

    def fun(*args):
        cconsts = args[:cond_nconsts]
        bconsts = args[cond_nconsts:cond_nconsts + body_nconsts]
        carry = tuple(args[cond_nconsts + body_nconsts:])

        def body(state):
            pred, carry = state
            new = jp.eval_jaxpr(body_jaxpr.jaxpr, body_jaxpr.consts, *bconsts, *carry)
            carry = tuple(keep_done_lanes(pred, n, o) for n, o in zip(new, carry))
            return lanes(cconsts, carry), carry

        _, out = jax.lax.while_loop(lambda state: jnp.any(state[0]), body,
                                    (lanes(cconsts, carry), carry))
        return out

    return fun


def _while_lowering(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    batched = bool(cond_jaxpr.out_avals[0].shape)
    if batched and jp.ordered_effects.filter_in(cond_jaxpr.effects):
        fun = _masked_while(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts)
        return mlir.lower_fun(fun, multiple_results=True)(ctx, *args)
    return _original_rule(ctx, *args, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                          cond_nconsts=cond_nconsts, body_nconsts=body_nconsts)


mlir.register_lowering(while_p, _while_lowering, inline=_original_inline)
