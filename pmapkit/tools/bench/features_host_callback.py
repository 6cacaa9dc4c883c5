"""Feature benchmark cases of pmapkit.host_callback.

- ``host_callback_id_tap_taps_per_s``: a jitted ``fori_loop`` of 1,000 taps;
  taps per second of ``id_tap`` vs ``jax.debug.callback(ordered=True)`` (both
  ordered, both doing nothing on the host).
- ``host_callback_id_tap_pmap_cached_call_us``: a cached ``pmapkit.pmap``
  call on every device whose body taps once vs ``jax.pmap`` of the same
  body with one (unordered) ``jax.debug.callback`` (µs per call, wall time,
  including waiting for the taps); for reference also the pmapkit body
  without the tap.
- ``host_callback_id_tap_nested_pmap_cached_call_us``: the same for a
  ``pmapkit.pmap`` of a ``pmapkit.pmap`` over every device whose inner body
  taps once, vs ``jax.jit`` of a ``jax.shard_map`` over the same two-axis
  mesh whose body makes one ``jax.debug.callback`` (``jax.pmap`` cannot
  nest in jax 0.10; this is the program it would be).
- ``host_callback_call_jit_us`` / ``host_callback_call_jit_8dev_us``: a
  cached ``jax.jit`` whose body makes one ``hcb.call`` vs the same body with
  ``jax.pure_callback``, on one device and over 8 (µs per call, wall time).
- ``host_callback_call_model_apply_us``: a small jitted two-layer model
  whose hidden activation goes through ``hcb.call`` once per apply (the
  flax-style use) vs ``jax.pure_callback`` there.
- ``host_callback_id_tap_jit_us`` / ``host_callback_id_tap_jit_8dev_us`` /
  ``host_callback_id_print_jit_us``: a cached ``jax.jit`` whose body taps
  (or prints with ``id_print`` to a stream) once vs the same body with
  ``jax.debug.callback`` doing the same on the host, on one device and over
  8.
- ``host_callback_call_jit_8dev_cpu_us`` / ``host_callback_id_tap_jit_8dev_cpu_us``:
  the 8-device rows above in process CPU per call (every thread: the
  callbacks run on XLA's), against ``jax.pure_callback`` /
  ``jax.debug.callback``; interleaved rounds, median.
- ``host_callback_call_whole_mesh_jit_us``: a cached ``jax.jit`` over every
  device whose body makes one ``hcb.call`` (every device meets the call, so
  a failure fails them all) vs the same body with
  ``io_callback(ordered=True)`` (µs per call, wall time).
- ``host_callback_call_shard_map_us``: a cached ``jax.jit`` of a
  ``jax.shard_map`` over every device whose body makes one ``hcb.call``
  (the region ends with the failure checks) vs ``io_callback(ordered=True)``
  in the same region.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit import host_callback as hcb
from pmapkit.tools.bench.features import feature_case
from pmapkit.pmap._pmap import pmap

LOOP_TAPS = 1000


def _best_rate(run, items, settings):
    """Items per second of ``run()``: the best of ``rounds`` measurements,
    each repeating ``run`` for about ``target_s`` seconds."""
    run()  # compile and warm up
    best = 0.0
    for _ in range(settings["rounds"]):
        reps, start = 0, time.perf_counter()
        while True:
            run()
            reps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= settings["target_s"]:
                break
        best = max(best, reps * items / elapsed)
    return best


def _interleaved_us(settings, devices, calls):
    """Rows of the best µs per call (wall, blocking on the result) of each
    ``impl: (fun, arg)`` in ``calls``, measured in interleaved rounds so all
    see the same machine load."""
    us = dict.fromkeys(calls, float("inf"))
    for _ in range(2):
        for impl, (fun, arg) in calls.items():
            rate = _best_rate(lambda: fun(arg).block_until_ready(), 1, settings)
            us[impl] = min(us[impl], 1e6 / rate)
    hcb.barrier_wait()
    jax.effects_barrier()
    return [{"impl": impl, "value": v, "unit": "us/call", "devices": len(devices)}
            for impl, v in us.items()]


def _tap_loop(tap):
    return jax.jit(lambda x: jax.lax.fori_loop(0, LOOP_TAPS, lambda i, c: tap(c + 1.0), x))


@feature_case("host_callback_id_tap_taps_per_s", baseline="jax.debug.callback",
              higher_is_better=True)
def taps_per_second(settings):
    count = [0]

    def on_tap(arg, transforms):
        count[0] += 1

    def on_debug(arg):
        count[0] += 1

    def debug_tap(c):
        jax.debug.callback(on_debug, c, ordered=True)
        return c

    ours = _tap_loop(lambda c: hcb.id_tap(on_tap, c))
    theirs = _tap_loop(debug_tap)
    x = jnp.float32(0)

    def run_ours():
        ours(x).block_until_ready()
        hcb.barrier_wait()

    def run_theirs():
        theirs(x).block_until_ready()
        jax.effects_barrier()
    rates = {"pmapkit": 0.0, "jax.debug.callback": 0.0}
    for _ in range(2):  # interleaved, so both see the same machine load
        rates["pmapkit"] = max(rates["pmapkit"], _best_rate(run_ours, LOOP_TAPS, settings))
        rates["jax.debug.callback"] = max(rates["jax.debug.callback"],
                                          _best_rate(run_theirs, LOOP_TAPS, settings))
    return [{"impl": impl, "value": rate, "unit": "taps/s", "taps_per_call": LOOP_TAPS}
            for impl, rate in rates.items()]


@feature_case("host_callback_id_tap_pmap_cached_call_us",
              baseline="jax.pmap+debug.callback", higher_is_better=False)
def pmap_cached_call(settings):
    devices = jax.local_devices()

    def on_tap(arg, transforms):
        pass
    with_tap = pmap(lambda x: hcb.id_tap(on_tap, x) + 1.0)
    without = pmap(lambda x: x + 1.0)

    def debug_body(x):
        jax.debug.callback(lambda a: None, x)
        return x + 1.0
    reference = jax.pmap(debug_body)
    x = jax.device_put(np.zeros(len(devices), np.float32))
    x = without(x)  # placed as the programs want it
    return _interleaved_us(settings, devices, {
        "pmapkit": (with_tap, x), "jax.pmap+debug.callback": (reference, x),
        "pmapkit_no_tap": (without, x)})


@feature_case("host_callback_id_tap_nested_pmap_cached_call_us",
              baseline="jax.shard_map+debug.callback", higher_is_better=False)
def nested_pmap_cached_call(settings):
    devices = jax.local_devices()
    outer = 2 if len(devices) % 2 == 0 and len(devices) > 1 else 1
    shape = (outer, len(devices) // outer)

    def on_tap(arg, transforms):
        pass
    with_tap = pmap(pmap(lambda x: hcb.id_tap(on_tap, x) + 1.0))
    x = with_tap(jax.device_put(np.zeros(shape, np.float32)))  # placed as wanted

    # The program pmap of pmap is: every device of a two-axis mesh taps its
    # element once and adds one.
    mesh = Mesh(np.array(devices).reshape(shape), ("i", "j"))
    spec = PartitionSpec("i", "j")

    def debug_body(v):
        jax.debug.callback(lambda a: None, v)
        return v + 1.0
    reference = jax.jit(jax.shard_map(debug_body, mesh=mesh, in_specs=spec,
                                      out_specs=spec))
    y = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    return _interleaved_us(settings, devices, {
        "pmapkit": (with_tap, x), "jax.shard_map+debug.callback": (reference, y)})


def _host(a):
    return a


def _on_device_array(num_devices):
    """A float32 array over the first ``num_devices`` devices (4 elements
    each), and the mesh it is sharded on."""
    devices = jax.local_devices()[:num_devices]
    mesh = Mesh(np.array(devices), ("d",))
    x = jax.device_put(np.zeros(len(devices) * 4, np.float32),
                       NamedSharding(mesh, PartitionSpec("d")))
    return devices, x


def _call_vs_pure_callback(settings, num_devices):
    devices, x = _on_device_array(num_devices)
    ours = jax.jit(lambda v: hcb.call(_host, v, result_shape=v) + 1.0)
    theirs = jax.jit(lambda v: jax.pure_callback(
        _host, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1.0)
    return _interleaved_us(settings, devices, {"pmapkit": (ours, x),
                                               "jax.pure_callback": (theirs, x)})


@feature_case("host_callback_call_jit_us", baseline="jax.pure_callback",
              higher_is_better=False)
def call_jit(settings):
    return _call_vs_pure_callback(settings, 1)


@feature_case("host_callback_call_jit_8dev_us", baseline="jax.pure_callback",
              higher_is_better=False)
def call_jit_8dev(settings):
    return _call_vs_pure_callback(settings, min(8, len(jax.local_devices())))


@feature_case("host_callback_call_model_apply_us", baseline="jax.pure_callback",
              higher_is_better=False)
def call_model_apply(settings):
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.normal(size=(16, 32)), jnp.float32),
              "w2": jnp.asarray(rng.normal(size=(32, 4)), jnp.float32)}
    batch = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)

    def host_act(h):
        return np.tanh(h)

    def apply(activation):
        def model(inputs):
            p, xb = inputs
            return activation(jax.nn.relu(xb @ p["w1"])) @ p["w2"]
        return jax.jit(model)
    ours = apply(lambda h: hcb.call(host_act, h, result_shape=h))
    theirs = apply(lambda h: jax.pure_callback(
        host_act, jax.ShapeDtypeStruct(h.shape, h.dtype), h))
    arg = (params, batch)
    return _interleaved_us(settings, jax.local_devices()[:1], {
        "pmapkit": (ours, arg), "jax.pure_callback": (theirs, arg)})


class _NullStream:
    def write(self, text):
        return len(text)


def _tap_vs_debug_callback(settings, num_devices, printing=False):
    devices, x = _on_device_array(num_devices)
    stream = _NullStream()
    if printing:
        def on_debug(a):
            stream.write(np.array2string(np.asarray(a)) + "\n")
        ours = jax.jit(lambda v: hcb.id_print(v, output_stream=stream) + 1.0)
    else:
        def on_tap(arg, transforms):
            pass

        def on_debug(a):
            pass
        ours = jax.jit(lambda v: hcb.id_tap(on_tap, v) + 1.0)

    def debug_body(v):
        jax.debug.callback(on_debug, v)
        return v + 1.0
    theirs = jax.jit(debug_body)
    return _interleaved_us(settings, devices, {"pmapkit": (ours, x),
                                               "jax.debug.callback": (theirs, x)})


@feature_case("host_callback_id_tap_jit_us", baseline="jax.debug.callback",
              higher_is_better=False)
def id_tap_jit(settings):
    return _tap_vs_debug_callback(settings, 1)


@feature_case("host_callback_id_tap_jit_8dev_us", baseline="jax.debug.callback",
              higher_is_better=False)
def id_tap_jit_8dev(settings):
    return _tap_vs_debug_callback(settings, min(8, len(jax.local_devices())))


@feature_case("host_callback_id_print_jit_us", baseline="jax.debug.callback",
              higher_is_better=False)
def id_print_jit(settings):
    return _tap_vs_debug_callback(settings, 1, printing=True)


def _call_vs_io_callback(settings, wrap):
    """µs per cached call of ``wrap(body)`` for a body with one ``hcb.call``
    and one with ``io_callback(ordered=True)``, both returning their input
    plus one, on an array over every device."""
    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("d",))
    x = jax.device_put(np.zeros(len(devices) * 4, np.float32),
                       NamedSharding(mesh, PartitionSpec("d")))

    def host(a):
        return a
    ours = wrap(lambda v: hcb.call(host, v, result_shape=v) + 1.0, mesh)
    theirs = wrap(lambda v: io_callback(host, jax.ShapeDtypeStruct(v.shape, v.dtype),
                                        v, ordered=True) + 1.0, mesh)
    return _interleaved_us(settings, devices, {"pmapkit": (ours, x),
                                               "jax.io_callback": (theirs, x)})


@feature_case("host_callback_call_whole_mesh_jit_us", baseline="jax.io_callback",
              higher_is_better=False)
def call_whole_mesh_jit(settings):
    return _call_vs_io_callback(settings, lambda body, mesh: jax.jit(body))


@feature_case("host_callback_call_shard_map_us", baseline="jax.io_callback",
              higher_is_better=False)
def call_shard_map(settings):
    def wrap(body, mesh):
        spec = PartitionSpec("d")
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    return _call_vs_io_callback(settings, wrap)


def _interleaved_process_cpu_us(settings, calls, per_round=200):
    """Rows of the median process-CPU µs per call (blocking on the result)
    of each ``impl: (fun, arg)`` in ``calls``, in interleaved rounds."""
    samples = {impl: [] for impl in calls}
    for fun, arg in calls.values():
        for _ in range(20):
            fun(arg).block_until_ready()
    for k in range(max(3, settings["rounds"])):
        order = list(calls.items())
        if k % 2:
            order.reverse()
        for impl, (fun, arg) in order:
            c0 = time.process_time()
            for _ in range(per_round):
                fun(arg).block_until_ready()
            samples[impl].append((time.process_time() - c0) / per_round * 1e6)
    hcb.barrier_wait()
    return [{"impl": impl, "value": float(np.median(v)), "unit": "us/call process cpu",
             "rounds": len(v), "devices": 8} for impl, v in samples.items()]


@feature_case("host_callback_call_jit_8dev_cpu_us", baseline="jax.pure_callback",
              higher_is_better=False)
def call_jit_8dev_cpu(settings):
    devices, x = _on_device_array(min(8, len(jax.local_devices())))
    ours = jax.jit(lambda v: hcb.call(_host, v, result_shape=v) + 1.0)
    theirs = jax.jit(lambda v: jax.pure_callback(
        _host, jax.ShapeDtypeStruct(v.shape, v.dtype), v) + 1.0)
    return _interleaved_process_cpu_us(settings, {"pmapkit": (ours, x),
                                                  "jax.pure_callback": (theirs, x)})


@feature_case("host_callback_id_tap_jit_8dev_cpu_us", baseline="jax.debug.callback",
              higher_is_better=False)
def id_tap_jit_8dev_cpu(settings):
    devices, x = _on_device_array(min(8, len(jax.local_devices())))

    def on_tap(arg, transforms):
        pass

    def on_debug(a):
        pass
    ours = jax.jit(lambda v: hcb.id_tap(on_tap, v) + 1.0)

    def debug_body(v):
        jax.debug.callback(on_debug, v)
        return v + 1.0
    return _interleaved_process_cpu_us(settings, {"pmapkit": (ours, x),
                                                  "jax.debug.callback": (jax.jit(debug_body), x)})
