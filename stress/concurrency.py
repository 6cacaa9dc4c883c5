"""Many threads calling shared pmap/pjit functions.

Each probe starts 12-16 threads on shared functions (no warm-up: the first
calls race the compile) and checks every result against numpy. Between
them the probes cover one signature, many signatures, collectives in
flight from every thread, pjit on two meshes (each thread its own ``with
mesh:``), cache misses under eviction with ``clear_caches()`` from another
thread, AOT ``lower().compile()`` calls, and host values (numpy arrays and
scalars, each thread its own) into a one-device pmap, the calls JAX's C++
call of the program runs, beside device arrays and ``clear_caches()``. Outcome: wrong if any result
differs, unclear if any call raised, hang if the threads do not finish in
time.
"""
from __future__ import annotations

import threading
import time

from stress.common import P, Result, Wrong, jax, jnp, mesh1d, mesh2d, np, pmapkit
from stress.probes import Hang, Unclear

SECTION = "concurrency"
TOTAL = {"quick": 5000, "full": 77200}
#: (probe, share of the calls)
SHARES = (("pmap, one signature, 16 threads", 0.25),
          ("pmap, 6 signatures, 12 threads", 0.20),
          ("pmap with psum in flight, 12 threads", 0.15),
          ("pjit on two meshes, 12 threads", 0.20),
          ("pmap misses under eviction and clear_caches, 12 threads", 0.08),
          ("pmap and pjit, calls and AOT compiled calls, 14 threads", 0.12),
          ("one-device pmap, host values per thread (JAX's call), 12 threads", 0.10))


class _Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.errors = []
        self.wrong = []

    def ok(self, n=1):
        with self.lock:
            self.calls += n

    def error(self, exc):
        with self.lock:
            self.calls += 1
            self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    def mismatch(self, text):
        with self.lock:
            self.calls += 1
            self.wrong.append(text)


def _run_threads(n_threads, per_thread, work, limit, extra=None):
    """``work(tally, thread_index, calls)`` in ``n_threads`` threads; the
    tally, or Hang if they are not done within ``limit`` seconds."""
    tally = _Tally()
    start_gate = threading.Barrier(n_threads + (1 if extra else 0))
    stop = threading.Event()

    def run(i):
        start_gate.wait()
        try:
            work(tally, i, per_thread)
        except BaseException as exc:  # noqa: BLE001 — counted, reported
            tally.error(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n_threads)]
    if extra:
        def side():
            start_gate.wait()
            extra(stop)
        threads.append(threading.Thread(target=side, daemon=True))
    start = time.perf_counter()
    for t in threads:
        t.start()
    deadline = time.monotonic() + limit
    for t in threads[:n_threads]:
        t.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for t in threads[n_threads:]:
        t.join(10)
    elapsed = time.perf_counter() - start
    if any(t.is_alive() for t in threads):
        raise Hang(f"threads still running after {limit} s ({tally.calls} calls done)")
    return tally, elapsed


def _verdict(tally, elapsed, planned, note):
    summary = (f"{tally.calls} calls in {elapsed:.1f} s "
               f"({tally.calls / max(elapsed, 1e-9):.0f}/s); {note}")
    details = {"calls": tally.calls, "planned": planned, "seconds": round(elapsed, 2),
               "errors": len(tally.errors), "wrong": len(tally.wrong),
               "first_errors": tally.errors[:5], "first_wrong": tally.wrong[:5]}
    if tally.wrong:
        raise Wrong(f"{len(tally.wrong)} wrong results of {summary}: {tally.wrong[0]}")
    if tally.errors:
        raise Unclear(f"{len(tally.errors)} calls raised, of {summary}: {tally.errors[0]}")
    if tally.calls != planned:
        raise Wrong(f"{tally.calls} calls counted, {planned} planned")
    return Result(summary, **details)


def _check(tally, out, ref, what):
    got = np.asarray(out)
    if got.shape == ref.shape and np.allclose(got, ref):
        tally.ok()
    else:
        tally.mismatch(f"{what}: got {got.ravel()[:4].tolist()}, expected "
                       f"{ref.ravel()[:4].tolist()}")


def _clearing(every_s, clears):
    """A side thread's body: ``clear_caches()`` every ``every_s`` seconds
    until stopped, each counted in ``clears``."""
    def clear(stop):
        while not stop.wait(every_s):
            pmapkit.clear_caches()
            clears.append(1)
    return clear


