"""pmap: a ``jax.pmap`` becomes ``_pmap`` (``jax.jit`` of ``jax.shard_map`` over a
mesh of the devices, the body seeing each device's slice as classic pmap's did:
every ``in_axes``/``out_axes`` tree, ``static_broadcasted_argnums``,
``donate_argnums``, ``devices=``, keyword arguments, a pmap inside a pmap);
a pmap given ``backend=`` or ``axis_size=`` stays ``jax.pmap`` (JAX 0.10's
own) and the report says why; one given ``global_arg_shapes=`` (gone from
``jax.pmap``) is left with a comment.

Three spellings are rewritten: ``jax.pmap(f, ...)``, ``functools.partial(
jax.pmap, ...)`` and a bare ``@jax.pmap`` decorator."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, KeepPmap, LeaveAsIs

PMAP = "jax.pmap"
PARTIAL = ("functools.partial",)
_PARAMS = ("fun", "axis_name", "*", "in_axes", "out_axes", "static_broadcasted_argnums",
           "devices", "backend", "axis_size", "donate_argnums", "global_arg_shapes")
_UNSUPPORTED = {"backend": "backend= (the devices of a platform) is kept for jax.pmap",
                "axis_size": "axis_size= (a mapped size across processes) is kept for jax.pmap"}


def _check(bound):
    """KeepPmap (or LeaveAsIs) unless these pmap arguments fit ``_pmap``."""
    for name, what in _UNSUPPORTED.items():
        arg = bound.get(name)
        if arg is not None and sx.code(arg.value) not in ("()", "None", "[]"):
            raise KeepPmap(what)
    shapes = bound.get("global_arg_shapes")
    if shapes is not None and sx.code(shapes.value) not in ("()", "None", "[]"):
        raise LeaveAsIs("global_arg_shapes= is gone from jax.pmap (JAX 0.10 has none); drop it: "
                        "a pmap takes each process's local slice")


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
