"""The host side of pmapkit's host callbacks.

What runs when a device computation calls back: rebuilding the user's
argument, calling the user's function, checking what a ``call`` returned,
and — when the user's function raises — logging the exception and keeping it
for the next ``barrier_wait``. Also the process-wide record of the runtime
tokens that ``barrier_wait`` waits for.

Whatever a callback function raises — an ordinary exception, a result of
the wrong shape or dtype, even a ``KeyboardInterrupt`` — is kept for
``barrier_wait``, and a tap returns normally (as with the classic outfeed
receiver). A failed ``call`` must not hand back a value; how it fails its
computation depends on where it runs (``on_failure``, chosen when lowering):

- ``RAISE``: in a program on one device, the callback raises: the
  computation fails and its caller gets the error (as with
  ``jax.pure_callback``);
- ``FLAG``: in a whole-mesh program (jit, pjit) over several devices of one
  process, the caller's device gets zeros and the failure's number
  (``caller_failures``) after its results; XLA hands both to every device,
  and every device raises it (``_whole_mesh``, ``_rendezvous``);
- ``PEND``: in a manual region over several devices that ends with the
  checks (a pmap body, a ``shard_map``, a whole-mesh call over several
  processes: ``_failures``, ``_region_checks``, ``_whole_mesh``), the device
  gets zeros and the failure waits for those checks, which fail every
  device at once: a device failing alone would leave the others blocked in
  a collective until XLA:CPU aborts the process.

A failed computation's effect token is dropped before the next computation
with callbacks takes it (``_jax_private.hand_on_effect_tokens``), so
only the failed computation fails.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import traceback

import jax
import numpy as np

from pmapkit import _jax_private as jp

logger = logging.getLogger("pmapkit.host_callback")


class CallbackException(Exception):
    """Raised by ``barrier_wait`` when a callback function raised since the
    previous ``barrier_wait``; chained to (``from``) the last such exception,
    whose formatted traceback the message includes."""


def is_interrupt(exc):
    """Not an ordinary error: ``KeyboardInterrupt``, ``SystemExit``..."""
    return not isinstance(exc, Exception)


class _ExceptionRecord:
    """The exception to report at the next ``barrier_wait``: the last one a
    callback function raised, except that an interrupt is kept over ordinary
    exceptions raised after it (the user asked to stop; that is the news)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last = None  # (exception, formatted traceback)

    def record(self, exc, formatted):
        with self.lock:
            if (self.last is not None and is_interrupt(self.last[0])
                    and not is_interrupt(exc)):
                return
            self.last = (exc, formatted)

    def take(self):
        with self.lock:
            last, self.last = self.last, None
        return last


def report_message(exc, formatted):
    """The message of the ``CallbackException`` reporting ``exc``."""
    if is_interrupt(exc):
        return ("There were exceptions during callback processing: a callback "
                f"function was interrupted by {type(exc).__name__}. "
                f"It was: {formatted}")
    return ("There were exceptions during callback processing. "
            f"Last one was: {formatted}")


exceptions = _ExceptionRecord()


class CallbackWrapper:
    """The user's function as a primitive parameter.

    Equal for the same function and calling convention, so equal programs
    share compilations (jit caches key on primitive parameters).
    """

    __slots__ = ("func", "identity", "with_device", "__weakref__")

    def __init__(self, func, identity, with_device):
        self.func = func
        self.identity = identity
        self.with_device = with_device

    def __hash__(self):
        return hash((self.func, self.identity, self.with_device))

    def __eq__(self, other):
        return (type(other) is CallbackWrapper and self.func == other.func
                and self.identity == other.identity
                and self.with_device == other.with_device)

    def __repr__(self):
        return getattr(self.func, "__qualname__", None) or repr(self.func)

    def __call__(self, arg, device, transforms):
        extra = {"device": device} if self.with_device else {}
        if self.identity:
            return self.func(arg, transforms, **extra)
        return self.func(arg, **extra)


def unpack_transforms(transforms):
    """``(name, params dict)`` per transformation, as tap functions see them.

    Primitive parameters keep them as hashable tuples; ``("batch", dims)``
    becomes ``("batch", {"batch_dims": dims})``.
    """
    out = []
    for name, *rest in transforms:
        if name == "batch":
            out.append((name, {"batch_dims": rest[0]}))
        else:
            out.append((name, {}))
    return tuple(out)


