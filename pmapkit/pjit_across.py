"""pjit on a mesh over several processes' devices: classic positional
semantics of its arguments.

Each process passes its *local* view of an argument: a dimension partitioned
over mesh axes that cross processes is given at this process's size (its
block of the mesh, ``process_local.local_mesh``). A global ``jax.Array``
(not fully addressable) is taken as it is, at its global shape. The body is
traced on the global shapes; outputs are global arrays.
"""
from __future__ import annotations

import jax
from jax.sharding import NamedSharding

from pmapkit import _jax_private as jp
from pmapkit import process_local, specs


def spans_processes(mesh) -> bool:
    """Whether ``mesh`` names a device of another process."""
    if jp.process_count() == 1:
        return False
    me = jax.process_index()
    return any(d.process_index != me for d in mesh.devices.flat)


def is_global(x) -> bool:
    """A global array: one whose shards are not all on this process."""
    if isinstance(x, jp.PRNGKeyArray):
        x = x._base_array
    return isinstance(x, jp.ArrayImpl) and not x.is_fully_addressable


def global_flags(flat):
    """Per leaf, whether it is a global array (local and global arguments of
    one shape trace to different programs, so caches key on this)."""
    return tuple(is_global(x) for x in flat)


def _parsed(leaf, what):
    if isinstance(leaf, NamedSharding):
        return specs.ParsedPartitionSpec.from_user_input(leaf.spec, what)
    return leaf


def global_avals(flat, in_avals, resources, shardings, describe):
    """The global avals of a top-level call's flat arguments.

    ``resources`` are the flat ``in_axis_resources`` leaves (None where
    in_axis_resources is omitted: then the kept shardings alone decide).
    Local arguments are checked against this process's block of the mesh
    (the classic message), global ones against the whole mesh.
    """
    out = []
    for k, (x, aval, sharding) in enumerate(zip(flat, in_avals, shardings)):
        parsed = None if resources is None else _parsed(resources[k], "pjit arguments")
        mesh = sharding.mesh
        if is_global(x):
            if parsed is not None:
                _check_global(parsed, aval.shape, mesh, describe(k))
            out.append(aval)
            continue
        if parsed is not None:
            parsed.check_shape(aval.shape, process_local.local_mesh(mesh),
                               "pjit arguments", describe(k))
        out.append(aval.update(shape=process_local.global_shape(aval.shape, sharding)))
    return out


def _check_global(parsed, shape, mesh, where):
    """The classic check of a global array's shape against its spec on the
    whole mesh ("global size" in the message, as classic pjit said for
    global arrays)."""
    try:
        parsed.check_shape(shape, mesh, "pjit arguments", where)
    except ValueError as exc:
        raise ValueError(str(exc).replace(
            "that the size of its dimension", "that the global size of its dimension")
            + "; a global (not fully addressable) array is passed at its "
            "global shape") from None
