"""Transformation rules of ``outside_call_p`` (id_tap, id_print, call).

- vmap: the tap receives the batched value; ``transforms`` gains
  ``("batch", batch_dims)``, one entry per tapped leaf (None: not batched).
- jvp: the tap fires once, on the primal values; tangents pass through it
  unchanged (a tap is the identity).
- partial eval (linearize / grad): a tap whose inputs are all known runs now,
  with the known values; otherwise it is staged whole.
- transpose: a tap on linear values (a tangent tapped in a custom_jvp rule)
  taps their cotangents, with ``("transpose",)`` added to ``transforms``
  (taps on primal values are never transposed: jvp keeps them out of the
  linear part). Cotangents pass through unchanged.
- checkpoint: a tap in the rematerialized part runs in the forward pass and
  again when the backward pass recomputes it (unless the policy saves it).
- DCE: kept, with all its operands, even when its results are unused.
``call`` returns host-computed values JAX cannot differentiate or batch; its
rules raise (use ``jax.custom_jvp``/``custom_vjp`` around it).
"""
from __future__ import annotations

from pmapkit import _jax_private as jp
from pmapkit.host_callback._primitive import outside_call_p


def _only_for_taps(params, what):
    if not params["identity"]:
        raise NotImplementedError(
            f"host_callback.call does not support {what}; wrap the call in "
            "jax.custom_jvp or jax.custom_vjp to give it derivative rules.")


def _batch(args, dims, **params):
    if not params["identity"]:
        # The legacy module's error (LEGACY_SEMANTICS), and what to do.
        raise NotImplementedError(
            "batching rules are implemented only for id_tap, not for call. "
            "(host_callback.call does not support vmap: the host function "
            "would receive a batch it was not written for; loop with "
            "jax.lax.map instead.)")
    batch_dims = tuple(dims[:params["num_args"]])
    new_params = dict(params, transforms=(*params["transforms"], ("batch", batch_dims)))
    return outside_call_p.bind(*args, **new_params), list(dims)


jp.batching.primitive_batchers[outside_call_p] = _batch


def _jvp(primals, tangents, **params):
    _only_for_taps(params, "jvp or grad")
    return outside_call_p.bind(*primals, **params), list(tangents)


jp.ad.primitive_jvps[outside_call_p] = _jvp


def _transpose(cts, *args, **params):
    # A tap on linear values (tangents, e.g. in a custom_jvp rule) taps their
    # cotangents when transposed, with ("transpose",) added to transforms.
    _only_for_taps(params, "transposition")
    linear = [jp.is_undefined_primal(x) for x in args]
    out = [ct if lin else None for ct, lin in zip(cts, linear)]
    n = params["num_args"]
    if any(linear[:n]):
        tapped = [jp.instantiate_zeros(ct) for ct in cts[:n]]
        tapped = outside_call_p.bind(
            *tapped, **dict(params, transforms=(*params["transforms"], ("transpose",))))
        out[:n] = [ct if lin else None for ct, lin in zip(tapped, linear[:n])]
    return out


jp.ad.primitive_transposes[outside_call_p] = _transpose


def _partial_eval(trace, *tracers, **params):
    # All known: runs now (default_process_primitive binds it on the values);
    # else staged whole, so the host still gets the whole argument at once.
    return trace.default_process_primitive(outside_call_p, tracers, params)


jp.pe.custom_partial_eval_rules[outside_call_p] = _partial_eval


def _partial_eval_custom(saveable, unks_in, inst_in, eqn):
    residuals = [x for x, inst in zip(eqn.invars, inst_in)
                 if isinstance(x, jp.Var) and not inst]
    n_out = len(eqn.outvars)
    if any(unks_in):
        return None, eqn, [True] * n_out, [True] * n_out, residuals
    if saveable(outside_call_p, *[x.aval for x in eqn.invars], **eqn.params):
        return eqn, None, [False] * n_out, [False] * n_out, []
    # Rematerialized: runs in the forward pass and again in the backward
    # pass, where its outputs are recomputed rather than saved.
    return eqn, eqn, [False] * n_out, [True] * n_out, residuals


jp.pe.partial_eval_jaxpr_custom_rules[outside_call_p] = _partial_eval_custom


def _dce(used_outputs, eqn):
    del used_outputs  # the effect keeps it, and it sends all its operands
    return [True] * len(eqn.invars), eqn


jp.dce_rules[outside_call_p] = _dce
