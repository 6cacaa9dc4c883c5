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
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.rules.primitives import no_mesh, pjit_p, pmap_p, remove_axis
from pmapkit.core.rules.common import axis_bound, with_params


def _checked_body(what, jaxpr, enabled_errors, error, err_avals, mapped_in):
    """``(checked body, out tree)``: ``jaxpr`` threading ``error`` (whose
    flat values enter as ``err_avals``) through its checks. ``mapped_in``:
    some of them hold one error per instance of a mapped computation."""
    _, err_tree = jax.tree_util.tree_flatten(error)
    try:
        checked, out_tree, _ = jp.jaxpr_to_checkify_jaxpr(
            jaxpr, enabled_errors, err_tree, *err_avals, *jaxpr.in_avals)
    except TypeError as exc:
        if not mapped_in:
            raise
        raise TypeError(
            f"checkify through {what}: the error value coming in holds one "
            "error per instance of an earlier mapped computation (a pmap or "
            "vmap of another size, or a pmap before a pjit), and a check in "
            "the body cannot be merged with it (jax.pmap/jax.jit refuse this "
            "too). Read that error first (err.throw()), or move this "
            f"computation inside the mapped one. ({exc})") from exc
    return checked, out_tree


def _mapped_effect_leaves(error):
    """Per flat leaf of ``error``: whether it belongs to an error kind that
    holds one error per instance of a mapped computation (its predicate is
    an array, not a scalar). Error flattens as (predicates, codes,
    payloads), each a dict by error kind."""
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(error)[0]]
    leaves = jax.tree_util.tree_leaves(error)
    mapped = {p[1] for p, v in zip(paths, leaves) if p[0].key == 0 and np.ndim(v)}
    return [p[1] in mapped for p in paths]


def _pmap_checkify(error, enabled_errors, *vals, **params):
    body = params["jaxpr"]
    size = params["axis_size"]
    err_vals = jax.tree_util.tree_leaves(error)
    # The incoming error enters every instance, unmapped; one that already
    # holds an error per instance of an earlier mapped computation of this
    # size (a pmap before this one, the forward pmap of a grad) enters
    # mapped: instance i goes on from error i. (jax.pmap refuses that.)
    mapped = _mapped_effect_leaves(error)
    err_axes = tuple(0 if m and np.shape(v)[:1] == (size,) else None
                     for m, v in zip(mapped, err_vals))
    err_avals = [jp.get_aval(v) if ax is None else remove_axis(jp.get_aval(v), 0)
                 for v, ax in zip(err_vals, err_axes)]
    mapped_in = any(m and ax is None for m, ax in zip(mapped, err_axes))
    with axis_bound(params):
        checked, out_tree = _checked_body(
            f"pmap of {params['name']}", body, enabled_errors, error, err_avals,
            mapped_in)
    # Collectives over the pmap's own axis are bound by it (as when traced).
    checked = jp.ClosedJaxpr(
        jp.remove_named_axis_effects(checked.jaxpr, {params["axis_name"]}),
        checked.consts)
    n_err, n_out_err = len(err_vals), out_tree.num_leaves - len(params["out_axes"])
    new_params = with_params(
        params, jaxpr=checked,
        in_axes=err_axes + params["in_axes"],
        out_axes=(0,) * n_out_err + params["out_axes"],
        donated_invars=(False,) * n_err + params["donated_invars"])
    outs = pmap_p.bind(*err_vals, *vals, **new_params)
    return jax.tree_util.tree_unflatten(out_tree, outs)


jp.checkify_error_checks[pmap_p] = _pmap_checkify


def _pjit_checkify(error, enabled_errors, *vals, **params):
    body = params["jaxpr"]
    err_vals = jax.tree_util.tree_leaves(error)
    with no_mesh():
        checked, out_tree = _checked_body(
            f"pjit of {params['name']}", body, enabled_errors, error,
            [jp.get_aval(v) for v in err_vals], any(_mapped_effect_leaves(error)))
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
