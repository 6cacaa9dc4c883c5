"""Deprecated modern spellings: names that still answer on JAX 0.10 but warn,
so a migrated file (run with DeprecationWarnings as errors) must not keep them.

``jax.experimental.shard_map.shard_map(f, mesh, in_specs, out_specs,
check_rep=..., auto=...)`` → ``jax.shard_map(f, mesh=..., in_specs=...,
out_specs=..., check_vma=..., axis_names=...)`` (the new one takes its
arguments by keyword; ``auto``, the axes left to the compiler, is the
complement of ``axis_names``), also through ``functools.partial``;
``check_rep=`` given to ``jax.shard_map`` itself becomes ``check_vma=``.
``from jax import partial`` (classic JAX re-exported it) is
``functools.partial``. ``jax.make_mesh(shape, names)`` without
``axis_types`` made ``Auto`` axes until JAX 0.10 made ``Explicit`` its
default: the migrated call says ``axis_types=`` (``Auto`` for each axis), so
it keeps its meaning. The drop-in renames JAX's own deprecation messages name
(``jax.core.Effect`` → ``jax.extend.core.Effect``, ...) come from
``deprecations`` in the transformer.
"""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs

SHARD_MAP = "jax.experimental.shard_map.shard_map"
MODERN_SHARD_MAP = "jax.shard_map"
_PARAMS = ("f", "mesh", "in_specs", "out_specs", "check_rep", "auto")
_ADVICE = "use jax.shard_map(f, mesh=..., in_specs=..., out_specs=..., check_vma=...)"


def _keyword(arg, name):
    """``arg`` as ``name=value``, its value and comma (and comments) as written."""
    return arg.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _modern_args(call, first_is_function=True):
    """The arguments of a classic shard_map call (``call``; without its
    function when ``first_is_function`` is False) for ``jax.shard_map``."""
    params = _PARAMS if first_is_function else _PARAMS[1:]
    try:
        bound = sx.bind(call, params)
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; {_ADVICE}") from None
    auto = bound.get("auto")
    axis_names = None
    if auto is not None and sx.code(auto.value) not in ("frozenset()", "set()", "()"):
        mesh = bound.get("mesh")
        if mesh is None or not isinstance(mesh.value, (cst.Name, cst.Attribute)):
            raise LeaveAsIs("auto= with a mesh that is not a plain name: pass "
                            "axis_names= (the mesh axes the body handles) to jax.shard_map")
        axis_names = (f"frozenset({sx.code(mesh.value)}.axis_names) - "
                      f"frozenset({sx.code(auto.value)})")
    args = []
    names = iter(params)
    for arg in call.args:
        name = arg.keyword.value if arg.keyword is not None else next(names)
        if arg.keyword is None and name != "f":
            arg = _keyword(arg, name)
        if name == "check_rep":
            arg = arg.with_changes(keyword=cst.Name("check_vma"))
        if name == "auto":
            if axis_names is None:
                continue        # an empty auto: every axis is the body's, the default
            arg = _keyword(arg, "axis_names").with_changes(value=sx.expr(axis_names))
        args.append(arg)
    if args and args[-1] is not call.args[-1]:
        # the last one written keeps the call's own ending (no stray comma)
        args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
    return args


def _shard_map(ctx, original, updated):
    args = _modern_args(updated)
    if not args or args[0].keyword is not None:
        raise LeaveAsIs(f"shard_map without its function first: {_ADVICE}")
    ctx.need_import("jax")
    return sx.code(updated.with_changes(func=sx.expr(MODERN_SHARD_MAP), args=args))


def partial_shard_map(ctx, original, updated):
    """``functools.partial(shard_map, mesh=..., ...)``: None unless it is one."""
    if not updated.args or updated.args[0].keyword or updated.args[0].star:
        return None
    if ctx.qualname(original.args[0].value) != SHARD_MAP:
        return None
    rest = updated.with_changes(args=list(updated.args[1:]))
    args = [updated.args[0].with_changes(value=sx.expr(MODERN_SHARD_MAP))]
    args += _modern_args(rest, first_is_function=False)
    ctx.need_import("jax")
    return sx.code(updated.with_changes(args=args))


def _modern_check_rep(ctx, original, updated):
    """``jax.shard_map(..., check_rep=...)``: the keyword is ``check_vma`` now."""
    if not any(a.keyword is not None and a.keyword.value == "check_rep" for a in updated.args):
        return None
    return sx.rewrite_call(updated, rename={"check_rep": "check_vma"})


MAKE_MESH = "jax.make_mesh"
_AUTO = "jax.sharding.AxisType.Auto"


def _make_mesh_axes(ctx, original, updated):
    """``jax.make_mesh(shape, names)``: its classic ``Auto`` axes written out
    (None when ``axis_types`` is given or the call cannot be read)."""
    try:
        bound = sx.bind(updated, ("axis_shapes", "axis_names", "axis_types", "*", "devices"))
    except sx.Unbindable:
        return None
    if "axis_types" in bound or "axis_shapes" not in bound:
        return None
    shape = bound["axis_shapes"].value
    if isinstance(shape, (cst.Tuple, cst.List)) and all(
            isinstance(e, cst.Element) for e in shape.elements):
        count = len(shape.elements)
        types = "(" + ", ".join([_AUTO] * count) + ("," if count == 1 else "") + ")"
    else:
        types = f"({_AUTO},) * len({sx.code(shape)})"
    last = updated.args[-1]
    if not isinstance(last.comma, cst.Comma):
        last = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    added = _keyword(cst.Arg(value=sx.expr(types)), "axis_types")
    ctx.need_import("jax")
    return sx.code(updated.with_changes(args=[*updated.args[:-1], last, added]))


def family():
    return Family(
        "modern",
        moves={"jax.partial": "functools.partial"},
        calls={SHARD_MAP: _shard_map, MODERN_SHARD_MAP: _modern_check_rep,
               MAKE_MESH: _make_mesh_axes},
        classic=("jax.experimental.shard_map",),
        reasons={"jax.experimental.shard_map": "deprecated in JAX 0.8: use jax.shard_map(f, "
                 "mesh=..., in_specs=..., out_specs=..., check_vma=...) (its arguments "
                 "by keyword)"})
