"""vmap rules: batching a pmap (pjit) batches its body.

pjit: batched operands get the vmapped axis first, inserted into their
PartitionSpecs (partitioned over ``spmd_axis_name`` when given).

pmap:

Each batched operand is laid out with the vmapped axis first and the pmap's
mapped axis second, so on every device the body sees the vmapped axis at 0;
the body is batched with all outputs at 0 and the pmap re-inserts its mapped
axis after it. Collectives over the vmapped axis name inside the body are
handled by JAX's jaxpr batching.
"""
from __future__ import annotations

import jax.numpy as jnp

from pmapkit import _jax_private as jp
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit.core.rules.primitives import no_mesh, pjit_p, pmap_p
from pmapkit.core.rules.common import axis_bound, with_params


def _pmap_batch(axis_data, vals, dims, **params):
    new_vals, new_in_axes, in_batched = [], [], []
    for x, d, ax in zip(vals, dims, params["in_axes"]):
        if d is jp.not_mapped:
            new_vals.append(x)
            new_in_axes.append(ax)
            in_batched.append(False)
            continue
        if ax is None:
            new_vals.append(jnp.moveaxis(x, d, 0))
            new_in_axes.append(None)
        else:
            mapped = ax + 1 if d <= ax else ax
            new_vals.append(jnp.moveaxis(x, (d, mapped), (0, 1)))
            new_in_axes.append(1)
        in_batched.append(True)
    n_out = len(params["out_axes"])
    with axis_bound(params):
        batched, out_batched = jp.batch_jaxpr(params["jaxpr"], axis_data,
                                              in_batched, [False] * n_out)
    # A batched body output has the vmapped axis at 0, before the pmap's own.
    new_out_axes = tuple(ax + 1 if (b and ax is not None) else ax
                         for ax, b in zip(params["out_axes"], out_batched))
    new_params = with_params(
        params, jaxpr=batched, in_axes=tuple(new_in_axes), out_axes=new_out_axes,
        name=f"vmap({params['name']})")
    outs = pmap_p.bind(*new_vals, **new_params)
    return outs, [0 if b else jp.not_mapped for b in out_batched]


jp.batching.fancy_primitive_batchers[pmap_p] = _pmap_batch


def _with_leading_dim(sharding, entry):
    if sharding is None:  # left to the partitioner
        return None
    return NamedSharding(sharding.mesh, PartitionSpec(entry, *sharding.spec))


def _pjit_batch(axis_data, vals, dims, **params):
    # The vmapped axis goes first; with vmap(spmd_axis_name=...) it is
    # partitioned over those mesh axes, otherwise replicated.
    spmd = getattr(axis_data, "spmd_name", None)
    entry = None if not spmd else (spmd[0] if len(spmd) == 1 else tuple(spmd))
    new_vals, in_batched, in_sh = [], [], []
    for x, d, s in zip(vals, dims, params["in_shardings"]):
        if d is jp.not_mapped:
            new_vals.append(x)
            in_batched.append(False)
            in_sh.append(s)
        else:
            new_vals.append(jnp.moveaxis(x, d, 0))
            in_batched.append(True)
            in_sh.append(_with_leading_dim(s, entry))
    n_out = len(params["out_shardings"])
    with no_mesh():
        batched, out_batched = jp.batch_jaxpr(params["jaxpr"], axis_data,
                                              in_batched, [False] * n_out)
    out_sh = tuple(_with_leading_dim(s, entry) if b else s
                   for s, b in zip(params["out_shardings"], out_batched))
    new_params = with_params(params, jaxpr=batched, in_shardings=tuple(in_sh),
                             out_shardings=out_sh)
    outs = pjit_p.bind(*new_vals, **new_params)
    return outs, [0 if b else jp.not_mapped for b in out_batched]


jp.batching.fancy_primitive_batchers[pjit_p] = _pjit_batch
