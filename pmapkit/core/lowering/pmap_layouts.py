"""Which shardings lay out a pmap's values.

Classic JAX gave them a type of their own (``PmapSharding``); jax 0.10 lays
pmap outputs out with a ``NamedSharding`` over a one-axis mesh of the pmap's
devices, which names the pmap's axis (pmap's internal name without an
``axis_name``). With an ``axis_name`` nothing but the object itself tells a
pmap result from an array a caller laid out over an equal mesh, so the
objects are noted: pmapkit.pmap's from its programs' shardings, JAX's own
``jax.pmap``'s when a call picks its program (and, when this module loads,
those of the programs JAX holds already). Two rooms ask: pjit, which took
such an array as an uncommitted value and moved it (classic jit and pjit ignored
a ``PmapSharding`` when placing a computation) and refused such a sharding
as one of its own; and ``pmapkit.legacy`` (``PmapSharding``,
``Array.device_buffers``).
"""
from __future__ import annotations

from jax import tree_util
from jax.sharding import NamedSharding

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import kinds
from pmapkit.core.sharding import specs
from pmapkit.core.rules.primitives import pmap_p

# The result shardings of top-level pmaps (each its own key and value: the
# objects, interned, that pmap outputs carry), noted on every
# program_shardings call (memoized or not) and, at import, for the programs
# made before; past the bound, rebuilt from the programs lowering still holds.
_pmap_results: dict = {}
_PMAP_RESULTS_BOUND = 4096


def _note(primitive, in_shardings, out_shardings):
    del in_shardings
    if primitive is not pmap_p:
        return
    if len(_pmap_results) > _PMAP_RESULTS_BOUND:
        _pmap_results.clear()
        _pmap_results.update((s, s) for p, _, outs in kinds.known_program_shardings()
                             if p is pmap_p for s in outs)
    _pmap_results.update((s, s) for s in out_shardings)


kinds.watch_program_shardings(_note)

# jax.pmap's result shardings by id (JAX's objects; one equal to a pmapkit
# one is a different object, and each is told apart by identity), and the
# out-sharding trees already noted (by id, each held: a JAX program's tree
# is the same object on every call, so a call costs one lookup).
_jax_pmap_results: dict = {}
_jax_pmap_trees: dict = {}


def _note_jax_pmap(out_shardings):
    if _jax_pmap_trees.get(id(out_shardings)) is out_shardings:
        return
    if len(_jax_pmap_trees) > _PMAP_RESULTS_BOUND:
        # Programs JAX still calls are noted again on their next call.
        _jax_pmap_trees.clear()
        _jax_pmap_results.clear()
    _jax_pmap_results.update((id(s), s) for s in tree_util.tree_leaves(out_shardings))
    _jax_pmap_trees[id(out_shardings)] = out_shardings


jp.watch_jax_pmap_outputs(_note_jax_pmap)


def is_pmap_output(sharding) -> bool:
    """Whether an array with ``sharding`` came out of a pmap (the very
    sharding object of a pmapkit.pmap's or a jax.pmap's results), or is
    laid out on pmap's internal axis name (``device_put_sharded``). An
    equal sharding the caller made is not: pjit keeps such a committed
    array where it is, and its ``device_buffers`` keep the mapped axis."""
    if not isinstance(sharding, NamedSharding):
        return False
    return (_pmap_results.get(sharding) is sharding
            or _jax_pmap_results.get(id(sharding)) is sharding
            or sharding.mesh.axis_names == (specs.INTERNAL_AXIS_NAME,))