# -- the probes ----------------------------------------------------------------------------
def _one_signature(calls, limit):
    f = pmapkit.pmap(lambda v: v * 2 + 1)
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    ref = x * 2 + 1

    def work(tally, i, n):
        arg = jnp.asarray(x) if i % 2 else x    # device and host inputs
        for _ in range(n):
            _check(tally, f(arg), ref, "f(x)")
    n = 16
    tally, elapsed = _run_threads(n, calls // n, work, limit)
    return _verdict(tally, elapsed, calls // n * n, "one shared pmap, one signature")


def _many_signatures(calls, limit):
    f = pmapkit.pmap(lambda v: v * 3 - 1)
    inputs = [np.arange(8 * int(np.prod(t)), dtype=d).reshape((8, *t))
              for t in ((), (3,), (2, 2)) for d in (np.float32, np.int32)]

    def work(tally, i, n):
        for k in range(n):
            x = inputs[(i + k) % len(inputs)]
            _check(tally, f(x), x * 3 - 1, f"f({x.dtype}{list(x.shape)})")
    n = 12
    tally, elapsed = _run_threads(n, calls // n, work, limit)
    return _verdict(tally, elapsed, calls // n * n,
                    f"{f._cache_size} cache entries for {len(inputs)} signatures")


def _psum_in_flight(calls, limit):
    f = pmapkit.pmap(lambda v: v - jax.lax.psum(v, "i") / 8, axis_name="i")
    x = np.arange(8, dtype=np.float32)
    ref = x - x.sum() / 8
    burst = 8

    def work(tally, i, n):
        arg = jnp.asarray(x)
        done = 0
        while done < n:
            outs = [f(arg) for _ in range(min(burst, n - done))]   # in flight together
            for out in outs:
                _check(tally, out, ref, "psum")
            done += len(outs)
    n = 12
    tally, elapsed = _run_threads(n, calls // n, work, limit)
    return _verdict(tally, elapsed, calls // n * n,
                    f"bursts of {burst} unblocked psum calls per thread")


def _pjit_two_meshes(calls, limit):
    f = pmapkit.pjit(lambda v: jnp.cos(v) * 2, in_axis_resources=P("x"),
                     out_axis_resources=P("x"))
    meshes = (mesh1d(), mesh2d())
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4) / 7
    ref = np.cos(x) * 2

    def work(tally, i, n):
        arg = x if i % 4 < 2 else jnp.asarray(x)   # host and device inputs
        with meshes[i % 2]:
            for _ in range(n):
                _check(tally, f(arg), ref, f"pjit on mesh {i % 2}")
    n = 12
    tally, elapsed = _run_threads(n, calls // n, work, limit)
    return _verdict(tally, elapsed, calls // n * n, "thread-local meshes, one pjit")


def _misses_with_clears(calls, limit):
    pmapkit.set_cache_size(per_function=4, programs=8)
    f = pmapkit.pmap(lambda v: v + 5)
    inputs = [np.arange(8 * k, dtype=np.float32).reshape(8, k) for k in range(1, 7)]
    clears = []

    def work(tally, i, n):
        for k in range(n):
            x = inputs[(i * 7 + k) % len(inputs)]
            _check(tally, f(x), x + 5, f"f(float32{list(x.shape)})")

    n = 12
    tally, elapsed = _run_threads(n, calls // n, work, limit,
                                  extra=_clearing(0.25, clears))
    size = f._cache_size
    if size > 4:
        raise Wrong(f"_cache_size {size} above the bound of 4")
    return _verdict(tally, elapsed, calls // n * n,
                    f"6 shapes under a bound of 4, {len(clears)} clear_caches() meanwhile")


def _calls_and_aot(calls, limit):
    fp = pmapkit.pmap(lambda v: v * v)
    fj = pmapkit.pjit(lambda v: v + 100, in_axis_resources=P("x"), out_axis_resources=P("x"))
    mesh = mesh1d()
    x = np.arange(8, dtype=np.float32)
    with mesh:
        compiled_j = fj.lower(x).compile()
    compiled_p = fp.lower(x).compile()

    def work(tally, i, n):
        with mesh:
            for k in range(n):
                which = (i + k) % 4
                if which == 0:
                    _check(tally, fp(x), x * x, "pmap")
                elif which == 1:
                    _check(tally, compiled_p(x), x * x, "compiled pmap")
                elif which == 2:
                    _check(tally, fj(x), x + 100, "pjit")
                else:
                    _check(tally, compiled_j(x), x + 100, "compiled pjit")
    n = 14
    tally, elapsed = _run_threads(n, calls // n, work, limit)
    return _verdict(tally, elapsed, calls // n * n, "calls and compiled calls interleaved")


def _host_values_one_device(calls, limit):
    devices = jax.devices()[:1]
    f = pmapkit.pmap(lambda v, s: v * s + 1, axis_name="i", in_axes=(0, None),
                     devices=devices)
    clears = []

    def work(tally, i, n):
        for k in range(n):
            # Each thread's own values: a result of another thread's call
            # would show as a wrong value.
            x = np.full((1, 5), float(i * 1000 + k), np.float32)
            scale = (2.0, np.float32(3.0), 4)[k % 3]
            arg = jax.device_put(x, devices[0]) if k % 5 == 4 else x
            _check(tally, f(arg, scale), x * np.float32(scale) + 1,
                   f"thread {i} call {k}")

    n = 12
    tally, elapsed = _run_threads(n, calls // n, work, limit,
                                  extra=_clearing(0.05, clears))
    return _verdict(tally, elapsed, calls // n * n,
                    f"host values per thread, {len(clears)} clear_caches() meanwhile")


BODIES = (_one_signature, _many_signatures, _psum_in_flight, _pjit_two_meshes,
          _misses_with_clears, _calls_and_aot, _host_values_one_device)


def register(reg):
    total = TOTAL[reg.mode]
    limit = 240 if reg.mode == "quick" else 900
    add = reg.section(SECTION, "threads", isolated=True, timeout=limit + 60)
    for (what, share), body in zip(SHARES, BODIES):
        calls = int(total * share)
        add(what, lambda body=body, calls=calls: body(calls, limit))
