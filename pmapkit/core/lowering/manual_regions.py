"""What lowering manual regions (pmap bodies, shard_maps) needs, nested ones
(pmap of pmap) above all.

- **Ordered effects stay out.** XLA cannot compile an effect token threaded
  into a manual computation that is nested in another or contains another
  (Shardy aborts the process: ``shape.h ... Check failed: buffer !=
  nullptr``; jax's own nested ``shard_map`` with an ordered ``io_callback``
  does the same). An ordered effect with an *unordered twin* registered here
  is swapped for its twin in the body of such a region, so no token enters
  it; its equations are rewritten by the registered rule (e.g. a host
  callback lowered without a token).
- **The concrete mesh.** A nested region is lowered on an abstract mesh (no
  devices); the outermost pmap being lowered on this thread records its
  concrete mesh, so rules inside can map a partition id to its device.
- **Checks at the end.** Features whose regions end with checks that may
  fail a run on every device register which bodies get them; the region
  being lowered with them is recorded, so rules inside know.
"""
from __future__ import annotations

import contextlib
import threading

from pmapkit import _jax_private as jp

_twins = {}          # ordered effect -> its unordered twin
_eqn_rewrites = {}   # primitive -> params -> params (for the twin effect)


def register_unordered_twin(ordered, unordered, primitive, rewrite_params):
    """In nested regions, ``primitive``'s equations carrying ``ordered`` get
    ``rewrite_params(params)`` and ``unordered`` instead."""
    _twins[ordered] = unordered
    _eqn_rewrites[primitive] = rewrite_params


def _swap(effects):
    return {_twins.get(e, e) for e in effects}


def _has_twinned(effects):
    return any(e in _twins for e in effects)


def _rewrite_param(value):
    if isinstance(value, jp.ClosedJaxpr):
        jaxpr = _rewrite_jaxpr(value.jaxpr)
        return value if jaxpr is value.jaxpr else jp.ClosedJaxpr(jaxpr, value.consts)
    if isinstance(value, jp.Jaxpr):
        return _rewrite_jaxpr(value)
    if isinstance(value, tuple):
        new = tuple(_rewrite_param(v) for v in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    return value


def _rewrite_eqn(eqn):
    if not _has_twinned(eqn.effects):
        return eqn
    rewrite = _eqn_rewrites.get(eqn.primitive)
    if rewrite is not None:
        params = rewrite(eqn.params)
    else:
        params = {k: _rewrite_param(v) for k, v in eqn.params.items()}
    return eqn.replace(params=params, effects=_swap(eqn.effects))


def _rewrite_jaxpr(jaxpr):
    if not _has_twinned(jaxpr.effects):
        return jaxpr
    return jaxpr.replace(eqns=[_rewrite_eqn(e) for e in jaxpr.eqns],
                         effects=_swap(jaxpr.effects))


def nested_body(closed_jaxpr):
    """``closed_jaxpr`` with every registered ordered effect, at any depth,
    replaced by its unordered twin (itself when it has none). Another
    ordered effect left there is a clear error instead of XLA's abort."""
    body = _rewrite_param(closed_jaxpr)
    left = jp.ordered_effects.filter_in(body.effects)
    if left:
        raise NotImplementedError(
            f"pmapkit: ordered effects ({', '.join(sorted(map(str, left)))}) are "
            "not supported in pmaps nested in another or around one: XLA cannot "
            "thread their tokens through nested manual regions (it aborts). Use "
            "unordered callbacks there (jax.debug.callback, io_callback with "
            "ordered=False) or pmapkit.host_callback, which is supported.")
    return body


class LoweringStack(threading.local):
    """What this thread is lowering, innermost last: ``with stack.on(v)``."""

    def __init__(self):
        self.stack = []

    @contextlib.contextmanager
    def on(self, value):
        self.stack.append(value)
        try:
            yield
        finally:
            self.stack.pop()

    def top(self):
        return self.stack[-1] if self.stack else None


_outer_meshes = LoweringStack()


def lowering_on(mesh):
    """Lowering the outermost pmap on the concrete ``mesh`` (this thread)."""
    return _outer_meshes.on(mesh)


def concrete_mesh(abstract_mesh):
    """The concrete mesh of the pmap being lowered whose abstract mesh is
    ``abstract_mesh`` (same axis names and sizes); None if there is none."""
    for mesh in reversed(_outer_meshes.stack):
        if tuple(mesh.shape.items()) == tuple(abstract_mesh.shape.items()):
            return mesh
    return None


# -- checks at the end of manual regions ---------------------------------------
# Registered by features whose manual regions end with checks that may fail a
# run on every device (host_callback: a failed call; its shard_map lowering
# appends them). Each is ``wanted(jaxpr)``: whether a body's region gets them.
_checked_bodies = []


def register_checked_body(wanted):
    _checked_bodies.append(wanted)


def ends_with_checks(jaxpr):
    """Whether a manual region with body ``jaxpr`` ends with such checks."""
    return any(wanted(jaxpr) for wanted in _checked_bodies)


_checked = LoweringStack()


def checking_on(mesh):
    """Lowering a manual region on ``mesh`` that ends with the checks."""
    return _checked.on(mesh)


def checked_region(mesh):
    """Whether the manual region being lowered on ``mesh`` ends with them."""
    top = _checked.top()
    return top is not None and top == mesh

