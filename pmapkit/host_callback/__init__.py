"""``pmapkit.host_callback``: the classic ``jax.experimental.host_callback``.

``id_tap``/``id_print`` call a Python function on the host with runtime
values and return their argument unchanged; ``call`` returns what the host
function computed, of a declared shape; ``barrier_wait`` waits for the
callbacks issued so far (taps; see below for ``call``) and raises
``CallbackException`` if one failed. They
work eagerly, under ``jax.jit``, ``vmap`` (the tap sees the batched value and
a ``("batch", {"batch_dims": ...})`` transform), ``jvp``/``grad`` (the tap
fires once, on primal values; a tap on tangents taps their cotangents when
transposed, with a ``("transpose", {})`` transform), ``checkpoint`` (it fires
again when rematerialized), control flow, ``pmapkit.pmap`` (once per device,
with that device's slice; in nested pmaps too) and ``pmapkit.pjit`` (once,
with the whole operand). A failing tap never stops the device computation:
its exception waits for ``barrier_wait``. A failing ``call`` (its function
raises, or returns another shape or dtype) fails its computation and never
hands back a value: in a program on one device the caller gets the error
(as from ``jax.pure_callback`` in the same place: JAX's runtime error, or
the ``ValueError`` of JAX's C++ dispatch path, whose message carries the
``CallbackException`` and the original error); in a whole-mesh program
(``jax.jit``, ``pmapkit.pjit``) over several devices every device raises it
at the call; in a ``pmapkit.pmap`` (also inside the user's ``jax.jit``),
nested pmaps and a user's ``jax.shard_map`` every device of the region
fails at its end (one failing alone would leave the others blocked in a
collective until XLA:CPU aborts); over several processes every process's
computation fails. ``barrier_wait`` raises it too, in every case.

Callbacks from one device run in program order. A ``call`` made directly
in the body of a ``jax.jit`` (not in a pmap body or a ``shard_map``, nor in
a ``scan``/``cond``/``while`` body there), or eagerly, is ordered within its
program only: its program carries no effect token, so it dispatches as
cheaply as one with ``jax.pure_callback``; wait for its result, not for
``barrier_wait``, to know it ran.

``LEGACY_SEMANTICS`` is True: these are the semantics of the classic
module's legacy implementation (``JAX_HOST_CALLBACK_LEGACY=True``, its
default through its last release): taps see ``transforms``, ``call`` does
not batch under ``vmap``, errors are reported by ``barrier_wait``. Code (and
JAX's own test suite) that branches on the classic
``_HOST_CALLBACK_LEGACY`` flag should read this.

In a multi-process run a callback runs in the process owning the device that
issues it: under a pmap spanning processes, once per local device with its
slice; in a whole-mesh program, in the process owning ``device_index``.
``barrier_wait`` waits for this process's callbacks only (no cross-process
barrier; use ``multihost_utils.sync_global_devices`` for that).

Code written for the classic module runs with only the import changed::

    from pmapkit import host_callback as hcb
"""
from __future__ import annotations

import enum

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.host_callback import (  # noqa: F401
    _failures, _printing, _region_checks, _runtime, _whole_mesh, _while_fix)
from pmapkit.host_callback._primitive import call_is_ordered, outside_call_p
from pmapkit.host_callback._runtime import CallbackException
from pmapkit.host_callback import _rules  # noqa: F401  (registers the rules)

__all__ = ["CallbackException", "CallbackFlavor", "TapFunctionException",
           "barrier_wait", "call", "id_print", "id_tap", "stop_outfeed_receiver"]

TapFunctionException = CallbackException  # the classic module's older name

# Which of the classic module's two implementations these semantics follow
# (see the module docstring): the legacy one.
LEGACY_SEMANTICS = True


