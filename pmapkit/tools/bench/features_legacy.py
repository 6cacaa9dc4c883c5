"""Feature benchmark: what a name pmapkit.legacy serves costs over its
modern spelling.

Most served names are JAX's own objects (``jax.core.Primitive`` is
``jax.extend.core.Primitive``, ``jax.random.threefry_2x32`` is
``jax.extend.random``'s): nothing to measure. The adapters are thin Python
functions; each case times one served adapter against the modern call it
stands for, caller-thread CPU µs per call (eager, dispatch included), median
of interleaved rounds. The values are taken from the census table
(``pmapkit.legacy.names``) without installing anything in this process.

- ``legacy_jnp_in1d``: ``jax.numpy.in1d`` vs ``jnp.isin(jnp.ravel(a), b)``;
- ``legacy_random_threefry2x32_key``: ``jax.random.threefry2x32_key(seed)``
  vs ``jax.random.key_data(jax.random.key(seed, impl="threefry2x32"))``;
- ``legacy_positional_sharding_device_put``: ``jax.device_put`` of a (4, 2)
  array to ``PositionalSharding(devices).reshape(4, 2)`` vs to the equivalent
  ``NamedSharding``.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us


def _served(name):
    from pmapkit.legacy import names
    return names.by_name(name).make()


def _cpu_us(call, calls):
    thread_time = time.thread_time
    c0 = thread_time()
    out = None
    for _ in range(calls):
        out = call()
    jax.block_until_ready(out)
    return (thread_time() - c0) / calls * 1e6


def _rows(impls, settings):
    return interleaved_cpu_us(impls, lambda fn, n: _cpu_us(fn, n), settings, "jax",
                              warmup=20, max_calls=2000)


@feature_case("legacy_jnp_in1d", baseline="jax", higher_is_better=False)
def jnp_in1d(settings):
    in1d = _served("jax.numpy.in1d")
    a, b = jnp.arange(64).reshape(8, 8), jnp.array([3, 9, 27])
    return _rows({"jax": lambda: jnp.isin(jnp.ravel(a), b),
                  "pmapkit": lambda: in1d(a, b)}, settings)


@feature_case("legacy_random_threefry2x32_key", baseline="jax", higher_is_better=False)
def threefry2x32_key(settings):
    key = _served("jax.random.threefry2x32_key")
    return _rows({"jax": lambda: jax.random.key_data(jax.random.key(7, impl="threefry2x32")),
                  "pmapkit": lambda: key(7)}, settings)


@feature_case("legacy_positional_sharding_device_put", baseline="jax",
              higher_is_better=False)
def positional_device_put(settings):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    positional = _served("jax.sharding.PositionalSharding")
    devices = jax.devices()[:8]
    if len(devices) < 8:
        return []
    ours = positional(devices).reshape(4, 2)
    named = NamedSharding(Mesh(np.array(devices).reshape(4, 2), ("a", "b")),
                          PartitionSpec("a", "b"))
    x = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    return _rows({"jax": lambda: jax.device_put(x, named),
                  "pmapkit": lambda: jax.device_put(x, ours)}, settings)
