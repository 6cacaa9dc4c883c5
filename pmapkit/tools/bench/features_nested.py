"""Feature benchmark cases: arrays shared with jax.pmap, nested pmap, out_axes=None.

Each case times one call + ``block_until_ready`` in caller-thread CPU µs
(median of rounds that alternate the impls, ``interleaved_cpu_us``), every
impl fed fixed inputs already laid out the way it wants:

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

import functools
import time

import jax
import numpy as np

import pmapkit
from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us


def _add_one(x):
    return x + 1


def _blocking_cpu_us(call, calls):
    """Caller-thread CPU µs per ``call()`` + ``block_until_ready``."""
    block, thread_time = jax.block_until_ready, time.thread_time
    c0 = thread_time()
    for _ in range(calls):
        block(call())
    return (thread_time() - c0) / calls * 1e6


def _interleaved(impls, settings, baseline):
    """``impls``: name -> (function, its input); rows of ``interleaved_cpu_us``."""
    calls = {name: functools.partial(fn, x) for name, (fn, x) in impls.items()}
    return interleaved_cpu_us(calls, _blocking_cpu_us, settings, baseline,
                              warmup=20, max_calls=5000)


@feature_case("pmap_fed_jax_pmap_output_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def fed_jax_output(settings):
    x = jax.pmap(_add_one)(np.zeros((8, 128), np.float32))
    return _interleaved({"jax.pmap": (jax.pmap(_add_one), x),
                         "pmapkit": (pmapkit.pmap(_add_one), x)}, settings, "jax.pmap")


@feature_case("pmap_nested_2x4_devices", baseline="jax.jit",
              higher_is_better=False)
def nested(settings):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("j", "i"))
    sharding = NamedSharding(mesh, PartitionSpec("j", "i"))
    jitted = jax.jit(_add_one, in_shardings=sharding, out_shardings=sharding)
    ours = pmapkit.pmap(pmapkit.pmap(_add_one, axis_name="i"), axis_name="j")
    host = np.zeros((2, 4, 128), np.float32)
    return _interleaved({"jax.jit": (jitted, jitted(host)),
                         "pmapkit": (ours, ours(host))}, settings, "jax.jit")


@feature_case("pmap_out_axes_none_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def out_axes_none(settings):
    theirs = jax.pmap(_add_one, out_axes=None)
    ours = pmapkit.pmap(_add_one, out_axes=None)
    x = jax.pmap(_add_one)(np.zeros((8, 128), np.float32))
    return _interleaved({"jax.pmap": (theirs, x), "pmapkit": (ours, x)}, settings,
                        "jax.pmap")