class CallbackFlavor(enum.Enum):
    """The ``callback_flavor`` values of the classic module's last releases.

    They chose the modern callback behind ``id_tap``/``id_print``/``call``
    when ``JAX_HOST_CALLBACK_LEGACY=False``; by default (the legacy
    implementation) they were accepted and had no effect. pmapkit keeps the
    classic semantics for every flavor: ordered per device, taps see
    ``transforms``, under pmap every device calls back.
    """
    IO_CALLBACK = 1  # jax.experimental.io_callback
    PURE = 2         # jax.pure_callback
    DEBUG = 3        # jax.debug.callback (no results)


def _check_flavor(callback_flavor, api):
    if not isinstance(callback_flavor, CallbackFlavor):
        raise TypeError(
            f"host_callback.{api}: callback_flavor must be a "
            "host_callback.CallbackFlavor (CallbackFlavor.IO_CALLBACK, "
            f"CallbackFlavor.PURE or CallbackFlavor.DEBUG), got {callback_flavor!r}.")


def id_tap(tap_func, arg, *, result=None, tap_with_device=False, device_index=0,
           callback_flavor=CallbackFlavor.IO_CALLBACK, **kwargs):
    """Identity on ``arg`` (or return ``result``) that calls
    ``tap_func(arg, transforms)`` on the host with the runtime value of
    ``arg`` (``device=`` the originating device too, with
    ``tap_with_device=True``). ``transforms`` lists the vmap batching applied,
    as ``("batch", {"batch_dims": ...})``. ``device_index`` picks the device
    that taps in a whole-mesh (jit/pjit) program; under pmap every device taps.
    ``callback_flavor`` (a ``CallbackFlavor``) is accepted as in the classic
    module's last releases.
    """
    if kwargs:
        raise TypeError(
            "Support for **kwargs in ``id_tap`` has been removed. Instead, "
            "pre-apply keyword arguments, either by using a closure or by passing "
            "``functools.partial(tap_func, **kwargs)``.")
    _check_flavor(callback_flavor, "id_tap")
    return _outside_call(tap_func, arg, identity=True, with_device=tap_with_device,
                         device_index=device_index, result=result, api="id_tap")


def id_print(arg, *, result=None, tap_with_device=False, device_index=0,
             output_stream=None, threshold=None,
             callback_flavor=CallbackFlavor.IO_CALLBACK, **kwargs):
    """``id_tap`` with a tap that prints: the keyword arguments (sorted, with
    ``transforms`` and ``device`` when present), then ``arg`` (arrays through
    ``numpy.array2string(threshold=threshold)``), to ``output_stream.write``
    or ``print``."""
    _check_flavor(callback_flavor, "id_print")
    if output_stream is not None and not callable(getattr(output_stream, "write", None)):
        raise TypeError("id_print output_stream must be a text stream with a write "
                        f"method (such as sys.stdout), got {output_stream!r} of type "
                        f"{type(output_stream).__name__}.")
    printer = _printing.Printer(output_stream, threshold, kwargs)
    return _outside_call(printer, arg, identity=True, with_device=tap_with_device,
                         device_index=device_index, result=result, api="id_print")


def call(callback_func, arg, *, result_shape=None, call_with_device=False,
         device_index=0, callback_flavor=CallbackFlavor.IO_CALLBACK):
    """Call ``callback_func(arg)`` on the host and return its result, which
    must match ``result_shape``: a pytree of ``jax.ShapeDtypeStruct``, arrays or
    scalars (``None``/``()`` for no result). Under pmap each device calls with
    its slice and gets its own result back. If the function raises or
    returns another shape or dtype, the computation fails wherever it runs
    (one device, a whole-mesh program, a pmap, a ``shard_map``; see the
    module docstring), with an error naming the ``CallbackException``
    chained to the original; no device gets a made-up value. The next
    ``barrier_wait`` raises it too. Under ``vmap`` it raises
    NotImplementedError, as the legacy module did."""
    _check_flavor(callback_flavor, "call")
    return _outside_call(callback_func, arg, identity=False,
                         with_device=call_with_device, device_index=device_index,
                         result_shape=result_shape, api="call")


