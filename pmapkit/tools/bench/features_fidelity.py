"""Feature case: a training step's gradient of a pmap called outside jit.

``jax.grad(pmap(f))(x)`` runs the miss path on every call (a JAX trace is
active, so the compiled hit path steps aside): what it costs per call, and
that it compiles only on the first call (``compiles_after_first``), for
pmapkit.pmap and jax.pmap side by side.
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import pmapkit
from pmapkit.tools.bench.features import feature_case

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def _step(pmap_impl, n):
    f = pmap_impl(lambda v: jnp.sin(v) * jax.lax.psum(v, "i"), axis_name="i",
                  devices=jax.local_devices()[:n])
    return lambda x: jax.grad(lambda x: f(x).sum())(x)


def _per_call_us(step, x, calls):
    start = time.thread_time()
    for _ in range(calls):
        out = step(x)
    jax.block_until_ready(out)
    return (time.thread_time() - start) / calls * 1e6


@feature_case("grad_of_pmap_step_8_devices", baseline="jax.pmap", higher_is_better=False)
def grad_of_pmap_step(settings):
    n = min(8, jax.local_device_count())
    x = jnp.asarray(np.random.default_rng(0).normal(size=(n, 16)).astype(np.float32))
    impls = {"jax.pmap": jax.pmap, "pmapkit": pmapkit.pmap}
    steps = {name: _step(impl, n) for name, impl in impls.items()}
    compiles = {"count": 0}

    def listener(event, duration, **kwargs):
        if event == _BACKEND_COMPILE:
            compiles["count"] += 1

    after_first = {}
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for name, step in steps.items():
            jax.block_until_ready(step(x))                # first call: compiles
            before = compiles["count"]
            jax.block_until_ready([step(x) for _ in range(3)])
            after_first[name] = compiles["count"] - before
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    single = max(_per_call_us(steps["pmapkit"], x, 3), 1.0)
    calls = max(3, int(settings["target_s"] * 1e6 / single))
    samples = {name: [] for name in steps}
    for _ in range(settings["rounds"]):
        for name, step in steps.items():              # interleaved rounds
            samples[name].append(_per_call_us(step, x, calls))
    return [{"impl": name, "value": statistics.median(values), "unit": "µs/call CPU",
             "compiles_after_first": after_first[name]}
            for name, values in samples.items()]
