"""Where the devices of a whole-mesh program meet for a ``call``.

In a jit/pjit program over several devices, a ``call`` runs the user's
function once, on one device (``device_index``). If that device failed
alone, the others would wait in the program's next collective until XLA:CPU
aborts the process; if it handed back zeros, the program would go on with a
made-up value. Instead every device reaches the call op (``_primitive``
lowers it as a manual region over all the program's devices): the caller
runs the function, the others wait here for its outcome, then every device
returns the caller's result or raises its error, at the same op.

The n-th arrival of a device matches the caller's n-th: the call is ordered
(its effect token orders the executions of programs with host callbacks on
every device the same way), so each device meets one op's runs in the same
order.
"""
from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from pmapkit.host_callback import _runtime

# How long a device waits for the caller to *start* the user's function
# before giving up (the caller's device failed before reaching the op, for a
# reason of its own). Once started, a function may take as long as it needs.
START_TIMEOUT_S = 300.0


class Meeting:
    """The meeting point of one call op of one compiled program."""

    def __init__(self, num_devices, caller):
        self.num_devices = num_devices
        self.caller = caller
        self.cond = threading.Condition()
        self.arrivals = [0] * num_devices
        self.started = -1      # the caller's latest run that started
        self.outcomes = {}     # run -> [ok, result or exception, readers left]

    def __call__(self, devices, invoke, partition_id, *flat):
        index = int(partition_id)
        with self.cond:
            run = self.arrivals[index]
            self.arrivals[index] += 1
            if index == self.caller:
                self.started = run
                self.cond.notify_all()
        if index == self.caller:
            return self._call(run, devices[index], invoke, flat)
        return self._wait(run, devices)

    def _call(self, run, device, invoke, flat):
        try:
            result = invoke(device, flat)
        except BaseException as exc:  # noqa: BLE001 - handed to every device
            self._post(run, False, exc)
            raise
        self._post(run, True, result)
        return result

    def _post(self, run, ok, value):
        with self.cond:
            if self.num_devices > 1:
                self.outcomes[run] = [ok, value, self.num_devices - 1]
            self.cond.notify_all()

    def _wait(self, run, devices):
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.cond:
            while run not in self.outcomes:
                if self.started >= run:
                    self.cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _runtime.CallbackException(
                        f"host_callback.call: device {devices[self.caller]} never "
                        f"started the call this device waits for (in "
                        f"{START_TIMEOUT_S:.0f} s); its computation failed "
                        "before it, or is stuck.")
                self.cond.wait(left)
            entry = self.outcomes[run]
            entry[2] -= 1
            if entry[2] == 0:
                del self.outcomes[run]
        ok, value = entry[0], entry[1]
        if ok:
            return tuple(np.array(a, copy=True) for a in value)
        raise _runtime.CallbackException(str(value)) from value.__cause__


class _Lowering(threading.local):
    """The whole-mesh call whose region is being lowered on this thread."""

    def __init__(self):
        self.mesh = None
        self.meeting = None


_lowering = _Lowering()


@contextlib.contextmanager
def meeting_region(mesh, meeting):
    """Lowering the region on ``mesh`` whose devices meet at ``meeting``."""
    previous = (_lowering.mesh, _lowering.meeting)
    _lowering.mesh, _lowering.meeting = mesh, meeting
    try:
        yield
    finally:
        _lowering.mesh, _lowering.meeting = previous


def meeting_for(mesh):
    """The meeting of the region on ``mesh`` being lowered; None if it is
    not such a region."""
    return _lowering.meeting if mesh is _lowering.mesh and mesh is not None else None
