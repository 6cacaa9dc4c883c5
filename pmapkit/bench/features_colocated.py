"""Feature benchmark: cached call cost of a trivial colocated Python function.

``colocated_python_cached_call_us``: caller-thread CPU time (``time.thread_time``)
per call of ``colocated_python(identity)(x)`` after its first call, x a float32
array on one CPU device, under ``jax.experimental.colocated_python`` (its CPU
fallback runs the function on the calling thread, as pmapkit's does) and
``pmapkit.colocated_python``. Median of interleaved rounds; lower is better.
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

from pmapkit.bench.features import feature_case


def _identity(x):
    return x


def _cpu_us(fn, x, calls):
    thread_time = time.thread_time
    c0 = thread_time()
    for _ in range(calls):
        fn(x)
    return (thread_time() - c0) / calls * 1e6


@feature_case("colocated_python_cached_call_us", baseline="jax.colocated_python",
              higher_is_better=False)
def cached_call(settings):
    from jax.experimental import colocated_python as jax_colocated

    from pmapkit import colocated_python as pmapkit_colocated

    x = jax.device_put(jnp.arange(16, dtype=jnp.float32), jax.devices()[0])
    impls = {"jax.colocated_python": jax_colocated.colocated_python(_identity),
             "pmapkit": pmapkit_colocated.colocated_python(_identity)}
    for fn in impls.values():
        for _ in range(200):  # first call (discovery) and warm-up
            fn(x)
    probe = time.perf_counter()
    _cpu_us(impls["jax.colocated_python"], x, 200)
    per_call = max((time.perf_counter() - probe) / 200, 1e-7)
    calls = int(min(50_000, max(200, settings["target_s"] / per_call)))
    samples = {name: [] for name in impls}
    for _ in range(settings["rounds"]):
        for name, fn in impls.items():
            samples[name].append(_cpu_us(fn, x, calls))
    return [{"impl": name, "value": statistics.median(values), "unit": "us/call cpu",
             "calls": calls, "rounds": settings["rounds"]}
            for name, values in samples.items()]
