"""Lowering pmapkit's primitives for N devices.

``pmap_p`` lowers to an SPMD region whose mapped axis is manual: each device
runs the per-device body on its slice (a shard_map over the pmap's mesh,
nested in whatever program is being lowered). ``pjit_p`` lowers to its body
between sharding constraints on its operands and results (automatic SPMD
partitioning does the rest). Compiling a top-level program of either is
``compiling``'s; the program and its fast-path data are ``compiled_program``'s.
"""
from __future__ import annotations

import contextlib
import re
import threading

import jax
import numpy as np
from jax.interpreters import mlir
from jax.sharding import Mesh

from pmapkit import _jax_private as jp
# The transformation rules of pmap_p and pjit_p: every module that binds
# them reaches this one (through ``compiling``, which also registers their
# eager impl rules), so they are in place before JAX sees either.
from pmapkit.core import rules as _rules  # noqa: F401
from pmapkit.core.lowering import jit_of_pmap, manual_regions
from pmapkit.core.lowering.nested_pmaps import nested_pmap_axes
from pmapkit.core.rules.primitives import pjit_p, pmap_p
from pmapkit.core.sharding import axis_names
from pmapkit.core.sharding.specs import axis_spec

_shard_map = jax.shard_map

def is_extended(aval):
    """A dtype with a physical representation of its own (PRNG keys)."""
    return jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)


def is_float0(aval):
    return aval.dtype == jax.dtypes.float0


def pmap_mesh(params):
    """The device mesh of a top-level pmap: its own axis first, then the axes
    of the pmaps nested in its body (one device per program instance)."""
    inner = nested_pmap_axes(params["jaxpr"].jaxpr, pmap_p)
    names = (params["axis_name"], *[n for n, _ in inner])
    shape = (params["axis_size"], *[s for _, s in inner])
    devices = np.array(params["devices"], dtype=object).reshape(shape)
    return Mesh(devices, tuple(map(axis_names.mesh_name, names)))


def _user_names(params):
    """The axis names of a top-level pmap and of the pmaps nested in it, as
    the user gave them."""
    inner = nested_pmap_axes(params["jaxpr"].jaxpr, pmap_p)
    return (params["axis_name"], *[n for n, _ in inner])


def _enclosing_mesh(ctx, axis_name, shown):
    mesh = getattr(ctx.module_context.axis_context, "mesh", None)
    if mesh is None or axis_name not in mesh.axis_names:
        raise ValueError(
            f"pmapkit: a nested pmap over axis {shown!r} can only be "
            "lowered inside the pmap that encloses it.")
    return mesh


class _Depth(threading.local):
    """A nesting depth on this thread."""

    def __init__(self):
        self.depth = 0


# Depth of pmapkit's own jits around a pmap.
_quiet_jits = _Depth()


@contextlib.contextmanager
def own_jit_of_pmap():
    """A block where pmapkit itself lowers pmaps in a jit (a pmap's own
    program, the jit an eager transformation binds it in, export): not the
    user's jit-of-pmap, so no warning."""
    _quiet_jits.depth += 1
    try:
        yield
    finally:
        _quiet_jits.depth -= 1


_MODULE_NAME_UNSAFE = re.compile(r"[^\w.-]")  # as MLIR module names sanitize


def _own_module_names(name):
    # The module names of ``_program``'s jit for a pmap named ``name`` or
    # anything it was derived from (``transpose(jvp(foo))``: foo, jvp(foo)...).
    names = set()
    while True:
        names.add(_MODULE_NAME_UNSAFE.sub("_", f"jit_pmap_{name}").rstrip("_"))
        head, sep, rest = name.partition("(")
        if not sep or not rest.endswith(")") or not head.isidentifier():
            return names
        name = rest[:-1]


def _warn_jit_of_pmap(ctx, name):
    # Classic pmap warned where a jit containing it was lowered (once per
    # compile), only when it used several devices; tracing alone
    # (make_jaxpr, an eager linearize) was silent.
    if _quiet_jits.depth:
        return
    module = str(ctx.module_context.module.operation.attributes["sym_name"]).strip('"')
    if module in _own_module_names(name):
        # The jit pmapkit binds the pmap in (``_program``), lowered by an
        # eager transformation outside any user jit (the transpose of eager
        # grad): pmapkit's own. (A user's jit named ``pmap_foo`` around a
        # pmap of ``foo`` is taken for it too, and does not warn.)
        return
    # The module is named jit_<sanitized function name>; the message names
    # the function as JAX's did: jit(foo), jit(<lambda>).
    fun = module[len("jit_"):] if module.startswith("jit_") else module
    fun = "<lambda>" if fun == "_lambda" else fun
    jit_of_pmap.warn(fun, name, stacklevel=2)


