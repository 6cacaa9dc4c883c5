"""Committed inputs laid out otherwise than a ``Sharding`` the caller gave.

0.4-era pjit and jax.jit refuse a committed array whose sharding differs
from a ``Sharding`` given for it in ``in_axis_resources`` / ``in_shardings``
(the caller said where it lives; moving it silently would hide the
mismatch). A ``PartitionSpec`` leaf is a layout on the call site's mesh, and
classic pjit repartitioned committed arrays to it: those are not checked.

``strict`` below is a per-flat-input tuple of flags: True where the input's
sharding came from a ``Sharding`` leaf. The check runs on the miss path and
in the hit path's fallback (an input whose sharding object is not one known
to lay it out as the program takes it), never on a hit.
"""
from __future__ import annotations

import jax

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import pmap_layouts


def _committed_here(x, want):
    """Whether ``x`` is a committed array that ``want`` governs: not this
    process's local data of a program across processes, nor a pmap's output
    (classic jit and pjit placed it as an uncommitted value, moving it)."""
    if not (isinstance(x, jax.Array) and not isinstance(x, jp.Tracer)
            and getattr(x, "committed", False)):
        return False
    if pmap_layouts.is_pmap_output(x.sharding):
        return False
    return want.is_fully_addressable or not x.is_fully_addressable


def on_other_devices(x, want):
    """Whether ``x`` is a committed array on devices ``want`` does not use."""
    return _committed_here(x, want) and x.sharding.device_set != want.device_set


def laid_out_otherwise(x, want):
    """Whether ``x`` is a committed array not laid out as ``want`` places it."""
    if not _committed_here(x, want) or x.is_deleted():
        return False
    try:
        return not x.sharding.is_equivalent_to(want, x.ndim)
    except Exception:  # noqa: BLE001 - shardings JAX cannot compare differ
        return True


def mismatch_error(want, x, what, compiled=False):
    """0.4 pjit's message (jax.jit's says 'jit' where it says 'pjit'); for
    an AOT-compiled call, 0.4's executable's and jax's."""
    if compiled:
        return ValueError(
            f"Array sharding does not match the input sharding. Got Array "
            f"sharding: {x.sharding} and xla sharding: {want} for arg shape: "
            f"{tuple(x.shape)}, arg type: {x.aval.str_short()} ({what}: "
            "Computation was compiled for input shardings that disagree with the "
            "shardings of arguments passed to it; move it with jax.device_put "
            "first).")
    return ValueError(
        "Sharding passed to pjit does not match the sharding on the respective "
        f"arg. Got pjit sharding: {want},\narg sharding: {x.sharding} for arg "
        f"shape: {tuple(x.shape)}, arg type: {x.aval.str_short()} ({what}: a "
        "committed array is not resharded to a Sharding given for it; move it "
        "with jax.device_put first, or give a PartitionSpec).")


def check(flat, in_shardings, strict, describe, compiled=False):
    """Raise for the first strict input laid out otherwise; ``describe(k)``
    names flat input ``k``."""
    if strict is None:
        return
    for k, (x, want, s) in enumerate(zip(flat, in_shardings, strict)):
        if s and laid_out_otherwise(x, want):
            raise mismatch_error(want, x, describe(k), compiled)


def leaf_check(in_shardings, strict, name, compiled=False):
    """``check(x, i)`` refusing flat input ``i`` when it is strict and laid
    out otherwise (as the miss path does), for the hit path's fallback and
    its mover; None where no input is strict."""
    if strict is None or not any(strict):
        return None

    def check(x, i):
        if strict[i] and laid_out_otherwise(x, in_shardings[i]):
            raise mismatch_error(in_shardings[i], x, f"flat argument {i} of {name}",
                                 compiled)

    return check


def guard(fastpath, check):
    """``fastpath`` with ``check(x, i)`` run on every input the hit path
    cannot pass as is, before the resharding fallback or the mover moves it."""
    if check is None:
        return fastpath
    fallback = fastpath.shard_fallback

    def shard_fallback(x, i):
        check(x, i)
        return fallback(x, i)

    fastpath.shard_fallback = shard_fallback
    if getattr(fastpath, "mover", None) is not None:
        fastpath.mover = fastpath.mover.checking(check)
    return fastpath
