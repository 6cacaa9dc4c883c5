"""Where the devices of a whole-mesh program of one process meet for a
``call``.

In a jit/pjit program over several devices, a ``call`` runs the user's
function once, on one device (``device_index``). If that device failed
alone, the others would wait in the program's next collective until XLA:CPU
aborts the process; if it handed back zeros, the program would go on with a
made-up value. Instead every device reaches the call op (``_whole_mesh``
lowers it as a manual region over all the program's devices, the operand
replicated to each): the caller runs the function, the others wait here for
its outcome, then every device returns the caller's result or raises its
error, at the same op.

A waiting device takes the outcome of the caller's run on the same operand
(every device holds the whole operand, bit for bit): executions dispatched
from several threads may reach the devices in different orders, and the
operand is what tells one run from another. Two runs on equal operands give
their outcomes in the order the caller finished them.
"""
from __future__ import annotations

import collections
import threading
import time

import numpy as np

from pmapkit.core.programs import manual_regions
from pmapkit.host_callback import _runtime

# How long a device waits for the caller to *start* the user's function on
# its operand before giving up (the caller's device failed before reaching
# the op, for a reason of its own). Once started, a function may take as
# long as it needs.
START_TIMEOUT_S = 300.0


def _operand_key(flat):
    arrays = [np.asarray(a) for a in flat]
    return tuple((a.shape, a.dtype.str, a.tobytes()) for a in arrays)


class Meeting:
    """The meeting point of one call op of one compiled program."""

    def __init__(self, num_devices, caller):
        self.num_devices = num_devices
        self.caller = caller
        self.cond = threading.Condition()
        self.started = collections.Counter()   # operand -> runs in the function
        self.outcomes = {}   # operand -> [[ok, result or exception, devices read]]

    def __call__(self, devices, invoke, partition_id, *flat):
        index = int(partition_id)
        key = _operand_key(flat)
        if index == self.caller:
            return self._call(key, devices[index], invoke, flat)
        return self._wait(key, index, devices)

    def _call(self, key, device, invoke, flat):
        with self.cond:
            self.started[key] += 1
            self.cond.notify_all()
        try:
            result = invoke(device, flat)
        except BaseException as exc:  # noqa: BLE001 - handed to every device
            self._post(key, False, exc)
            raise
        self._post(key, True, result)
        return result

    def _post(self, key, ok, value):
        with self.cond:
            self.started[key] -= 1
            if not self.started[key]:
                del self.started[key]
            self.outcomes.setdefault(key, []).append([ok, value, set()])
            self.cond.notify_all()

    def _wait(self, key, index, devices):
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.cond:
            while True:
                entry = next((e for e in self.outcomes.get(key, ()) if index not in e[2]),
                             None)
                if entry is not None:
                    break
                if self.started[key]:
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
            entry[2].add(index)
            if len(entry[2]) == self.num_devices - 1:
                runs = [e for e in self.outcomes[key] if e is not entry]
                if runs:
                    self.outcomes[key] = runs
                else:
                    del self.outcomes[key]
        ok, value = entry[0], entry[1]
        if ok:
            return tuple(np.array(a, copy=True) for a in value)
        raise _runtime.CallbackException(str(value)) from value.__cause__


# The whole-mesh call regions being lowered on this thread: (mesh, meeting).
_lowering = manual_regions.LoweringStack()


def meeting_region(mesh, meeting):
    """Lowering the region on ``mesh`` whose devices meet at ``meeting``."""
    return _lowering.on((mesh, meeting))


def meeting_for(mesh):
    """The meeting of the region on ``mesh`` being lowered; None if it is
    not such a region."""
    top = _lowering.top()
    return top[1] if top is not None and top[0] is mesh else None
