"""Where the time of three of the core's measured costs goes (issue 43, item 5).

The bench rows (``pmapkit bench --cases ...``) give each cost as one ratio;
this splits it, side by side with JAX in one process (or alternating new
processes), to tell pmapkit's part from JAX's:

- ``fresh``: ``pmapkit.pmap(f, ...)(x)`` with a new wrapper every call, as
  its build (options keyed and looked up, the dispatch function made), its
  first call, and its drop, against a kept wrapper's call and
  ``jax.pmap``'s fresh wrapper; caller-thread CPU per call.
- ``export``: a loaded artifact's first call in a new process (a 10-layer
  MLP, as ``export_load_first_call_new_process``), split by JAX's own
  monitoring events (trace, lowering to MLIR, backend compile); process CPU
  and wall, new processes alternating ``jax.export`` / pmapkit. SciPy, which
  JAX's LAPACK setup imports inside either first call, is imported before
  the clock starts.
- ``host_callback``: ``host_callback.call`` in an 8-device ``jax.jit``
  against ``jax.pure_callback``, JAX's own per-device ``io_callback`` in a
  ``shard_map`` (a crossing into Python per device) and the same program
  without a callback; wall and process CPU per call.

    python bench/costs_breakdown.py fresh|export|host_callback [--rounds N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_FORCE_8 = "--xla_force_host_platform_device_count=8"


def fresh(rounds):
    os.environ.setdefault("XLA_FLAGS", _FORCE_8)
    import gc

    import jax
    import numpy as np

    import pmapkit

    devices = jax.devices()

    def scale_shift(x):
        return x * 2.0 + 1.0

    host = np.ones((len(devices), 16), np.float32)
    x = pmapkit.pmap(scale_shift, axis_name="i", devices=devices)(host)
    xj = jax.pmap(scale_shift, axis_name="i", devices=devices)(host)
    kept = pmapkit.pmap(scale_shift, axis_name="i", devices=devices)
    n = 2000
    rows = {k: [] for k in ("build", "first call", "drop", "kept call",
                            "pmapkit fresh (all)", "jax.pmap fresh (all)")}
    clock = time.thread_time
    for _ in range(rounds):
        gc.disable()
        t0 = clock()
        made = [pmapkit.pmap(scale_shift, axis_name="i", devices=devices)
                for _ in range(n)]
        t1 = clock()
        for w in made:
            w(x).block_until_ready()
        t2 = clock()
        del made, w
        t3 = clock()
        for _ in range(n):
            kept(x).block_until_ready()
        t4 = clock()
        gc.enable()
        for _ in range(n):
            pmapkit.pmap(scale_shift, axis_name="i", devices=devices)(x).block_until_ready()
        t5 = clock()
        for _ in range(n):
            jax.pmap(scale_shift, axis_name="i", devices=devices)(xj).block_until_ready()
        t6 = clock()
        for key, (a, b) in zip(rows, [(t0, t1), (t1, t2), (t2, t3), (t3, t4),
                                      (t4, t5), (t5, t6)]):
            rows[key].append((b - a) / n * 1e6)
    for key, values in rows.items():
        print(f"{key:24s} {statistics.median(values):7.2f} µs caller-thread CPU")
    ratio = statistics.median(a / b for a, b in zip(rows["pmapkit fresh (all)"],
                                                     rows["jax.pmap fresh (all)"]))
    print(f"fresh wrapper per call: {ratio:.3f}x jax.pmap (median of {rounds} rounds, "
          f"{len(devices)} devices)")


_EXPORT_CHILD = r"""
import json, sys, time
import jax, numpy as np
from jax import monitoring
import scipy.linalg  # JAX's LAPACK setup imports it in either first call
impl, path = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    blob = f.read()
x = np.ones((8, 256), np.float32)
jax.devices()
ms = {}
def listen(event, duration, **kwargs):
    name = event.rsplit("/", 1)[-1]
    ms[name] = ms.get(name, 0.0) + duration * 1e3
monitoring.register_event_duration_secs_listener(listen)
c0, t0 = time.process_time(), time.perf_counter()
if impl == "jax.export":
    from jax import export as loader
