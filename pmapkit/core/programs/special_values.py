"""``jax_debug_nans`` / ``jax_debug_infs`` for pmapkit's programs.

With either flag on, every program of ours that runs at top level has its
outputs checked (the dispatch core sends such calls to Python, see
``arm_special_checks``; the miss path and the impl rules end in
``CompiledProgram.run_flat``, which calls ``check_outputs``). An invalid
value raises ``FloatingPointError`` saying where it is (output, mapped index
or device) and, as ``jax.jit`` does, which operation made it: the program is
re-run de-optimized, operation by operation, each of which JAX checks.
Nested in an outer ``jax.jit`` our equations are part of JAX's program, whose
own check re-runs the function eagerly, and so reaches this one.
"""
from __future__ import annotations

import contextlib

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.core.hitpath._compiled import dispatch as _dispatch_mod
from pmapkit.core.lowering.nested_pmaps import nested_pmap_axes
from pmapkit.core.rules.primitives import pjit_p, pmap_p


def checks_on():
    """Whether JAX's debug_nans or debug_infs is on (on this thread)."""
    return jp.debug_nans.value or jp.debug_infs.value


def _arm():
    _dispatch_mod.arm_special_checks((jp.debug_nans, jp.debug_infs))


# Until either flag is first turned on the hit path does not read them;
# after, it reads both per call (about 0.1-0.2 us) for the rest of the
# process, as a thread may still hold one on in a ``with`` block.
jp.when_turned_on(jp.debug_nans, _arm)
jp.when_turned_on(jp.debug_infs, _arm)


def rearm_from_flags():
    """Stop the per-call read if neither flag is on now. For harnesses (the
    benchmarks) that turned the flags on and off again and know that no
    thread holds either on in a ``with`` block."""
    if checks_on():
        _arm()
    else:
        _dispatch_mod.arm_special_checks(None)


def unchecked_by_jax():
    """A block where JAX's own runner does not check outputs (pmapkit does,
    after, with a message that says where and re-runs de-optimized; JAX's
    compiled runner raises an internal exception instead)."""
    if not checks_on():
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(jp.debug_nans(False))
    stack.enter_context(jp.debug_infs(False))
    return stack


def check_outputs(primitive, params, args, outs):
    """Raise ``FloatingPointError`` if an output of the program running
    ``primitive`` with ``params`` on ``args`` holds a value the flags look
    for (call only when ``checks_on()``)."""
    found = _find_special(outs)
    if found is None:
        return
    kind, k, devices = found
    api = "pmap" if primitive is pmap_p else "pjit"
    what = f"{api} of {params['name']}"
    where = (f"Invalid value ({kind}) encountered in sharded computation: output "
             f"{k} of {what} holds it {_location(primitive, params, devices)}")
    try:
        _DEOPTIMIZED[primitive](params, args)
    except (FloatingPointError, ZeroDivisionError) as exc:
        raise FloatingPointError(
            f"{exc} (found by re-running {what} de-optimized, operation by "
            f"operation). {where}.") from None
    except Exception as exc:  # noqa: BLE001 - the location is still worth telling
        why = (f"pmapkit could not re-run {what} de-optimized to name the "
               f"operation that produced it ({type(exc).__name__}: {exc})")
    else:
        why = (f"Because jax_debug_nans and/or jax_debug_infs is set, pmapkit "
               f"re-ran {what} de-optimized (operation by operation) to name "
               "the operation that produced it, but that run produced no "
               "invalid value: compiler optimizations may make values the "
               "de-optimized program does not, or the value came in as an "
               "input or a literal")
    raise FloatingPointError(f"{where}. {why}.")


def _find_special(outs):
    """``(kind, output index, devices holding it)`` of the first output with
    a NaN (debug_nans) or an infinity (debug_infs), checked per device (an
    unmapped pmap output holds a value of its own on each), or None."""
    nans = jp.debug_nans.value
    infs = jp.debug_infs.value
    for k, out in enumerate(outs):
        dtype = getattr(out, "dtype", None)
        if dtype is None or not jax.dtypes.issubdtype(dtype, np.inexact):
            continue
        by_kind = {"nan": [], "inf": []}
        for shard in out.addressable_shards:
            value = np.asarray(shard.data)
            if nans and np.isnan(value).any():
                by_kind["nan"].append(shard.device)
            elif infs and np.isinf(value).any():
                by_kind["inf"].append(shard.device)
        for kind in ("nan", "inf"):
            if by_kind[kind]:
                return kind, k, by_kind[kind]
    return None


def _location(primitive, params, devices):
    """Where the value is: mapped indices (a top-level pmap; nested pmaps
    make them tuples, outermost first) or devices, with their ids."""
    ids = [d.id for d in devices]
    if primitive is pmap_p and params["devices"] is not None:
        order = list(params["devices"])
        shape = (params["axis_size"],
                 *[s for _, s in nested_pmap_axes(params["jaxpr"].jaxpr, pmap_p)])
        indices = [tuple(int(i) for i in np.unravel_index(order.index(d), shape))
                   for d in devices]
        shown = [str(i[0]) if len(i) == 1 else str(i) for i in indices]
        what = "mapped index" if len(shown) == 1 else "mapped indices"
        return f"at {what} {_listed(shown)} (device{_plural(ids)} {_listed(ids)})"
    return f"on device{_plural(ids)} {_listed(ids)}"


def _plural(items):
    return "s" if len(items) > 1 else ""


def _listed(items, most=8):
    shown = ", ".join(str(i) for i in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


# -- de-optimized re-runs -------------------------------------------------------
def _deoptimized_pmap(params, args):
    """The pmap as a vmap over its mapped axis, evaluated eagerly: one
    operation at a time (each JAX checks), collectives included."""
    body = params["jaxpr"]

    def per_instance(*xs):
        return _eval_unrolled(body.jaxpr, body.consts, xs)

    return jp.vmap(per_instance, in_axes=params["in_axes"], out_axes=0,
                    axis_name=params["axis_name"],
                    axis_size=params["axis_size"])(*args)


def _eval_unrolled(jaxpr, consts, args):
    """``eval_jaxpr`` whose nested pmaps are de-optimized too."""
    env = {}

    def read(v):
        return v.val if isinstance(v, jp.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive is pmap_p:
            outs = _deoptimized_pmap(eqn.params, invals)
        else:
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(
                    *invals, **eqn.primitive.get_bind_params(eqn.params))
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _deoptimized_pjit(params, args):
    body = params["jaxpr"]
    return jp.eval_jaxpr(body.jaxpr, body.consts, *args)


_DEOPTIMIZED = {pmap_p: _deoptimized_pmap, pjit_p: _deoptimized_pjit}
