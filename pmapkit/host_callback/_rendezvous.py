"""How the devices of a whole-mesh program of one process learn the outcome
of a ``call``.

In a jit/pjit program over several devices, a ``call`` runs the user's
function once, on one device (``device_index``). If that device failed
alone, the others would wait in the program's next collective until XLA:CPU
aborts the process; if it handed back zeros, the program would go on with a
made-up value. So the call runs on the caller only, as ``jax.pure_callback``
runs (``_whole_mesh``), but its function's failure does not fail its device:
it is kept (``_runtime.caller_failures``) and its number comes after the
results, which XLA hands to every device; a nonzero number makes every
device raise it (crossing into Python then only). A run without failure
crosses into Python once.
"""
from __future__ import annotations

from pmapkit.core.lowering import manual_regions
from pmapkit.host_callback import _runtime


def raise_failure(number, caller_device):
    """Every device's step when the caller's run failed: raise its error."""
    got = _runtime.caller_failures.take(int(number))
    if got is None:
        raise _runtime.CallbackException(
            f"host_callback.call failed on device {caller_device}; every device's "
            "computation fails with it.")
    exc, formatted = got
    raise _runtime.CallbackException(_runtime.report_message(exc, formatted)) from exc


# Whether the whole-mesh call being lowered on this thread is its caller's op.
_lowering = manual_regions.LoweringStack()


def caller_op():
    """Lowering a whole-mesh call's op on its caller (``_whole_mesh``)."""
    return _lowering.on(True)


def lowering_caller_op():
    """Whether the call being lowered is a whole-mesh call's caller op."""
    return _lowering.top() is True