def checks_at_end(params):
    """Whether a top-level pmap's region ends with checks that may fail the
    run on every device (``manual_regions.register_checked_body``): several
    devices, no nested pmaps. pmapkit's runner then waits for each run and
    raises at the call (``_TokenedExecutable``)."""
    return (params["devices"] is not None and params["axis_size"] > 1
            and len(pmap_mesh(params).axis_names) == 1
            and manual_regions.ends_with_checks(params["jaxpr"].jaxpr))


def _pmap_lowering(ctx, *args, jaxpr, axis_name, axis_size, devices, in_axes,
                   out_axes, donated_invars, name):
    params = dict(jaxpr=jaxpr, axis_name=axis_name, axis_size=axis_size,
                  devices=devices)
    del donated_invars
    if devices is not None and axis_size > 1:
        _warn_jit_of_pmap(ctx, name)
    # Names that are not strings become the mesh's (the enclosing pmap's
    # lowering already renamed its nested pmaps' bodies).
    shown = axis_name
    renaming = axis_names.renaming(
        (axis_name,) if devices is None else _user_names(params))
    if renaming:
        jaxpr = axis_names.renamed(jaxpr, renaming)
        axis_name = renaming.get(axis_name, axis_name)
    # A nested pmap (devices=None) runs on the mesh its enclosing pmap built.
    mesh = (_enclosing_mesh(ctx, axis_name, shown) if devices is None
            else pmap_mesh(params))
    if len(mesh.axis_names) > 1:
        # Nested pmaps: no effect token may enter their manual regions.
        jaxpr = manual_regions.nested_body(jaxpr)
    # An unmapped output (out_axes None) leaves the manual region as each
    # device's own value, with no collective: reading it gives the first
    # device's (classic pmap, and jax.pmap's out_specs P() without checks).
    in_specs = tuple(axis_spec(axis_name, ax) for ax in in_axes)
    out_specs = tuple(axis_spec(axis_name, ax) for ax in out_axes)

    def per_device(*xs):
        xs = [x if ax is None else jax.lax.squeeze(x, (ax,))
              for x, ax in zip(xs, in_axes)]
        outs = jp.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs)
        return tuple(o if ax is None else jax.lax.expand_dims(o, (ax,))
                     for o, ax in zip(outs, out_axes))

    shard_mesh = mesh

    def spmd(*xs):
        return _shard_map(per_device, mesh=shard_mesh, in_specs=in_specs,
                          out_specs=out_specs, check_vma=False,
                          axis_names={axis_name})(*xs)

    lower = mlir.lower_fun(spmd, multiple_results=True)
    if devices is None:
        # Nested: the enclosing pmap's axes are manual here; collectives over
        # them (axis_index of an outer axis) read that from the abstract mesh.
        manual = getattr(ctx.module_context.axis_context, "manual_axes", frozenset())
        shard_mesh = mesh.abstract_mesh.update_axis_types(
            {n: jax.sharding.AxisType.Manual for n in manual})
        with jax.sharding.use_abstract_mesh(shard_mesh):
            return lower(ctx, *args)
    with manual_regions.lowering_on(mesh):  # rules in nested regions read it
        return lower(ctx, *args)


mlir.register_lowering(pmap_p, _pmap_lowering)


def _pjit_lowering(ctx, *args, jaxpr, in_shardings, out_shardings,
                   donated_invars, name):
    del donated_invars, name

    def constrained(*xs):
        # A None sharding is left to the partitioner (pjit without in/out specs).
        xs = [x if s is None else jax.lax.with_sharding_constraint(x, s)
              for x, s in zip(xs, in_shardings)]
        outs = jp.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs)
        return tuple(o if s is None else jax.lax.with_sharding_constraint(o, s)
                     for o, s in zip(outs, out_shardings))

    return mlir.lower_fun(constrained, multiple_results=True)(ctx, *args)


mlir.register_lowering(pjit_p, _pjit_lowering)
