"""The checks at the end of a manual region that make a failed
``host_callback.call`` fail its computation on every device at once.

A ``call`` that fails in a region over several devices (a pmap body, a
``shard_map``) hands its device zeros and leaves the failure pending for
that device (``_runtime.PEND``): failing that device alone would leave the
others blocked in a later collective until XLA:CPU aborts the process. At
the end of the region, once the outputs are computed, each device takes its
pending failure (a callback after the body's callbacks: on their effect
token, or reading the outputs), the devices sum their counts (``psum``:
every device reaches it, outside any control flow of the body), and if any
failed each device raises: the computation fails everywhere, no device
waits, and every output reads as the error (the failing device's exception
chained; ``barrier_wait`` reports it too). pmapkit's runner of its own pmap
programs then waits for each run (``lowering``) and raises at the call.

``_region_checks`` appends the checks to every such region; ``_whole_mesh``
builds them into the region of a whole-mesh call over several processes.
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from pmapkit import _jax_private as jp
from pmapkit.core.lowering import lowering, manual_regions
from pmapkit.host_callback import _runtime
from pmapkit.host_callback._primitive import outside_call_p

_COUNT = jp.ShapedArray((), np.int32)


def has_call(jaxpr):
    """Whether ``jaxpr`` (at any depth) has a ``host_callback.call``."""
    for eqn in jaxpr.eqns:
        if eqn.primitive is outside_call_p and not eqn.params["identity"]:
            return True
        if any(has_call(sub) for sub in jp.jaxprs_in_params(eqn.params)):
            return True
    return False


class _Take:
    """Host side of the first check: this device's pending failure, moved to
    ``failed`` for the raising step; returns how many (0 or 1).

    ``seen`` keeps each device's failure for the devices of its region that
    did not fail (they report it) until every device of the region running
    in this process has raised (``_Raised``): one run's failure, never
    another program's or a later run's."""

    def __init__(self):
        self.failed = _runtime._PendingFailures()
        self.seen = _runtime._PendingFailures()
        self.raised = _Raised()

    def __call__(self, arg, device):
        got = _runtime.pending.take(device)
        if got is None:
            return np.int32(0)
        self.failed.put(device, *got)
        self.seen.put(device, *got)
        return np.int32(1)


class _Raised:
    """Per region (its devices), how many of its devices in this process
    have run the raising step of the current failed run."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def done(self, devices):
        """Count one device of ``devices``; True for the region's last."""
        local = sum(1 for d in devices if d.process_index == jax.process_index())
        key = tuple(devices)
        with self.lock:
            count = self.counts.get(key, 0) + 1
            if count < local:
                self.counts[key] = count
                return False
            self.counts.pop(key, None)
            return True


_take = _Take()
_TAKE = _runtime.CallbackWrapper(_take, False, True)


def _raise_if_failed(devices, total, index):
    if int(total) == 0:
        return np.int32(0)
    device = devices[int(index)]
    got = _take.failed.take(device)
    other = None
    if got is None:
        other = next((f for f in map(_take.seen.peek, devices) if f is not None), None)
    if _take.raised.done(devices):
        for d in devices:
            _take.seen.take(d)
    if got is not None:
        exc, formatted = got
        raise _runtime.CallbackException(_runtime.report_message(exc, formatted)) from exc
    exc, formatted = other or (None, None)
    raise _runtime.CallbackException(
        f"host_callback.call failed on {int(total)} other device(s) of this computation "
        f"(not on {device}); every device's computation fails with it. "
        + ("" if exc is None else _runtime.report_message(exc, formatted))) from exc


def checks(outs, axes, devices, ordered):
    """``outs`` of a manual region over ``axes`` (all its mesh's axes, the
    devices in ``devices`` order) with the checks after them."""
    tied = [i for i, o in enumerate(outs) if _plain(o)]
    # After the outputs are computed (so after every collective of the body).
    *vals, marker = jax.lax.optimization_barrier(
        (*[outs[i] for i in tied], jnp.zeros((), np.int32)))
    # The barrier is gone at run time: without the token of ordered calls,
    # only data orders the take after the body. It reads one element of
    # each output (a scalar to the host, whatever the output's size).
    after = [marker]
    if not ordered:
        after += [jnp.ravel(v)[:1] for v in vals if np.size(v)]
    count, = outside_call_p.bind(
        *after, callback=_TAKE,
        arg_treedef=jax.tree_util.tree_structure(tuple(after)),
        num_args=len(after), identity=False,
        result_treedef=jax.tree_util.tree_structure(0),
        flat_results_aval=(_COUNT,), transforms=(), device_index=0, ordered=ordered)
    total = jax.lax.psum(count, axes)

    def raise_here(t, i):
        # An effect of its own (unordered IO), so no DCE drops it.
        return io_callback(lambda t, i: _raise_if_failed(devices, t, i),
                           jax.ShapeDtypeStruct((), np.int32), t, i, ordered=False)
    # Only when some device failed (``total`` is the same on every device,
    # so all take the same branch): a run without failures calls back once
    # per device, not twice.
    done = jax.lax.cond(total > 0, raise_here, lambda t, i: t, total,
                        jax.lax.axis_index(axes))
    *vals, _ = jax.lax.optimization_barrier((*vals, done))
    outs = list(outs)
    for i, v in zip(tied, vals):
        outs[i] = v
    return outs


def is_checked(jaxpr):
    """Whether a region's body already ends with the checks."""
    return any(e.primitive is outside_call_p and e.params["callback"] is _TAKE
               for e in jaxpr.eqns)


def _plain(x):
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return isinstance(x, (int, float, complex, bool, np.number))
    return not (lowering.is_extended(x) or lowering.is_float0(x))


manual_regions.register_checked_body(has_call)
