"""Feature cases: the call paths issue 33 changed, beside JAX.

``pjit_failing_signature_us_per_call``: a pjit whose every call raises at
trace time (a reshape that cannot hold): each call of such a signature runs
its own miss (a failed entry is replaced, never handed on), beside jax.jit
raising the same TypeError.

``pmap_donated_moved_alias_8_devices``: one array passed twice with one
position donated, where the array must move (on device 0, into an 8-device
pmap): the donated position gets a copy and the call runs, as jax.pmap runs it.

Both report the median caller-thread CPU µs per call of interleaved rounds.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import pmapkit
from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us


def _raising_cpu_us(fn, calls):
    start = time.thread_time()
    for _ in range(calls):
        try:
            fn()
        except TypeError:
            pass
        else:
            raise RuntimeError("the failing signature returned")
    return (time.thread_time() - start) / calls * 1e6


@feature_case("pjit_failing_signature_us_per_call", baseline="jax.jit",
              higher_is_better=False)
def pjit_failing_signature(settings):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    body = lambda v: v.reshape(-1, 3)  # noqa: E731 - 16 elements: never fits
    ours, theirs = pmapkit.pjit(body), jax.jit(body)
    impls = {"jax.jit": lambda: theirs(x), "pmapkit": lambda: ours(x)}
    return interleaved_cpu_us(impls, _raising_cpu_us, settings, "jax.jit",
                              warmup=5, max_calls=2000)


def _cpu_us(fn, calls):
    start = time.thread_time()
    for _ in range(calls):
        out = fn()
    elapsed = time.thread_time() - start
    jax.block_until_ready(out)
    return elapsed / calls * 1e6


@feature_case("pmap_donated_moved_alias_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def pmap_donated_moved_alias(settings):
    n = min(8, jax.local_device_count())
    x = jnp.arange(n * 4, dtype=jnp.float32).reshape(n, 4)  # device 0: moves
    body = lambda a, b: a * 2 + b  # noqa: E731
    ours = pmapkit.pmap(body, donate_argnums=0, devices=jax.local_devices()[:n])
    theirs = jax.pmap(body, donate_argnums=0, devices=jax.local_devices()[:n])
    np.testing.assert_array_equal(np.asarray(ours(x, x)), np.asarray(theirs(x, x)))
    impls = {"jax.pmap": lambda: theirs(x, x), "pmapkit": lambda: ours(x, x)}
    rows = interleaved_cpu_us(impls, _cpu_us, settings, "jax.pmap", warmup=20,
                              max_calls=5000)
    if x.is_deleted():
        raise RuntimeError("the caller's array was donated")
    return rows
