"""What kind of top-level program each of pmapkit's primitives makes: its
global in/out shardings (memoized per equation, watched by rooms above) and
the effects that keep it off the fast path."""
from __future__ import annotations

import collections
import threading

from jax.sharding import NamedSharding, PartitionSpec

from pmapkit.core.keys import _cache_keys, caches
from pmapkit.core.lowering.nested_pmaps import dims_spec, mapped_dims, nested_in_dims, nested_out_dims
from pmapkit.core.lowering.lowering import pmap_mesh
from pmapkit.core.rules.primitives import body_effects, pjit_p, pmap_p
from pmapkit.core.sharding.axis_names import mesh_name
from pmapkit.core.sharding.interning import intern_sharding

_memo_lock = threading.Lock()


class ProgramKind:
    """How to place one of our primitives as a top-level program: its global
    in/out shardings, and the effects that keep it off the fast path."""

    def __init__(self, shardings, effects, local_outputs, local_inputs_resized):
        self.shardings = shardings
        self.effects = effects
        # Across processes: results as this process's part (pmap) or global.
        self.local_outputs = local_outputs
        # Across processes: a local argument stands for a global one of
        # another shape, so local and global arrays of one shape are
        # different programs (pjit; a pmap's local and global arrays differ
        # in shape anyway).
        self.local_inputs_resized = local_inputs_resized


_PROGRAMS = {}


def program_kind(primitive):
    return _PROGRAMS[primitive]


def register_program(primitive, shardings, effects, local_outputs=False,
                     local_inputs_resized=False):
    _PROGRAMS[primitive] = ProgramKind(shardings, effects, local_outputs,
                                       local_inputs_resized)


# program_shardings per equation: a traced call reused from a trace cache
# (under grad, jvp, an outer jit) brings the same params dict every time.
_shardings_memo: collections.OrderedDict = collections.OrderedDict()
# Rooms above that watch programs' shardings (``watch_program_shardings``).
_shardings_watchers: list = []


def program_shardings(primitive, params, in_avals):
    key = _cache_keys.shardings_key(primitive, params, in_avals)
    hit = _shardings_memo.get(key)
    if hit is not None and hit[0] is params:  # (the id of a live dict)
        result = hit[1]
        with _memo_lock:
            # Least recently used first: a hit is the newest (if still kept).
            if _shardings_memo.get(key) is hit:
                _shardings_memo.move_to_end(key)
    else:
        ins, outs = _PROGRAMS[primitive].shardings(params, in_avals)
        result = tuple(map(intern_sharding, ins)), tuple(map(intern_sharding, outs))
        with _memo_lock:
            _shardings_memo[key] = (params, result)
            while len(_shardings_memo) > caches.programs_size():
                _shardings_memo.popitem(last=False)
    for watch in _shardings_watchers:
        watch(primitive, *result)
    return result


def watch_program_shardings(watch):
    """Call ``watch(primitive, in_shardings, out_shardings)`` for every
    program's shardings from now on (memoized or not), and now for those
    memoized (``known_program_shardings``: programs made before).
    ``pmapkit.legacy`` tells pmap results apart with it."""
    with _memo_lock:
        _shardings_watchers.append(watch)
    for known in known_program_shardings():
        watch(*known)


def known_program_shardings():
    """``(primitive, in_shardings, out_shardings)`` of the programs whose
    shardings are memoized now."""
    with _memo_lock:
        return [(key[0], *result) for key, (_, result) in _shardings_memo.items()]


def _pmap_shardings(params, in_avals):
    """Global shardings of a top-level pmap's operands and results: the
    mapped axis over the pmap's mesh axis, as jax.pmap places it, and the
    axes of nested pmaps over the inner mesh axes (one element per device)."""
    axis_name = params["axis_name"]
    mesh = pmap_mesh(params)
    body = params["jaxpr"].jaxpr
    out_avals = pmap_p.abstract_eval(*in_avals, **params)[0]

    def shardings(axes, inner_dims, avals):
        return tuple(
            NamedSharding(mesh, PartitionSpec(*[
                None if n is None else mesh_name(n) for n in dims_spec(
                    mapped_dims(dims, ax, axis_name), a.ndim)]))
            for ax, dims, a in zip(axes, inner_dims, avals))

    return (shardings(params["in_axes"], nested_in_dims(body, pmap_p), in_avals),
            shardings(params["out_axes"], nested_out_dims(body, pmap_p), out_avals))


register_program(pmap_p, _pmap_shardings,
                 lambda params: body_effects(params["jaxpr"], params["axis_name"]),
                 local_outputs=True)


register_program(pjit_p,
                 lambda params, in_avals: (params["in_shardings"], params["out_shardings"]),
                 lambda params: params["jaxpr"].effects, local_inputs_resized=True)


def _clear_memo():
    with _memo_lock:
        _shardings_memo.clear()


def _resize_memo(size):
    with _memo_lock:
        while len(_shardings_memo) > size:
            _shardings_memo.popitem(last=False)


caches.register_process_cache(_clear_memo, _resize_memo)
