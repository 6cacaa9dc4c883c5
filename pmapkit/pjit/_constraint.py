"""``with_sharding_constraint``: pinning an intermediate value's sharding
inside pjit (or jax.jit), and the classic errors of one called eagerly or
naming mesh axes with no mesh."""
from __future__ import annotations

import jax

from pmapkit import _jax_private as jp
from pmapkit.core.sharding import axis_names, specs
from pmapkit.core.sharding.mesh import active_mesh
from pmapkit.core.sharding.sharding_specs import classic_spec_repr
from pmapkit.pjit._placement import _check_against, _to_sharding


def with_sharding_constraint(x, axis_resources):
    """Pin the sharding of ``x`` (a pytree) inside pjit (or jax.jit) to
    ``axis_resources`` (a pytree prefix of ``None | PartitionSpec |
    NamedSharding``) on the active mesh."""
    flat, tree = jax.tree_util.tree_flatten(x)
    eager = jp.trace_state_clean() and not any(isinstance(v, jp.Tracer) for v in flat)
    if eager:
        _refuse_eager_constraint(axis_resources, x)
    prepared = specs.prepare_axis_resources(axis_resources, "axis_resources")
    resources = specs.flatten_axis_resources("axis_resources", prepared, x, False)
    mesh = active_mesh()
    if mesh is None and any(not isinstance(r, jax.sharding.Sharding) for r in resources):
        raise _no_mesh_for_constraint(resources, flat)
    avals = [jp.get_aval(v) for v in flat]
    # Uneven splits are allowed here (jax's constraint pads), not for pjit's
    # own arguments and outputs.
    _check_against("with_sharding_constraint arguments", resources, avals, mesh, None,
                   even=False)
    outs = [jax.lax.with_sharding_constraint(v, _to_sharding(r, mesh))
            for v, r in zip(flat, resources)]
    return jax.tree_util.tree_unflatten(tree, outs)



_EAGER_CONSTRAINT = ("with_sharding_constraint() should only be called inside pjit() "
                     "(or another traced function such as jax.jit).")



def _refuse_eager_constraint(axis_resources, x):
    """Outside any trace a constraint has nothing to constrain: JAX 0.4 raised
    NotImplementedError; JAX 0.2/0.3, with no mesh, first found the axis
    undefined (a ValueError). Both are raised as one error then."""
    try:
        prepared = specs.prepare_axis_resources(axis_resources, "axis_resources")
        resources = specs.flatten_axis_resources("axis_resources", prepared, x, False)
    except (TypeError, ValueError):
        resources = ()
    if active_mesh() is None:
        undefined = _undefined_axis_text(resources)
        if undefined:
            raise EagerMeshUndefinedError(f"{undefined}{_EAGER_CONSTRAINT}")
    raise NotImplementedError(_EAGER_CONSTRAINT)



class EagerMeshUndefinedError(ValueError, NotImplementedError):
    """Eager ``with_sharding_constraint`` naming mesh axes with no mesh
    declared: the ValueError JAX 0.2/0.3 raised ("resource axis ... is
    undefined. Did you forget to declare the mesh?") and the
    NotImplementedError of JAX 0.4, so code written for either catches it."""



class MeshUndefinedError(ValueError, RuntimeError):
    """``with_sharding_constraint`` with mesh axes and no mesh: JAX 0.2/0.3
    raised a ValueError ("resource axis ... is undefined. Did you forget to
    declare the mesh?"), 0.4 a RuntimeError ("requires a non-empty mesh");
    code written for either catches this."""



def _undefined_axis_text(resources):
    """The classic "resource axis ... is undefined" sentence for the first
    spec naming a mesh axis, or ""."""
    for leaf in resources:
        axes = [a for a in getattr(leaf, "partitions", ()) or () if a is not None]
        names = [n for a in axes for n in (a if isinstance(a, tuple) else (a,))]
        if names:
            return (f"One of with_sharding_constraint arguments was given the "
                    f"resource assignment of {classic_spec_repr(leaf.user_spec)}, "
                    f"but resource axis "
                    f"{axis_names.shown(names[0])} is undefined. Did you forget to "
                    "declare the mesh? ")
    return ""



def _no_mesh_for_constraint(resources, flat):
    del flat
    return MeshUndefinedError(
        _undefined_axis_text(resources) + "with_sharding_constraint requires a "
        "non-empty mesh! Are you sure that it's defined at the call site?")
