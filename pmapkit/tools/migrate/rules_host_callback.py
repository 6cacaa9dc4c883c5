"""host_callback, keeping its classic order: ``id_tap`` → ``_id_tap`` (an
ordered ``io_callback``: taps one at a time, in program order; the tap
function keeps its ``(arg, transforms)`` signature and the tapped value is
returned), ``id_print`` → ``_id_print`` (the same, printing), ``call`` →
``_host_call`` (an ordered ``io_callback`` with ``result_shape``: it runs
whether its result is used or not), ``call_with_device=True`` where the
callback, a function of the file, uses its ``device`` only for ``device.id``
(``jax.lax.axis_index`` says which device of the migrated pmap runs it),
``barrier_wait`` → ``jax.effects_barrier``."""
from __future__ import annotations

import libcst as cst

from pmapkit.tools.migrate import helpers
from pmapkit.tools.migrate import syntax as sx
from pmapkit.tools.migrate.base import Family, LeaveAsIs

MODULE = "jax.experimental.host_callback"
_CHOSEN_DEVICES = ("this file maps a pmap over devices= it chooses: the migrated code names a "
                   "device by its index among jax.local_devices() only")
_NO_DEVICE = ("jax.debug.callback does not say which device runs it: pass "
              "jax.lax.axis_index(axis) as an argument inside a shard_map instead")


def _bind(call, params, advice):
    try:
        return sx.bind(call, params)
    except sx.Unbindable as exc:
        raise LeaveAsIs(f"{exc}; {advice}") from None


def _flag(bound, name, why):
    arg = bound.get(name)
    if arg is not None and sx.code(arg.value) not in ("False", "0", "None"):
        raise LeaveAsIs(why)


def _id_tap(ctx, original, updated):
    bound = _bind(updated, ("tap_func", "arg", "*", "result", "tap_with_device",
                            "device_index", "callback_flavor"),
                  "use jax.debug.callback(lambda v: tap(v, ()), arg)")
    _flag(bound, "device_index", "device_index picks one device's tap; jax.debug.callback "
          "runs once in jit, once per device in shard_map")
    if "callback_flavor" in bound:
        raise LeaveAsIs("callback_flavor=: choose jax.debug.callback, "
                        "jax.experimental.io_callback or jax.pure_callback yourself")
    if not {"tap_func", "arg"} <= bound.keys():
        raise LeaveAsIs("needs tap_func and arg")
    _with_device(ctx, bound, "tap_with_device")
    ctx.need_helper(helpers.ID_TAP)
    return sx.rewrite_call(updated, "_id_tap")


def _id_print(ctx, original, updated):
    for arg in updated.args:
        if arg.star:
            raise LeaveAsIs("**kwargs can't be read statically; use jax.debug.print")
    bound = {a.keyword.value if a.keyword else "arg": a for a in updated.args}
    if len([a for a in updated.args if a.keyword is None]) != 1:
        raise LeaveAsIs("id_print takes one positional argument")
    _flag(bound, "device_index", "device_index picks one device's print; use "
          "jax.debug.print")
    for name in ("output_stream", "threshold", "callback_flavor"):
        if name in bound:
            raise LeaveAsIs(f"{name}= has no jax.debug.print equivalent: print from "
                            "jax.debug.callback yourself")
    _with_device(ctx, bound, "tap_with_device")
    ctx.need_helper(helpers.ID_PRINT)
    return sx.rewrite_call(updated, "_id_print")


def _with_device(ctx, bound, name):
    """LeaveAsIs where ``name`` asks for the device and this file chooses a pmap's devices."""
    arg = bound.get(name)
    if (arg is not None and sx.code(arg.value) not in ("False", "0", "None")
            and ctx.plans["pmap"].pmap_over_chosen_devices):
        raise LeaveAsIs(f"{name}=True: {_CHOSEN_DEVICES}")


def _device_used_for_its_id(ctx, callback):
    """Whether ``callback`` names a function of the module whose ``device``
    parameter is read only as ``device.id``."""
    if not isinstance(callback, cst.Name):
        return False
    fn = ctx.function_named(callback.value)
    if fn is None:
        return False
    params = fn.params
    if not any(p.name.value == "device" for p in list(params.params) + list(params.kwonly_params)):
        return False
    uses = [node for node in ctx.walk(fn.body, (cst.Name, cst.Attribute))]
    ids = {id(n.value) for n in uses if isinstance(n, cst.Attribute) and n.attr.value == "id"}
    names = [n for n in uses if isinstance(n, cst.Name) and n.value == "device"]
    return bool(names) and all(id(n) in ids for n in names)


def _call(ctx, original, updated):
    bound = _bind(updated, ("callback_func", "arg", "*", "result_shape", "call_with_device",
                            "device_index", "callback_flavor"),
                  "use jax.pure_callback(f, result_shape, arg)")
    with_device = bound.get("call_with_device")
    with_device = with_device is not None and sx.code(with_device.value) not in (
        "False", "0", "None")
    _with_device(ctx, bound, "call_with_device")
    if with_device and not _device_used_for_its_id(ctx, bound["callback_func"].value
                                                   if "callback_func" in bound else None):
        raise LeaveAsIs(f"call_with_device=True where the callback uses the device for more "
                        f"than its id (or is not a function of this file): {_NO_DEVICE}")
    _flag(bound, "device_index", "device_index picks one device's call; use "
          "jax.pure_callback (once per device in shard_map)")
    if "callback_flavor" in bound:
        raise LeaveAsIs("callback_flavor=: choose jax.pure_callback or "
                        "jax.experimental.io_callback yourself")
    shape = bound.get("result_shape")
    if shape is None or sx.code(shape.value) in ("None", "()"):
        raise LeaveAsIs("a call with no result: use jax.debug.callback(f, arg) (or "
                        "jax.experimental.io_callback for an ordered side effect)")
    if not {"callback_func", "arg"} <= bound.keys():
        raise LeaveAsIs("needs callback_func and arg")
    ctx.need_helper(helpers.HOST_CALL)
    extra = [("with_device", "True")] if with_device else []
    return sx.call_text("_host_call", [sx.value(bound, "callback_func"), sx.value(bound, "arg"),
                                       sx.code(shape.value)], extra)


def _barrier_wait(ctx, original, updated):
    if any(a.keyword is None or a.keyword.value != "logging_name" for a in updated.args):
        raise LeaveAsIs("barrier_wait takes only logging_name; use jax.effects_barrier()")
    ctx.need_import("jax")
    return "jax.effects_barrier()"


def family():
    return Family(
        "host_callback",
        calls={f"{MODULE}.id_tap": _id_tap, f"{MODULE}.id_print": _id_print,
               f"{MODULE}.call": _call, f"{MODULE}.barrier_wait": _barrier_wait},
        classic=(MODULE,),
        reasons={MODULE: "jax.experimental.host_callback is gone: use jax.debug.callback, "
                 "jax.debug.print, jax.pure_callback, jax.effects_barrier"})
