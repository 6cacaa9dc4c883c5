"""Feature benchmark: what jax_debug_nans costs a cached call.

- ``pmap_debug_nans_on_8_devices``: call + ``block_until_ready`` of a cached
  ``pmap(f)`` on clean inputs with ``jax_debug_nans`` on, pmapkit against
  jax.pmap (both copy every output to the host to look for NaNs; pmapkit's
  calls take its Python path, which checks).
- ``pmap_trivial_1_devices_after_debug_nans``: the same cached call on one
  device after the flag was turned on and off again, dispatch only: once a
  flag has been on, pmapkit's hit path reads both flags per call (before, it
  reads nothing). Against jax.pmap.

Caller-thread CPU µs per call, median of interleaved rounds. The module puts
the dispatch core back as it was (``rearm_from_flags``) when done.
"""
from __future__ import annotations

import time

import jax
import numpy as np

import pmapkit
from pmapkit.core.programs import special_values
from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us


def _scale(x):
    return x * 2.0 + 1.0


def _cpu_us(fn, x, calls, block):
    thread_time = time.thread_time
    c0 = thread_time()
    out = None
    for _ in range(calls):
        out = fn(x)
        if block:
            out.block_until_ready()
    if out is not None:
        out.block_until_ready()
    return (thread_time() - c0) / calls * 1e6


def _with_debug_nans(run):
    try:
        with jax.debug_nans(True):
            return run()
    finally:
        special_values.rearm_from_flags()


@feature_case("pmap_debug_nans_on_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def debug_nans_on(settings):
    x = np.ones((8, 128), np.float32)
    impls = {"jax.pmap": jax.pmap(_scale), "pmapkit": pmapkit.pmap(_scale)}
    x = impls["pmapkit"](x)  # both take this placement as is
    return _with_debug_nans(lambda: interleaved_cpu_us(
        impls, lambda fn, n: _cpu_us(fn, x, n, True), settings, "jax.pmap",
        warmup=20, max_calls=2000))


@feature_case("pmap_trivial_1_devices_after_debug_nans", baseline="jax.pmap",
              higher_is_better=False)
def after_debug_nans(settings):
    devices = jax.devices()[:1]
    impls = {"jax.pmap": jax.pmap(_scale, devices=devices),
             "pmapkit": pmapkit.pmap(_scale, devices=devices)}
    x = impls["pmapkit"](np.ones((1, 8), np.float32))
    with jax.debug_nans(True):
        impls["pmapkit"](x)  # arms the per-call read
    try:
        return interleaved_cpu_us(
            impls, lambda fn, n: _cpu_us(fn, x, n, False), settings, "jax.pmap",
            warmup=200, max_calls=50_000)
    finally:
        special_values.rearm_from_flags()
