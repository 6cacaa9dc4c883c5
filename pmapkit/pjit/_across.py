"""pjit on a mesh over several processes' devices: classic positional
semantics of its arguments.

Each process passes its *local* view of an argument: a dimension partitioned
over mesh axes that cross processes is given at this process's size (its
block of the mesh, ``process_local.local_mesh``). A global ``jax.Array``
(not fully addressable) is taken as it is, at its global shape. The body is
traced on the global shapes; outputs are global arrays.
"""
from __future__ import annotations

import zlib

import jax
import numpy as np
from jax.sharding import NamedSharding

from pmapkit import _jax_private as jp
from pmapkit.core.sharding import specs
from pmapkit.core.programs import process_local


def spans_processes(mesh) -> bool:
    """Whether ``mesh`` names a device of another process."""
    return jp.process_count() > 1 and process_local.spans_devices(mesh.devices.flat)


is_global = process_local.is_global


def global_flags(flat):
    """Per leaf, whether it is a global array (local and global arguments of
    one shape trace to different programs, so caches key on this)."""
    return tuple(is_global(x) for x in flat)


def _parsed(leaf, what):
    if isinstance(leaf, NamedSharding):
        return specs.ParsedPartitionSpec.from_user_input(leaf.spec, what)
    if isinstance(leaf, jax.sharding.Sharding):
        return None  # replicated over its devices: nothing to divide
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
            shape = aval.shape
        else:
            if parsed is not None:
                parsed.check_shape(aval.shape, process_local.local_mesh(mesh),
                                   "pjit arguments", describe(k))
            shape = process_local.global_shape(aval.shape, sharding)
        # Plain avals: a global array's carries its mesh, host data's none;
        # both are one program.
        out.append(jp.ShapedArray(shape, aval.dtype, weak_type=aval.weak_type))
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


def agreed_global_avals(mesh, compute):
    """``compute()`` (this process's global avals) once every process of the
    run has computed its own and they agree.

    Processes exchange whether their arguments passed the checks and a
    fingerprint of the global shapes (one small all-gather, on a trace
    miss only): a process passing shapes that do not fit together with the
    others' gets a ValueError on every process instead of a hang or a wrong
    program. Skipped where the mesh leaves out some process (those do not
    take part in the call).
    """
    error, avals, text = None, None, ""
    try:
        avals = compute()
        text = repr([(tuple(a.shape), str(a.dtype)) for a in avals])
    except ValueError as exc:
        error = exc
    owners = {d.process_index for d in mesh.devices.flat}
    if owners != set(range(jp.process_count())):
        if error is not None:
            raise error
        return avals
    mine = np.array([error is None, zlib.crc32(text.encode())], np.uint32)
    with jax.set_mesh(None):
        # Imported here: only runs across processes need it (start-up cost).
        from jax.experimental import multihost_utils
        everyone = np.asarray(multihost_utils.process_allgather(mine))
    if error is not None:
        raise error
    failed = [p for p in range(len(everyone)) if not everyone[p, 0]]
    if failed:
        raise ValueError(
            f"pjit: process(es) {failed} rejected their arguments to this call "
            "(see their error); every process of a multi-process pjit must "
            "pass arguments that fit the mesh.")
    differ = [p for p in range(len(everyone)) if everyone[p, 1] != mine[1]]
    if differ:
        raise ValueError(
            f"pjit: the processes passed arguments of inconsistent shapes: on "
            f"process {jax.process_index()} they make the global shapes "
            f"{text}, on process(es) {differ} others. Every process must pass "
            "its local part of the same global arrays (equal local sizes, one "
            "dtype), in the same order.")
    return avals
