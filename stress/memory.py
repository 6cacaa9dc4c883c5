"""Resident memory over many cached calls, and under shape churn with
bounded caches.

Each probe warms up, then samples the resident set every block of calls
(each block ends blocking on its last result). ``leak`` if the resident set
grew by more than the bound from the end of the warm-up to the end; the
bytes per call are reported either way.
"""
from __future__ import annotations

import gc
import time

from stress.common import P, Result, Wrong, jax, mesh1d, np, pmapkit, rss_mib
from stress.probes import Leak

SECTION = "memory"
TOTAL = {"quick": 30_000, "full": 300_000}
CHURN_SHAPES = {"quick": 60, "full": 300}
GROWTH_BOUND_MIB = 16.0
CHURN_BOUND_MIB = 48.0
BLOCK = 1000


def _loop(step, x, calls, expect):
    """Call ``x = step(x)`` ``calls`` times; RSS samples after warm-up."""
    warm = max(BLOCK, calls // 20)
    for _ in range(warm):
        x = step(x)
    jax.block_until_ready(x)
    gc.collect()
    samples = [(0, rss_mib())]
    start = time.perf_counter()
    done = 0
    while done < calls:
        for _ in range(min(BLOCK, calls - done)):
            x = step(x)
        done += min(BLOCK, calls - done)
        jax.block_until_ready(x)
        samples.append((done, rss_mib()))
    elapsed = time.perf_counter() - start
    gc.collect()
    samples.append((done, rss_mib()))
    expect(x)
    return samples, elapsed


def _verdict(samples, elapsed, calls, what, bound=GROWTH_BOUND_MIB, unit="call"):
    first, last = samples[0][1], samples[-1][1]
    growth = last - first
    peak = max(s[1] for s in samples)
    # Slope over the second half: bytes per call once everything is warm.
    half = samples[len(samples) // 2:]
    if len(half) >= 2 and half[-1][0] > half[0][0]:
        per_call = (half[-1][1] - half[0][1]) * 2**20 / (half[-1][0] - half[0][0])
    else:
        per_call = 0.0
    summary = (f"{calls} {what} in {elapsed:.1f} s ({elapsed / max(calls, 1) * 1e6:.0f} us "
               f"each): RSS {first:.0f} -> {last:.0f} MiB ({growth:+.1f}, peak {peak:.0f}), "
               f"{per_call:+.1f} B/{unit} over the second half")
    details = {"calls": calls, "seconds": round(elapsed, 2), "rss_start_mib": round(first, 1),
               "rss_end_mib": round(last, 1), "growth_mib": round(growth, 2),
               f"bytes_per_{unit}_second_half": round(per_call, 1),
               "samples": [(n, round(m, 1)) for n, m in samples[:: max(1, len(samples) // 40)]]}
    if growth > bound:
        raise Leak(f"RSS grew {growth:.1f} MiB (bound {bound:g}): {summary}")
    return Result(summary, **details)


def _equals(value):
    def check(x):
        if not np.allclose(np.asarray(x), value):
            raise Wrong(f"the loop ended at {np.asarray(x).ravel()[:4].tolist()}, "
                        f"expected {value}")
    return check


_fixed_point = _equals(2.0)   # v * 0.5 + 1 converges to 2 from any start


def _pmap_calls(calls):
    f = pmapkit.pmap(lambda v: v * 0.5 + 1)
    samples, elapsed = _loop(f, np.zeros((8, 16), np.float32), calls, _fixed_point)
    return _verdict(samples, elapsed, calls, "pmap calls fed their output")


def _pjit_calls(calls):
    f = pmapkit.pjit(lambda v: v * 0.5 + 1, in_axis_resources=P("x"), out_axis_resources=P("x"))
    with mesh1d():
        samples, elapsed = _loop(f, np.zeros((16, 4), np.float32), calls, _fixed_point)
    return _verdict(samples, elapsed, calls, "pjit calls fed their output")


def _pmap_host_inputs(calls):
    f = pmapkit.pmap(lambda v: v * 0.5 + 1)
    host = np.zeros((8, 16), np.float32)
    samples, elapsed = _loop(lambda x: f(host), host, calls,
                             _equals(1.0))
    return _verdict(samples, elapsed, calls, "pmap calls with numpy inputs")


def _psum_calls(calls):
    f = pmapkit.pmap(lambda v: jax.lax.pmean(v, "i") * 0.5 + 1, axis_name="i")
    samples, elapsed = _loop(f, np.zeros(8, np.float32), calls, _fixed_point)
    return _verdict(samples, elapsed, calls, "pmap pmean calls fed their output")


def _churn(n_shapes):
    pmapkit.set_cache_size(per_function=8, programs=8)
    f = pmapkit.pmap(lambda v: v + 1)
    samples = []
    start = time.perf_counter()
    for k in range(1, n_shapes + 1):
        out = f(np.zeros((8, k), np.float32))
        if k == min(50, n_shapes // 3):
            jax.block_until_ready(out)
            gc.collect()
            samples.append((k, rss_mib()))
        elif k % 10 == 0 and samples:
            jax.block_until_ready(out)
            samples.append((k, rss_mib()))
    elapsed = time.perf_counter() - start
    gc.collect()
    samples.append((n_shapes, rss_mib()))
    if not np.allclose(np.asarray(out), 1.0):
        raise Wrong("the last shape's result is wrong")
    if f._cache_size > 8:
        raise Wrong(f"_cache_size is {f._cache_size} under set_cache_size(per_function=8)")
    jax.clear_caches()
    if f._cache_size != 0:
        raise Wrong(f"_cache_size is {f._cache_size} after jax.clear_caches()")
    return _verdict(samples, elapsed, n_shapes - samples[0][0],
                    "distinct shapes under set_cache_size(8, 8)", bound=CHURN_BOUND_MIB,
                    unit="shape")


def register(reg):
    total = TOTAL[reg.mode]
    add = reg.section(SECTION, "rss", isolated=True, timeout=600 if reg.mode == "quick" else 1200)
    add(f"pmap, {total} cached calls", lambda: _pmap_calls(total))
    add(f"pjit, {total} cached calls", lambda: _pjit_calls(total))
    add(f"pmap, {total // 3} calls with host inputs", lambda: _pmap_host_inputs(total // 3))
    add(f"pmap with pmean, {total // 3} calls", lambda: _psum_calls(total // 3))
    shapes = CHURN_SHAPES[reg.mode]
    add(f"pmap, {shapes} distinct shapes, bounded caches", lambda: _churn(shapes))
