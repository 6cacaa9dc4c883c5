"""export: jax2tf's ``jax_export`` (2023) and ``jax.experimental.export``
(0.4.2x) → ``jax.export``: ``export(f)`` → ``jax.export.export(jax.jit(f))``
(``lowering_platforms=`` → ``platforms=``), ``serialize(exp)`` →
``exp.serialize()``, ``deserialize`` → ``jax.export.deserialize``,
``call_exported(exp)`` and ``call(exp)`` → ``exp.call``, ``symbolic_shape``/``Exported``."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs

MODULES = ("jax.experimental.jax2tf.jax_export", "jax.experimental.export")


def _bind(call, params, advice):
    try:
        return sx.bind(call, params)
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; {advice}") from None


_EXPORT_PARAMS = ("fun_jax", "*", "lowering_platforms", "platforms", "disabled_checks")


def _export(ctx, original, updated):
    bound = _bind(updated, _EXPORT_PARAMS,
                  "use jax.export.export(jax.jit(f), platforms=...)")
    if "fun_jax" not in bound:
        raise LeaveAsIs("export needs the function")
    ctx.need_import("jax")
    fun = bound["fun_jax"].value
    before = sx.bind(original, _EXPORT_PARAMS)["fun_jax"].value
    jitted = isinstance(before, cst.Call) and ctx.qualname(before.func) == "jax.jit"
    if not jitted and updated.args[0].keyword is not None:
        raise LeaveAsIs("export(fun_jax=...): use jax.export.export(jax.jit(f))")
    return sx.rewrite_call(updated, "jax.export.export",
                           {"lowering_platforms": "platforms"},
                           first=None if jitted else f"jax.jit({sx.code(fun)})")


def _serialize(ctx, original, updated):
    bound = _bind(updated, ("exported", "vjp_order"), "use exp.serialize()")
    if "exported" not in bound:
        raise LeaveAsIs("serialize needs the Exported")
    extra = [("vjp_order", sx.value(bound, "vjp_order"))] if "vjp_order" in bound else []
    return sx.call_text(f"{sx.atom(bound['exported'].value)}.serialize", [], extra)


def _call_exported(ctx, original, updated):
    bound = _bind(updated, ("exported",), "use exp.call(*args)")
    if "exported" not in bound:
        raise LeaveAsIs("call_exported needs the Exported")
    return f"{sx.atom(bound['exported'].value)}.call"


def _renamed(modern):
    def rule(ctx, original, updated):
        ctx.need_import("jax")
        return sx.code(updated.with_changes(func=sx.expr(modern)))
    return rule


def family():
    calls, moves = {}, {}
    for module in MODULES:
        calls[f"{module}.export"] = _export
        calls[f"{module}.serialize"] = _serialize
        calls[f"{module}.call_exported"] = _call_exported
        calls[f"{module}.call"] = _call_exported      # export.call(exp): exp.call
        calls[f"{module}.deserialize"] = _renamed("jax.export.deserialize")
        for name in ("symbolic_shape", "Exported", "DisabledSafetyCheck",
                     "default_export_platform", "symbolic_args_specs", "SymbolicScope",
                     "is_symbolic_dim"):
            moves[f"{module}.{name}"] = f"jax.export.{name}"
    reasons = {m: f"{m} is gone: use jax.export (export(jax.jit(f)), exp.call, "
               "exp.serialize(), jax.export.deserialize, symbolic_shape)" for m in MODULES}
    return Family("export", moves=moves, calls=calls, classic=MODULES, reasons=reasons)
