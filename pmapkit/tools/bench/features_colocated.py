"""Feature benchmark: cached call cost of a trivial colocated Python function.

``colocated_python_cached_call_us``: caller-thread CPU time (``time.thread_time``)
per call of ``colocated_python(identity)(x)`` after its first call, x a float32
array on one CPU device, under ``jax.experimental.colocated_python`` (its CPU
fallback runs the function on the calling thread, as pmapkit's does) and
``pmapkit.colocated_python``. Median of interleaved rounds; lower is better.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us


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
    return interleaved_cpu_us(impls, lambda fn, n: _cpu_us(fn, x, n), settings,
                              "jax.colocated_python", warmup=200, max_calls=50_000)