def barrier_wait(logging_name=None):
    """Block until every tap issued so far, and every ``call`` but those
    made directly in a ``jax.jit`` body or eagerly, on every local device and
    from every thread, has run. (Those run with their program, which carries
    no token to wait on: their result being ready says they ran.)
    Raises ``CallbackException`` (chained to it) if a callback function
    raised since the previous ``barrier_wait`` — the last exception, or an
    interrupt (``KeyboardInterrupt``) if one came."""
    if _runtime.inside_callback():
        # It would wait for the computation that is running this callback.
        raise RuntimeError(
            "host_callback.barrier_wait() was called from inside a host callback "
            "function; it waits for every callback issued so far, including the "
            "one calling it, and would never return. Call it after the "
            "computation, from the code that launched it.")
    _runtime.logger.debug("barrier_wait[%s]: waiting", logging_name or "")
    _runtime.wait_for_callbacks()
    last = _runtime.exceptions.take()
    if last is not None:
        exc, formatted = last
        raise CallbackException(_runtime.report_message(exc, formatted)) from exc


def stop_outfeed_receiver():
    """Kept for compatibility: there is no outfeed receiver to stop. Waits
    for the callbacks issued so far, like the classic function did."""
    _runtime.wait_for_callbacks()


def _flat_leaves(tree, what, api):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    for k, leaf in enumerate(leaves):
        try:
            jp.shaped_abstractify(leaf)
        except TypeError:
            path = jax.tree_util.tree_flatten_with_path(tree)[0][k][0]
            where = jax.tree_util.keystr(path) or "(the whole value)"
            raise TypeError(
                f"host_callback.{api}: {what} leaf {where} is {leaf!r} of type "
                f"{type(leaf).__name__}, which is not a JAX type; pass arrays "
                "or numeric scalars.") from None
    return leaves, treedef


def _result_avals(result_shape):
    leaves, treedef = jax.tree_util.tree_flatten(result_shape)
    avals = []
    for leaf in leaves:
        try:
            avals.append(jp.ShapedArray(tuple(np.shape(leaf)),
                                        jax.dtypes.result_type(leaf)))
        except Exception:
            raise ValueError(
                "result_shape should be a pytree of values with structure "
                "matching the expected result of the callback function. The "
                "values must be either numeric scalars, or must have 'shape' "
                f"and 'dtype' attributes. Got {result_shape}") from None
    return treedef, tuple(avals)


def _outside_call(func, arg, *, identity, with_device, device_index, api,
                  result=None, result_shape=None):
    if not callable(func):
        raise TypeError(f"host_callback.{api} expects a callable as its first "
                        f"argument, got {func!r}.")
    if type(device_index) is not int or device_index < 0:
        raise TypeError(f"host_callback.{api}: device_index must be a "
                        f"non-negative int, got {device_index!r}.")
    flat_args, arg_treedef = _flat_leaves(arg, "arg", api)
    flat_result, result_tree = ([], None)
    if identity and result is not None:
        flat_result, result_tree = _flat_leaves(result, "result", api)
    if identity:
        result_treedef, flat_results_aval = None, ()
    else:
        result_treedef, flat_results_aval = _result_avals(result_shape)
    outs = outside_call_p.bind(
        *flat_args, *flat_result,
        callback=_runtime.CallbackWrapper(func, identity, with_device),
        arg_treedef=arg_treedef, num_args=len(flat_args), identity=identity,
        result_treedef=result_treedef, flat_results_aval=flat_results_aval,
        transforms=(), device_index=device_index,
        ordered=identity or call_is_ordered())
    if not identity:
        return jax.tree_util.tree_unflatten(result_treedef, outs)
    if result_tree is not None:
        return jax.tree_util.tree_unflatten(result_tree, outs[len(flat_args):])
    return jax.tree_util.tree_unflatten(arg_treedef, outs)