def _host_copy(x):
    # The buffers handed to a host callback belong to the runtime and may be
    # reused once the callback returns; the user's function may keep its
    # argument, so it gets arrays of its own.
    return np.array(x, copy=True)


RAISE, PEND, FLAG = "raise", "pend", "flag"


class _PendingFailures:
    """Per device, the failed ``call`` (exception, formatted traceback) that
    the checks at the end of the running pmap body have not taken yet. The
    callbacks of one device run in order on its effect token, the checks
    last: what they find is their execution's (only concurrent executions
    of pmaps with calls on one device, from several threads, could see
    another's)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failed = {}

    def put(self, device, exc, formatted):
        with self.lock:
            self.failed[device] = (exc, formatted)

    def take(self, device):
        with self.lock:
            return self.failed.pop(device, None)

    def peek(self, device):
        with self.lock:
            return self.failed.get(device)


pending = _PendingFailures()


class _NumberedFailures:
    """The failed runs of ``FLAG`` calls, by number (1, 2, ...): each device
    of a failed run raises its exception (``take``). A device whose run was
    already ended by another's failure may never ask, so the last
    ``KEPT_FAILURES`` are kept, the oldest forgotten beyond them. Runs from
    several threads fail under numbers of their own."""

    def __init__(self):
        self.lock = threading.Lock()
        self.next = itertools.count(1)
        self.failed = collections.OrderedDict()   # number -> (exception, traceback text)

    def put(self, exc, formatted):
        with self.lock:
            number = next(self.next)
            if number >= np.iinfo(np.int32).max:
                self.next = itertools.count(1)
                number = next(self.next)
            self.failed[number] = (exc, formatted)
            while len(self.failed) > KEPT_FAILURES:
                self.failed.popitem(last=False)
        return number

    def take(self, number):
        """Failure ``number`` (None once forgotten)."""
        with self.lock:
            return self.failed.get(number)


#: Failed runs of whole-mesh calls kept for their devices to raise with.
KEPT_FAILURES = 16
caller_failures = _NumberedFailures()


def invoke(wrapper, arg_treedef, transforms, result_treedef, result_avals,
           on_failure, device, flat):
    """Call the user's function on the host; returns its flat result, checked
    against ``result_avals`` (empty for a tap).

    An exception (an interrupt included) is logged and kept for
    ``barrier_wait``; a tap then returns normally, a ``call`` fails as
    ``on_failure`` says (see the module docstring)."""
    _inside.depth += 1
    numbered = on_failure == FLAG and not wrapper.identity
    if numbered:
        # The last result is the failure's number (0: none), not the user's.
        result_avals = result_avals[:-1]
    try:
        arg = jax.tree_util.tree_unflatten(arg_treedef, [_host_copy(x) for x in flat])
        result = wrapper(arg, device, unpack_transforms(transforms))
        if wrapper.identity:
            return ()
        checked = check_results(wrapper, result, result_treedef, result_avals)
        return (*checked, _NO_FAILURE) if numbered else checked
    except BaseException as exc:  # noqa: BLE001  (an interrupt is reported too)
        formatted = traceback.format_exc()
        mode = None if wrapper.identity else on_failure
        _log_failure(wrapper, exc, mode, formatted)
        exceptions.record(exc, formatted)
        if mode == RAISE:
            raise CallbackException(report_message(exc, formatted)) from exc
        if mode == PEND:
            pending.put(device, exc, formatted)
        if wrapper.identity:
            return ()
        zeros = tuple(np.zeros(a.shape, a.dtype) for a in result_avals)
        if numbered:
            return (*zeros, np.asarray(caller_failures.put(exc, formatted), np.int32))
        return zeros
    finally:
        _inside.depth -= 1


_NO_FAILURE = np.zeros((), np.int32)

# The failures logged with their traceback, by (callback, exception type,
# message): each device of a pmap runs the callback, and a loop calls it
# again; the same failure again is logged at DEBUG (it still counts for
# barrier_wait). Bounded: past it, one failure may be logged twice.
_logged_failures: dict = {}
_LOGGED_FAILURES_BOUND = 1024


def _log_failure(wrapper, exc, mode, formatted):
    key = (id(wrapper), type(exc), str(exc))
    with _logged_lock:
        again = key in _logged_failures
        if not again:
            if len(_logged_failures) >= _LOGGED_FAILURES_BOUND:
                _logged_failures.clear()
            _logged_failures[key] = wrapper   # held: its id stays its own
    if again:
        logger.debug("pmapkit host_callback: the callback %r raised %s again: %s",
                     wrapper, type(exc).__name__, exc)
        return
    logger.error("pmapkit host_callback: the callback %r raised %s (%s; the same "
                 "failure again is logged at DEBUG):\n%s",
                 wrapper, type(exc).__name__, _FAILURE_NOTES[mode], formatted)


_logged_lock = threading.Lock()


class _LoggedByPmapkit(logging.Filter):
    """JAX logs an exception raised in its callback with the traceback ("jax.
    io_callback failed"): a ``CallbackException`` pmapkit raises there to fail
    the computation reports a failure pmapkit has logged already."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, CallbackException)


logging.getLogger("jax._src.callback").addFilter(_LoggedByPmapkit())


_FAILURE_NOTES = {
    None: "it will be raised by the next barrier_wait; the device computation goes on",
    RAISE: "the computation fails with it; the next barrier_wait raises it too",
    PEND: "every device of the region fails at the end of it; the next "
          "barrier_wait raises it too",
    FLAG: "every device of the computation fails with it; the next "
          "barrier_wait raises it too",
}


class _Inside(threading.local):
    """How deep this thread is in callback functions being invoked."""

    depth = 0


_inside = _Inside()


def inside_callback():
    """Whether this thread is running a callback function right now."""
    return _inside.depth > 0


def check_results(wrapper, result, result_treedef, result_avals):
    """The flat numpy results of a ``call``, checked against ``result_shape``."""
    leaves, treedef = jax.tree_util.tree_flatten(result)
    expected = jax.tree_util.tree_unflatten(
        result_treedef, [a.str_short() for a in result_avals])
    if treedef != result_treedef:
        raise TypeError(
            f"host_callback.call: the callback {wrapper!r} returned a result "
            f"with pytree structure {treedef}, but result_shape declared "
            f"{result_treedef} (expected {expected}).")
    arrays = []
    for leaf in leaves:
        a = np.asarray(leaf)
        arrays.append(a.astype(jax.dtypes.canonicalize_dtype(a.dtype), copy=False))
    got = [jp.ShapedArray(a.shape, a.dtype) for a in arrays]
    if any(g.shape != e.shape or g.dtype != e.dtype
           for g, e in zip(got, result_avals)):
        got_tree = jax.tree_util.tree_unflatten(treedef, [g.str_short() for g in got])
        raise TypeError(
            f"host_callback.call: the callback {wrapper!r} returned {got_tree}, "
            f"but result_shape declared {expected}: expected shapes and dtypes "
            "must match exactly.")
    return tuple(arrays)


# -- barrier_wait ----------------------------------------------------------------
class _RuntimeTokens:
    """The latest runtime token per (thread, device) of computations with
    effects or host callbacks. Each thread dispatches in order per device, so
    its latest token per device covers all its earlier ones."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latest = {}

    def note(self, device, token):
        key = (threading.get_ident(), device)
        with self.lock:
            self.latest[key] = token

    def wait_all(self):
        with self.lock:
            pending = list(self.latest.items())
        for _, token in pending:
            try:
                token.block_until_ready()
            except Exception:  # noqa: BLE001
                # That computation failed; its error went to its caller.
                logger.debug("barrier_wait: a computation had failed", exc_info=True)
        with self.lock:
            for key, token in pending:
                # Forget a token only if no newer one replaced it meanwhile.
                if self.latest.get(key) is token:
                    del self.latest[key]


runtime_tokens = _RuntimeTokens()
jp.watch_runtime_tokens(runtime_tokens.note)


def wait_for_callbacks():
    """Block until every computation with callbacks dispatched so far, by any
    thread of this process, has finished (its callbacks included)."""
    runtime_tokens.wait_all()
    try:
        jax.effects_barrier()  # this thread's tokens, as JAX keeps them
    except Exception:  # noqa: BLE001
        # A computation that failed (for a reason of its own: callbacks do
        # not fail it) leaves its error in this thread's tokens, which would
        # re-raise it at every later barrier. Everything has finished by now:
        # forget them.
        jp.clear_runtime_tokens()
