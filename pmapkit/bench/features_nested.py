"""Feature benchmark cases: arrays shared with jax.pmap, nested pmap, out_axes=None.

Each case times one call + ``block_until_ready`` in caller-thread CPU µs
(median of the run's rounds), every impl fed fixed inputs already laid out
the way it wants:

- ``pmap_fed_jax_pmap_output_8_devices``: pmapkit.pmap given jax.pmap's
  output (same sharding, so the hit path passes it on uncopied) against
  jax.pmap given its own.
- ``pmap_nested_2x4_devices``: ``pmap(pmap(f))`` over a 2x4 mesh fed its own
  output, against ``jax.jit`` of the same body with the same shardings
  (nested jax.pmap no longer runs).
- ``pmap_out_axes_none_8_devices``: an unmapped output (each device keeps
  its own value, no collective) against jax.pmap's, blocking every call;
  its dispatch-only twin is ``pmap_out_axes_none_dispatch_8_devices`` in
  ``cases_inputs``.
"""
from __future__ import annotations

import statistics
import time

import jax
import numpy as np

import pmapkit
from pmapkit.bench.features import feature_case


def _add_one(x):
    return x + 1


def _per_call_us(fn, args, settings):
    out = None
    for _ in range(20):  # warm: compile and fill caches
        out = fn(*args)
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(20):
        jax.block_until_ready(fn(*args))
    per_call = max((time.perf_counter() - start) / 20, 1e-7)
    calls = int(min(5000, max(10, settings["target_s"] / per_call)))
    samples = []
    for _ in range(settings["rounds"]):
        c0 = time.thread_time()
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        samples.append((time.thread_time() - c0) / calls * 1e6)
    return statistics.median(samples)


def _rows(timed):
    return [{"impl": impl, "value": us, "unit": "us/call (cpu)"}
            for impl, us in timed]


@feature_case("pmap_fed_jax_pmap_output_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def fed_jax_output(settings):
    x = jax.pmap(_add_one)(np.zeros((8, 128), np.float32))
    theirs, ours = jax.pmap(_add_one), pmapkit.pmap(_add_one)
    return _rows([("jax.pmap", _per_call_us(theirs, (x,), settings)),
                  ("pmapkit", _per_call_us(ours, (x,), settings))])


@feature_case("pmap_nested_2x4_devices", baseline="jax.jit",
              higher_is_better=False)
def nested(settings):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("j", "i"))
    sharding = NamedSharding(mesh, PartitionSpec("j", "i"))
    jitted = jax.jit(_add_one, in_shardings=sharding, out_shardings=sharding)
    ours = pmapkit.pmap(pmapkit.pmap(_add_one, axis_name="i"), axis_name="j")
    host = np.zeros((2, 4, 128), np.float32)
    return _rows([("jax.jit", _per_call_us(jitted, (jitted(host),), settings)),
                  ("pmapkit", _per_call_us(ours, (ours(host),), settings))])


@feature_case("pmap_out_axes_none_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def out_axes_none(settings):
    theirs = jax.pmap(_add_one, out_axes=None)
    ours = pmapkit.pmap(_add_one, out_axes=None)
    x = jax.pmap(_add_one)(np.zeros((8, 128), np.float32))
    return _rows([("jax.pmap", _per_call_us(theirs, (x,), settings)),
                  ("pmapkit", _per_call_us(ours, (x,), settings))])
