"""A bound on the executions of collective programs in flight on the CPU.

XLA:CPU runs a program's collectives (all-reduce, all-gather, ...) as
rendezvous between one thread per device. With many such programs queued
(about a hundred on a small host with 8 forced host devices) the threads of
one rendezvous can fall behind by more than XLA's 40 s termination timeout,
and XLA aborts the process ("Termination timeout for all reduce ...").
jax.pmap and jax.jit queue without bound and abort alike.

pmapkit keeps a small ring of the outstanding results of such programs,
process-wide: before another execution is dispatched when the ring is full,
the oldest is waited for. Only programs with collectives on the CPU backend
pass through it; everything else dispatches without it.

The bound is ``DEFAULT_LIMIT`` executions (chosen by measurement: see
README), ``PMAPKIT_CPU_COLLECTIVES_IN_FLIGHT`` at import, or
``pmapkit.set_cpu_collectives_in_flight(n)``; 0 lifts it.
"""
from __future__ import annotations

import collections
import os
import re
import threading

__all__ = ["set_cpu_collectives_in_flight", "cpu_collectives_in_flight",
           "has_collectives", "bounded", "BoundedExecutable"]

DEFAULT_LIMIT = 4

_COLLECTIVE_OP = re.compile(
    r"\b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter|"
    r"collective-broadcast|ragged-all-to-all)(-start)?\(")


def _env_limit():
    text = os.environ.get("PMAPKIT_CPU_COLLECTIVES_IN_FLIGHT", "")
    if not text:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError("PMAPKIT_CPU_COLLECTIVES_IN_FLIGHT must be a non-negative "
                         f"integer (0: no bound), got {text!r}")
    return value


class _Ring:
    """Outstanding results of collective programs, oldest first."""

    def __init__(self, limit):
        self.limit = limit
        self._pending = collections.deque()
        self._lock = threading.Lock()

    def make_room(self):
        """Wait for the oldest executions until fewer than ``limit`` remain."""
        while self.limit and len(self._pending) >= self.limit:
            with self._lock:
                oldest = self._pending.popleft() if self._pending else None
            if oldest is not None:
                _wait(oldest)

    def record(self, outputs):
        if self.limit and outputs:
            self._pending.append(outputs[0])

    def record_token(self, token):
        if self.limit:
            self._pending.append(token)

    def drain(self):
        while self._pending:
            with self._lock:
                oldest = self._pending.popleft() if self._pending else None
            if oldest is not None:
                _wait(oldest)


def _wait(pending):
    """Wait for an execution: its token, or one of its outputs."""
    try:
        pending.block_until_ready()
    except Exception:  # noqa: BLE001 - an output deleted by a later donation ran before it
        pass


_ring = _Ring(_env_limit())


def set_cpu_collectives_in_flight(limit):
    """At most ``limit`` executions of programs with collectives in flight on
    the CPU backend (default ``DEFAULT_LIMIT``); 0 lifts the bound."""
    if type(limit) is not int or limit < 0:
        raise ValueError("set_cpu_collectives_in_flight: limit must be a non-negative "
                         f"int (0: no bound), got {limit!r}")
    if limit == 0 or limit < _ring.limit:
        _ring.drain()
    _ring.limit = limit


def cpu_collectives_in_flight():
    """The current bound (0: none)."""
    return _ring.limit


def has_collectives(compiled, devices):
    """Whether ``compiled`` (a jax.stages.Compiled) runs on more than one CPU
    device with collectives in its optimized program."""
    devices = list(devices)
    if len(devices) < 2 or any(d.platform != "cpu" for d in devices):
        return False
    try:
        text = compiled.as_text() or ""
    except Exception:  # noqa: BLE001 - no text: assume the worst
        return True
    return _COLLECTIVE_OP.search(text) is not None


class bounded:
    """``with bounded(active) as record: return record(outputs)``: the
    Python path's form of ``BoundedExecutable`` (a no-op when not active)."""

    __slots__ = ("_active",)

    def __init__(self, active):
        self._active = active

    def __enter__(self):
        if self._active:
            _ring.make_room()
        return self._record

    def _record(self, outputs):
        if self._active:
            _ring.record(outputs)
        return outputs

    def __exit__(self, *exc):
        return False


class BoundedExecutable:
    """Stands in for a collective program's executable: waits for room in the
    ring before each execution and records the execution in it. ``tokens``:
    the inner executable is jaxlib's own, so the ring holds the execution's
    token (holding output buffers instead keeps them from being recycled,
    which costs XLA:CPU more than the wait); otherwise its first output."""

    __slots__ = ("_inner", "_tokens")

    def __init__(self, inner, tokens=False):
        self._inner = inner
        self._tokens = tokens

    def execute_sharded(self, arrays):
        _ring.make_room()
        if self._tokens:
            results = self._inner.execute_sharded(arrays, with_tokens=True)
            _ring.record_token(results.consume_token())
            return results
        return _Recorded(self._inner.execute_sharded(arrays))


class _Recorded:
    __slots__ = ("_results",)

    def __init__(self, results):
        self._results = results

    def consume_with_handlers(self, handlers):
        outs = self._results.consume_with_handlers(handlers)
        _ring.record(outs)
        return outs