else:
    from pmapkit import export as loader
loaded = loader.deserialize(blob)
c1, t1 = time.process_time(), time.perf_counter()
jax.block_until_ready(loaded.call(x))
c2, t2 = time.process_time(), time.perf_counter()
ms.update(cpu_import_and_deserialize=(c1 - c0) * 1e3, cpu_first_call=(c2 - c1) * 1e3,
          cpu_total=(c2 - c0) * 1e3, wall_total=(t2 - t0) * 1e3)
print(json.dumps(ms))
"""


def export(rounds):
    os.environ.pop("XLA_FLAGS", None)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax import export as jax_export

    from pmapkit import export as pe
    from pmapkit.tools.bench.features_export import BATCH, WIDTH, _mlp

    spec = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    samples = {"jax.export": [], "pmapkit": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {impl: os.path.join(tmp, impl) for impl in samples}
        with open(paths["jax.export"], "wb") as f:
            f.write(jax_export.export(jax.jit(_mlp(1.0)))(spec).serialize())
        with open(paths["pmapkit"], "wb") as f:
            f.write(pe.serialize(pe.export(_mlp(1.0))(spec)))

        def run(impl):
            proc = subprocess.run([sys.executable, "-c", _EXPORT_CHILD, impl, paths[impl]],
                                  env=env, capture_output=True, text=True, timeout=300,
                                  check=True)
            return json.loads(proc.stdout.strip().splitlines()[-1])

        for impl in samples:
            run(impl)  # bytecode written, files cached
        for k in range(rounds):
            for impl in (list(samples) if k % 2 == 0 else list(samples)[::-1]):
                samples[impl].append(run(impl))
    for key in sorted(set().union(*samples["pmapkit"], *samples["jax.export"])):
        theirs = [s.get(key, 0.0) for s in samples["jax.export"]]
        ours = [s.get(key, 0.0) for s in samples["pmapkit"]]
        ratio = (statistics.median(b / a for a, b in zip(theirs, ours))
                 if all(theirs) else float("nan"))
        print(f"{key:34s} jax.export {statistics.median(theirs):8.1f} ms   pmapkit "
              f"{statistics.median(ours):8.1f} ms   per-round ratio {ratio:.3f}")


def host_callback(rounds):
    os.environ.setdefault("XLA_FLAGS", _FORCE_8)
    import jax
    import numpy as np
    from jax.experimental import io_callback
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from pmapkit import host_callback as hcb

    def echo(a):
        return a

    devices = jax.local_devices()[:8]
    mesh = Mesh(np.array(devices), ("d",))
    x = jax.device_put(np.zeros(4 * len(devices), np.float32), NamedSharding(mesh, P("d")))
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def per_device(body):
        return jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)

    impls = {
        "host_callback.call": jax.jit(lambda v: hcb.call(echo, v, result_shape=v) + 1.0),
        "jax.pure_callback": jax.jit(lambda v: jax.pure_callback(echo, sds, v) + 1.0),
        "io_callback on every device": jax.jit(
            lambda v: per_device(lambda w: io_callback(echo, sds, w))(v) + 1.0),
        "no callback": jax.jit(lambda v: per_device(lambda w: w * 1.0)(v) + 1.0),
    }
    for fun in impls.values():
        fun(x).block_until_ready()

    def measure(fun, n=200):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            fun(x).block_until_ready()
        return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6

    results = {name: [] for name in impls}
    for k in range(rounds):
        for name in (list(impls) if k % 2 == 0 else list(impls)[::-1]):
            results[name].append(measure(impls[name]))
    base = results["jax.pure_callback"]
    for name, values in results.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        ratio = statistics.median(a[0] / b[0] for a, b in zip(values, base))
        print(f"{name:28s} wall {wall:8.1f} µs ({ratio:.2f}x pure_callback)   "
              f"process CPU {cpu:8.1f} µs")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("fresh", "export", "host_callback"))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    {"fresh": fresh, "export": export, "host_callback": host_callback}[args.what](args.rounds)


if __name__ == "__main__":
    main()
