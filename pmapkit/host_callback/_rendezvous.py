"""How the devices of a whole-mesh program of one process learn the outcome
of a ``call``.

In a jit/pjit program over several devices, a ``call`` runs the user's
function once, on one device (``device_index``). If that device failed
alone, the others would wait in the program's next collective until XLA:CPU
aborts the process; if it handed back zeros, the program would go on with a
made-up value. So the call is lowered as a region over all the program's
devices (``_whole_mesh``) where only the caller crosses into Python: its
function's failure does not fail its device there, it is kept
(``_runtime.caller_failures``) and its number travels with the result, gathered to every
device by XLA's collectives; a nonzero number makes every device raise it
(one crossing each, on failure only). A run without failure crosses into
Python once, as ``jax.pure_callback`` does.
"""
from __future__ import annotations

from pmapkit.core.programs import manual_regions
from pmapkit.host_callback import _runtime


def raise_failure(number, caller_device, num_devices):
    """Every device's step when the caller's run failed: raise its error."""
    got = _runtime.caller_failures.take(int(number), num_devices)
    if got is None:
        raise _runtime.CallbackException(
            f"host_callback.call failed on device {caller_device}; every device's "
            "computation fails with it.")
    exc, formatted = got
    raise _runtime.CallbackException(_runtime.report_message(exc, formatted)) from exc


# The caller-only call regions being lowered on this thread (their meshes).
_lowering = manual_regions.LoweringStack()


def caller_region(mesh):
    """Lowering the caller-only call region on ``mesh``."""
    return _lowering.on(mesh)


def is_caller_region(mesh):
    """Whether the region on ``mesh`` being lowered is a caller-only call's."""
    return _lowering.top() is mesh
