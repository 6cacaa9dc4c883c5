"""checkify rules: a pmap (pjit) checks its body.

``checkify`` threads an error value through a function; for a primitive with
a body it needs a rule that threads it through the body, or the body's
``checkify.check``s stay unfunctionalized and its automatic checks (nan, div,
index) are never made. As JAX's shard_map rule does (and the classic
xla_pmap rule did): the incoming error enters every program instance
unmapped, each instance checks its part, and the error comes out mapped, one
per instance; reading it gives ``at mapped index i: ...`` per failing
instance. A pjit checks its whole (global) body; its error comes out
replicated.
"""
from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.primitives import no_mesh, pjit_p, pmap_p
from pmapkit.rules.common import axis_bound, with_params


def _checked_body(jaxpr, enabled_errors, error, vals_avals):
    err_vals, err_tree = jax.tree_util.tree_flatten(error)
    err_avals = [jp.get_aval(e) for e in err_vals]
    checked, out_tree, _ = jp.jaxpr_to_checkify_jaxpr(
        jaxpr, enabled_errors, err_tree, *err_avals, *vals_avals)
    return err_vals, checked, out_tree


def _pmap_checkify(error, enabled_errors, *vals, **params):
    body = params["jaxpr"]
    with axis_bound(params):
        err_vals, checked, out_tree = _checked_body(
            body, enabled_errors, error, body.in_avals)
    # Collectives over the pmap's own axis are bound by it (as when traced).
    checked = jp.ClosedJaxpr(
        jp.remove_named_axis_effects(checked.jaxpr, {params["axis_name"]}),
        checked.consts)
    n_err, n_out_err = len(err_vals), out_tree.num_leaves - len(params["out_axes"])
    new_params = with_params(
        params, jaxpr=checked,
        in_axes=(None,) * n_err + params["in_axes"],
        out_axes=(0,) * n_out_err + params["out_axes"],
        donated_invars=(False,) * n_err + params["donated_invars"])
    outs = pmap_p.bind(*err_vals, *vals, **new_params)
    return jax.tree_util.tree_unflatten(out_tree, outs)


jp.checkify_error_checks[pmap_p] = _pmap_checkify


def _pjit_checkify(error, enabled_errors, *vals, **params):
    body = params["jaxpr"]
    with no_mesh():
        err_vals, checked, out_tree = _checked_body(
            body, enabled_errors, error, body.in_avals)
    n_err, n_out_err = len(err_vals), out_tree.num_leaves - len(params["out_shardings"])
    replicated = _replicated(params["in_shardings"] + params["out_shardings"])
    new_params = with_params(
        params, jaxpr=checked,
        in_shardings=(replicated,) * n_err + params["in_shardings"],
        out_shardings=(replicated,) * n_out_err + params["out_shardings"],
        donated_invars=(False,) * n_err + params["donated_invars"])
    outs = pjit_p.bind(*err_vals, *vals, **new_params)
    return jax.tree_util.tree_unflatten(out_tree, outs)


def _replicated(shardings):
    """Error values live replicated on the pjit's mesh (None: left to the
    partitioner, where no operand names the mesh)."""
    for s in shardings:
        if isinstance(s, NamedSharding):
            return NamedSharding(s.mesh, PartitionSpec())
    return None


jp.checkify_error_checks[pjit_p] = _pjit_checkify
