"""pmapkit's own primitives: definition and abstract evaluation (their impl
rule, eager evaluation through a compiled program, is registered where
programs are compiled: ``pmapkit.core.programs.compiling``).

``pmap_p`` carries the per-device body as a closed jaxpr traced with the
mapped axis name bound, so collectives inside it are ordinary named-axis
primitives. Its operands and results are *global* arrays: a mapped operand
has the mapped axis (size ``axis_size``) at ``in_axes[i]``; a result has it
at ``out_axes[j]``, or not at all when ``out_axes[j] is None``.

Params (all hashable, so equal equations share compiled programs):
  jaxpr          ClosedJaxpr of the per-device body
  axis_name      the collective axis name
  axis_size      number of program instances (= len(devices))
  devices        tuple of devices, in mesh order
  in_axes        tuple of int | None, one per operand
  out_axes       tuple of int | None, one per result
  donated_invars tuple of bool, one per operand
  name           the user function's name (for HLO and jaxpr printing)
"""
from __future__ import annotations

import contextlib
import threading

import jax

from pmapkit import _jax_private as jp

pmap_p = jp.Primitive("pmapkit_pmap")
pmap_p.multiple_results = True


_NO_MESH = jax.sharding.AbstractMesh((), ())


def no_mesh():
    """A context with no ambient mesh, to trace bodies that later run in
    programs with meshes of their own."""
    return jax.sharding.use_abstract_mesh(_NO_MESH)


class _PmapBodies(threading.local):
    """Axes ``(name, size)`` of the pmapkit pmap bodies being traced on this
    thread, outermost first (pmap pushes and pops them; pjit asks)."""

    def __init__(self):
        self.axes = []


pmap_bodies = _PmapBodies()


def in_pmap_body():
    """Whether a pmapkit pmap body is being traced on this thread."""
    return bool(pmap_bodies.axes)


@contextlib.contextmanager
def per_device_context(axis_name, axis_size):
    """The context a per-device body is traced (or re-traced) in: its axis
    bound, and no ambient mesh, so no enclosing jit's mesh is baked into the
    body's equations (the body later runs inside a manual SPMD region)."""
    with no_mesh(), jp.extend_axis_env_nd([(axis_name, axis_size)]):
        yield


def plain_avals(avals):
    """Per-device avals without any mesh: built inside
    ``per_device_context``, they carry no sharding of an enclosing jit."""
    return [jp.ShapedArray(a.shape, a.dtype, weak_type=a.weak_type) for a in avals]


def insert_axis(aval, axis, size):
    shape = list(aval.shape)
    shape.insert(axis, size)
    return aval.update(shape=tuple(shape))


def remove_axis(aval, axis):
    shape = list(aval.shape)
    del shape[axis]
    return aval.update(shape=tuple(shape))


def body_effects(jaxpr, axis_name):
    """Effects of a pmap equation: its body's, less collectives over its axis."""
    return jp.filter_named_axis_effects(jaxpr.effects, {axis_name})


def global_out_avals(jaxpr, axis_size, out_axes):
    return [a if ax is None else insert_axis(a, ax, axis_size)
            for a, ax in zip(jaxpr.out_avals, out_axes)]


def _pmap_abstract_eval(*in_avals, jaxpr, axis_name, axis_size, devices,
                        in_axes, out_axes, donated_invars, name):
    del in_avals, devices, in_axes, donated_invars, name
    return (global_out_avals(jaxpr, axis_size, out_axes),
            body_effects(jaxpr, axis_name))


pmap_p.def_effectful_abstract_eval(_pmap_abstract_eval)




# -- pjit ---------------------------------------------------------------------
# ``pjit_p`` carries a whole-program body (global shapes) and the shardings
# its operands and results must have on the mesh. Params:
#   jaxpr          ClosedJaxpr of the body
#   in_shardings   tuple of NamedSharding, one per operand
#   out_shardings  tuple of NamedSharding, one per result
#   donated_invars tuple of bool, one per operand
#   name           the user function's name
pjit_p = jp.Primitive("pmapkit_pjit")
pjit_p.multiple_results = True


def _pjit_abstract_eval(*in_avals, jaxpr, in_shardings, out_shardings,
                        donated_invars, name):
    del in_avals, in_shardings, out_shardings, donated_invars, name
    return list(jaxpr.out_avals), jaxpr.effects


pjit_p.def_effectful_abstract_eval(_pjit_abstract_eval)

