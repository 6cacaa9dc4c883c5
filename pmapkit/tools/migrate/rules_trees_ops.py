"""Trees and ops: the census's simple renames (``jax.tree_map`` → ``jax.tree.map``,
``jnp.DeviceArray`` → ``jax.Array``, ``jax.experimental.optimizers`` →
``jax.example_libraries.optimizers``, ...), ``from jax.config import config``,
``jax.ops.index_*``, ``lax.tie_in``, ``jax.random.shuffle`` and the
``jax.experimental.enable_x64``/``disable_x64`` context managers.

A census record (``pmapkit.legacy.names``) becomes a rename when its
``modern`` is a dotted name that exists on this JAX and is either the very
object ``pmapkit run`` serves the classic name with, or marked a drop-in
(``rename=True``); so a name added to the census with such a modern
spelling reaches ``pmapkit migrate`` without a change here.
"""
from __future__ import annotations

import functools
import importlib
import re

from pmapkit.legacy import names as census
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
_MISSING = object()


def resolve(dotted):
    """The object a dotted name names on this JAX, or ``_MISSING``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return _MISSING
        return obj
    return _MISSING


def census_rename(record):
    """The modern dotted name ``record`` is renamed to, or None."""
    if record.rename is False or not _DOTTED.fullmatch(record.modern):
        return None
    target = resolve(record.modern)
    if target is _MISSING:
        return None
    if record.rename:
        return record.modern
    if record.make is None:
        return None
    try:
        served = record.make()
    except Exception:
        return None
    return record.modern if served is target else None


def census_reason(record):
    return (f"removed in JAX {record.removed_in}; use {record.modern}, "
            f"e.g. {record.example}")


@functools.cache
def census_tables():
    """({classic name: modern dotted name}, {classic name: why it is left})."""
    moves, reasons = {}, {}
    for group in (census.NAMES, census.MODULES, census.REFUSED_NAMES, census.REFUSED_MODULES):
        for record in group:
            target = census_rename(record)
            if target is not None:
                moves[record.name] = target
            else:
                reasons[record.name] = census_reason(record)
    return moves, reasons


def _index_op(method):
    def rule(ctx, original, updated):
        bound = _bind(updated, ("x", "idx", "y", "indices_are_sorted", "unique_indices"))
        if not {"x", "idx", "y"} <= bound.keys():
            raise LeaveAsIs("needs x, idx and y: write x.at[idx]." + method + "(y)")
        idx = bound["idx"].value
        index = ctx.ops_index_slice(idx)
        index = sx.code(idx) if index is None else index
        extra = [(k, sx.value(bound, k)) for k in ("indices_are_sorted", "unique_indices")
                 if k in bound]
        return sx.call_text(f"{sx.atom(bound['x'].value)}.at[{index}].{method}",
                            [sx.code(bound["y"].value)], extra)
    return rule


def _tie_in(ctx, original, updated):
    bound = _bind(updated, ("x", "y"))
    if "y" not in bound:
        raise LeaveAsIs("tie_in(x, y) is y")
    return sx.atom(bound["y"].value)


def _shuffle(ctx, original, updated):
    bound = _bind(updated, ("key", "x", "axis"))
    if not {"key", "x"} <= bound.keys():
        raise LeaveAsIs("use jax.random.permutation(key, x, axis, independent=True)")
    ctx.need_import("jax")
    args = [sx.value(bound, "key"), sx.value(bound, "x")]
    if "axis" in bound:
        args.append(sx.value(bound, "axis"))
    return sx.call_text("jax.random.permutation", args, [("independent", "True")])


def _x64(value):
    """``jax.experimental.enable_x64(new_val=True)`` / ``disable_x64()`` →
    ``jax.enable_x64(flag)`` (a context manager on JAX 0.10)."""
    def rule(ctx, original, updated):
        if value is None:
            bound = _bind(updated, ("new_val",))
            flag = sx.value(bound, "new_val", "True")
        else:
            _bind(updated, ())
            flag = value
        ctx.need_import("jax")
        return f"jax.enable_x64({flag})"
    return rule


def _bind(call, params):
    try:
        return sx.bind(call, params)
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; rewrite it by hand") from None


def family():
    moves, reasons = census_tables()
    moves = dict(moves)   # the tree renames among them (census records)
    moves["jax.config.config"] = "jax.config"   # from jax.config import config
    calls = {f"jax.ops.{name}": _index_op(method)
             for name, method in census.INDEX_METHODS.items()}
    calls["jax.lax.tie_in"] = _tie_in
    calls["jax.random.shuffle"] = _shuffle
    calls["jax.experimental.enable_x64"] = _x64(None)
    calls["jax.experimental.disable_x64"] = _x64("False")
    reasons = dict(reasons)
    reasons.pop("jax.config", None)   # the module; jax.config the attribute is modern
    classic = tuple(reasons) + tuple(calls) + ("jax.ops.index",)
    reasons["jax.ops.index"] = "use a plain index expression with x.at[...]"
    for name in calls:
        if census.known(name):
            reasons.setdefault(name, census_reason(census.by_name(name)))
        else:
            reasons.setdefault(name, "removed from JAX: use jax.enable_x64(True/False)")
    return Family("trees/ops", moves=moves, calls=calls, classic=classic, reasons=reasons)
