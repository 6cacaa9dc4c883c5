"""pmap: a ``jax.pmap`` whose ``in_axes`` are 0/None and ``out_axes`` 0 becomes
``_pmap`` (``jax.jit`` of ``jax.shard_map`` over a 1-D mesh of the devices,
the body seeing each device's slice as classic pmap's did); other pmaps stay
``jax.pmap`` (JAX 0.10's own) and the report says why.

Three spellings are rewritten: ``jax.pmap(f, ...)``, ``functools.partial(
jax.pmap, ...)`` and a bare ``@jax.pmap`` decorator."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, KeepPmap

PMAP = "jax.pmap"
PARTIAL = ("functools.partial",)
_PARAMS = ("fun", "axis_name", "*", "in_axes", "out_axes", "static_broadcasted_argnums",
           "devices", "backend", "axis_size", "donate_argnums", "global_arg_shapes")
_UNSUPPORTED = {"static_broadcasted_argnums": "static_broadcasted_argnums",
                "backend": "backend=", "axis_size": "axis_size=",
                "global_arg_shapes": "global_arg_shapes="}


def _is_axis(node):
    """in_axes entries the rewrite keeps: the literals 0 and None."""
    return (isinstance(node, cst.Integer) and node.value == "0") or (
        isinstance(node, cst.Name) and node.value == "None")


def _check(bound):
    """KeepPmap unless these pmap arguments fit ``_pmap``."""
    for name, what in _UNSUPPORTED.items():
        arg = bound.get(name)
        if arg is not None and sx.code(arg.value) not in ("()", "None", "[]"):
            raise KeepPmap(f"{what} has no jax.shard_map spelling here")
    in_axes = bound.get("in_axes")
    if in_axes is not None:
        node = in_axes.value
        entries = ([e.value for e in node.elements]
                   if isinstance(node, (cst.Tuple, cst.List)) else [node])
        if not all(_is_axis(e) for e in entries):
            raise KeepPmap(f"in_axes={sx.one_line(sx.code(node))} is not 0/None per argument")
    out_axes = bound.get("out_axes")
    if out_axes is not None and sx.code(out_axes.value) != "0":
        raise KeepPmap(f"out_axes={sx.one_line(sx.code(out_axes.value))} is not 0")


def _bind(call, params):
    try:
        return sx.bind(call, params)
    except sx.Unbindable as exc:
        raise KeepPmap(str(exc)) from None


def pmap_call(ctx, original, updated):
    """``jax.pmap(f, ...)``."""
    bound = _bind(updated, _PARAMS)
    if "fun" not in bound:
        raise KeepPmap("a pmap without its function (pmap(axis_name=...)) is kept")
    _check(bound)
    ctx.need_helper(helpers.PMAP)
    return sx.code(updated.with_changes(func=cst.Name("_pmap")))


def partial_pmap(ctx, original, updated):
    """``functools.partial(jax.pmap, ...)``: None unless it is one."""
    if not updated.args or updated.args[0].keyword or updated.args[0].star:
        return None
    if ctx.qualname(original.args[0].value) != PMAP:
        return None
    rest = updated.with_changes(args=[cst.Arg(cst.Name("f"))] + list(updated.args[1:]))
    bound = _bind(rest, _PARAMS)
    _check(bound)
    ctx.need_helper(helpers.PMAP)
    args = list(updated.args)
    args[0] = args[0].with_changes(value=cst.Name("_pmap"))
    return sx.code(updated.with_changes(args=args))


def family():
    return Family("pmap", calls={PMAP: pmap_call})
