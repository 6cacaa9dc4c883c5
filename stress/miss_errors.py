"""A cache miss's error reaches only its own call (issue 33, item 1).

Eight threads build fresh ``pmapkit.pjit`` wrappers of one shared function
(so they share its cache entries) while another thread runs
``jax.clear_caches()`` every 100 ms (so misses keep racing). Half the calls
pass a numpy array (valid), half the same values committed to device 3,
which the pjit (``in_shardings`` over devices 0 and 1) refuses with the
documented ValueError. The two sign alike, so they meet on one entry: a valid
call that raises the refused call's error ("foreign") is wrong, as is a
refused input accepted or a wrong value; any other error is unclear.
The JAX reference row runs the same with ``jax.jit`` (not counted), which
moves the committed input instead of refusing it (counted with the refused).
"""
from __future__ import annotations

import threading
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import pmapkit

from stress.probes import Hang, Result, Unclear, Wrong

SECTION = "concurrency"
#: Valid calls per run (as many refused ones run beside them).
VALID_CALLS = {"quick": 6000, "full": 52000}
THREADS = 8
CLEAR_EVERY_S = 0.1
#: 0.4 pjit's refusal of the input committed to device 3 (today's jax.jit
#: moves it instead: the reference row takes either).
PJIT_REFUSAL = "Pjit's devices and Array's devices should be equal"


def _body(v):
    return v * 2 + 1


class _Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.valid = 0
        self.refused = 0
        self.foreign = []
        self.wrong = []
        self.other = []

    def add(self, field, item=None):
        with self.lock:
            if item is None:
                setattr(self, field, getattr(self, field) + 1)
            else:
                getattr(self, field).append(item)


def _run(make_wrapper, refused_text, valid_calls, limit):
    devices = jax.devices()
    sharding = NamedSharding(Mesh(np.array(devices[:2]), ("x",)), PartitionSpec())
    x = np.arange(8, dtype=np.float32)
    ref = x * 2 + 1
    elsewhere = jax.device_put(x, devices[3])
    counts = _Counts()
    per_thread = 2 * valid_calls // THREADS
    start_gate = threading.Barrier(THREADS + 1)
    stop = threading.Event()
    clears = [0]

    def work(i):
        start_gate.wait()
        for k in range(per_thread):
            valid = (i + k) % 2 == 0
            f = make_wrapper(_body, sharding)   # a fresh wrapper every call
            try:
                out = f(x if valid else elsewhere)
            except ValueError as exc:
                if not valid and refused_text is not None and refused_text in str(exc):
                    counts.add("refused")
                elif valid and "ids [3]" in str(exc):
                    counts.add("foreign", str(exc)[:200])  # about device 3
                else:
                    counts.add("other", f"ValueError: {str(exc)[:200]}")
                continue
            except Exception as exc:  # noqa: BLE001 - counted, reported
                counts.add("other", f"{type(exc).__name__}: {str(exc)[:200]}")
                continue
            right = np.array_equal(np.asarray(out), ref)
            if not valid and not (refused_text is None and right):
                counts.add("wrong", "the input committed to device 3 was accepted")
            elif right:
                counts.add("valid" if valid else "refused")
            else:
                counts.add("wrong", f"got {np.asarray(out)[:4].tolist()}")

    def clearer():
        start_gate.wait()
        while not stop.wait(CLEAR_EVERY_S):
            jax.clear_caches()
            clears[0] += 1

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(THREADS)]
    side = threading.Thread(target=clearer, daemon=True)
    start = time.perf_counter()
    for t in [*threads, side]:
        t.start()
    deadline = time.monotonic() + limit
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    side.join(10)
    elapsed = time.perf_counter() - start
    if any(t.is_alive() for t in threads):
        raise Hang(f"threads still running after {limit} s ({counts.valid} valid calls done)")
    n_valid = counts.valid + len(counts.foreign)
    summary = (f"{n_valid} valid calls, {counts.refused} refused, {len(counts.foreign)} "
               f"foreign errors, {clears[0]} clears in {elapsed:.1f} s")
    details = {"valid_calls": n_valid, "refused": counts.refused,
               "foreign_errors": len(counts.foreign), "clears": clears[0],
               "seconds": round(elapsed, 2), "first_foreign": counts.foreign[:3],
               "first_other": counts.other[:3]}
    if counts.foreign:
        raise Wrong(f"{summary}: a valid call raised another call's error: "
                    f"{counts.foreign[0]}")
    if counts.wrong:
        raise Wrong(f"{len(counts.wrong)} wrong of {summary}: {counts.wrong[0]}")
    if counts.other:
        raise Unclear(f"{len(counts.other)} unexpected errors of {summary}: {counts.other[0]}")
    if counts.valid != valid_calls or counts.refused != valid_calls:
        raise Wrong(f"{summary}; {valid_calls} valid and refused calls planned")
    return Result(summary, **details)


def _pmapkit_pjit(fun, sharding):
    return pmapkit.pjit(fun, in_shardings=sharding)


def _jax_jit(fun, sharding):
    return jax.jit(fun, in_shardings=sharding)


def register(reg):
    calls = VALID_CALLS[reg.mode]
    limit = 300 if reg.mode == "quick" else 900
    add = reg.section(SECTION, "miss errors", isolated=True, timeout=limit + 60)
    add(f"fresh pjit wrappers, clears, valid and refused inputs, {THREADS} threads",
        lambda: _run(_pmapkit_pjit, PJIT_REFUSAL, calls, limit))
    ref = reg.section(SECTION, "JAX reference", isolated=True, timeout=limit + 60,
                      reference=True)
    ref(f"jax.jit: fresh wrappers, clears, valid and refused inputs, {THREADS} threads",
        lambda: _run(_jax_jit, None, calls, limit))
