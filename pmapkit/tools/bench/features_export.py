"""Feature benchmark: load an exported model and run it once.

``export_mlp10_serialize_load_first_call_ms``: wall time of serialize +
deserialize + first call (compile included, result ready) of a 10-layer MLP
(256 wide, weights baked into the module as constants, ~2.6 MB payload) for
``jax.export`` (``Exported.serialize``, ``jax.export.deserialize``,
``Exported.call``) and ``pmapkit.export`` (its checked container: the same
payload plus header, CRC-32 of header and payload checked on load). Every
round loads a distinct artifact per impl (weights scaled per round), so no
compile is reused; impls alternate first. Median of rounds; lower is better.

``export_load_first_call_new_process``: what a program that only loads an
artifact pays: in a new Python process (``jax`` imported and its devices up
before the clock starts, as both need them), wall ms from importing the
loader (``from jax import export`` / ``from pmapkit import export``) through
``deserialize`` to the first call's result ready, for the same 10-layer MLP
artifact. A new process per round, impls alternating first; bytecode caching
on, as an installed package has it (a warm-up process per impl writes it).
Median of rounds; lower is better. ``export_load_first_call_new_process_cpu``:
the same processes' CPU time (every thread), from the loader's import to the
result.

``export_cached_call_us``: caller-thread CPU time (``time.thread_time``) per
top-level call + ``block_until_ready`` of a loaded artifact (``x * w + 1``,
8x16 float32, one CPU device) after its first call:
``jax.export``'s ``Exported.call`` against pmapkit's (argument checks in
jax.export's words, then its cached jit). Interleaved rounds, median; lower
is better.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from pmapkit.tools.bench.features import feature_case, interleaved_cpu_us

LAYERS, WIDTH, BATCH = 10, 256, 8


def _mlp(scale):
    rng = np.random.default_rng(0)
    weights = [(rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH) * scale).astype(np.float32)
               for _ in range(LAYERS)]

    def mlp(x):
        for w in weights:
            x = jnp.tanh(x @ w)
        return x

    return mlp


def _timed(exported, serialize, deserialize, x):
    """(total, serialize, deserialize, first call) in ms."""
    t0 = time.perf_counter()
    blob = serialize(exported)
    t1 = time.perf_counter()
    loaded = deserialize(blob)
    t2 = time.perf_counter()
    jax.block_until_ready(loaded.call(x))
    t3 = time.perf_counter()
    return [(t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]


@feature_case("export_mlp10_serialize_load_first_call_ms", baseline="jax.export",
              higher_is_better=False)
def serialize_load_first_call(settings):
    from jax import export as jax_export

    from pmapkit import export as pe

    rounds = 2 * settings.get("first_call_rounds", 3) + 1
    spec = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)
    x = np.ones((BATCH, WIDTH), np.float32)
    impls = {
        "jax.export": (lambda f: jax_export.export(jax.jit(f))(spec),
                       lambda e: e.serialize(), jax_export.deserialize),
        "pmapkit": (lambda f: pe.export(f)(spec), pe.serialize, pe.deserialize),
    }
    # Warm-up: the code paths (not the artifacts) of both impls.
    for make, ser, de in impls.values():
        _timed(make(_mlp(0.5)), ser, de, x)
    samples = {name: [] for name in impls}
    for k in range(rounds):
        order = list(impls.items())
        if k % 2:
            order.reverse()
        for n, (name, (make, ser, de)) in enumerate(order):
            exported = make(_mlp(1.0 + 1e-3 * (2 * k + n + 1)))
            samples[name].append(_timed(exported, ser, de, x))
    artifact = len(pe.serialize(pe.export(_mlp(1.0))(spec)))
    rows = []
    for name, values in samples.items():
        med = [statistics.median(v[i] for v in values) for i in range(4)]
        rows.append({"impl": name, "value": med[0], "unit": "ms", "rounds": rounds,
                     "serialize_ms": med[1], "deserialize_ms": med[2],
                     "first_call_ms": med[3], "artifact_bytes": artifact,
                     "layers": LAYERS, "width": WIDTH})
    return rows


_NEW_PROCESS_LOAD = """
import sys, time
import jax
import numpy as np
impl, path = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    blob = f.read()
x = np.ones(({batch}, {width}), np.float32)
jax.devices()
c0 = time.process_time()
t0 = time.perf_counter()
if impl == "jax.export":
    from jax import export as loader
else:
    from pmapkit import export as loader
t1 = time.perf_counter()
loaded = loader.deserialize(blob)
t2 = time.perf_counter()
jax.block_until_ready(loaded.call(x))
t3 = time.perf_counter()
c3 = time.process_time()
print((t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (c3 - c0) * 1e3)
""".format(batch=BATCH, width=WIDTH)


def _load_in_new_process(impl, path, env):
    """(total, import, deserialize, first call, process CPU) ms in a new
    process."""
    proc = subprocess.run([sys.executable, "-c", _NEW_PROCESS_LOAD, impl, path],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} load in a new process failed:\n{proc.stderr[-3000:]}")
    return [float(v) for v in proc.stdout.split()[-5:]]


@feature_case("export_load_first_call_new_process", baseline="jax.export",
              higher_is_better=False, fresh_processes=True)
def load_first_call_new_process(settings):
    return _new_process_rows(settings, cpu=False)


@feature_case("export_load_first_call_new_process_cpu", baseline="jax.export",
              higher_is_better=False, fresh_processes=True)
def load_first_call_new_process_cpu(settings):
    """The same, in process CPU ms (every thread: compiling runs on XLA's)."""
    return _new_process_rows(settings, cpu=True)


def _new_process_rows(settings, cpu):
    from jax import export as jax_export

    from pmapkit import export as pe

    rounds = 2 * settings.get("first_call_rounds", 3) + 1
    spec = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its .pyc
    env.pop("XLA_FLAGS", None)  # a one-device artifact: the default CPU device
    env.setdefault("JAX_PLATFORMS", "cpu")
    samples = {"jax.export": [], "pmapkit": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"jax.export": os.path.join(tmp, "jax.bin"),
                 "pmapkit": os.path.join(tmp, "pmapkit.bin")}
        with open(paths["jax.export"], "wb") as f:
            f.write(jax_export.export(jax.jit(_mlp(1.0)))(spec).serialize())
        with open(paths["pmapkit"], "wb") as f:
            f.write(pe.serialize(pe.export(_mlp(1.0))(spec)))
        for impl in samples:  # warm-up: bytecode written, files cached
            _load_in_new_process(impl, paths[impl], env)
        for k in range(rounds):
            order = list(samples) if k % 2 == 0 else list(samples)[::-1]
            for impl in order:
                samples[impl].append(_load_in_new_process(impl, paths[impl], env))
    rows = []
    for impl, values in samples.items():
        med = [statistics.median(v[i] for v in values) for i in range(5)]
        rows.append({"impl": impl, "value": med[4] if cpu else med[0],
                     "unit": "ms cpu" if cpu else "ms", "rounds": rounds,
                     "wall_ms": med[0], "import_ms": med[1], "deserialize_ms": med[2],
                     "first_call_ms": med[3], "process_cpu_ms": med[4]})
    return rows


def _call_cpu_us(call, args, calls):
    thread_time, block = time.thread_time, jax.block_until_ready
    c0 = thread_time()
    for _ in range(calls):
        block(call(*args))
    return (thread_time() - c0) / calls * 1e6


@feature_case("export_cached_call_us", baseline="jax.export", higher_is_better=False)
def cached_call(settings):
    from jax import export as jax_export

    from pmapkit import export as pe

    def layer(x, w):
        return x * w + 1   # elementwise: dispatch, not the matmul's threading

    specs = (jax.ShapeDtypeStruct((8, 16), jnp.float32),
             jax.ShapeDtypeStruct((8, 16), jnp.float32))
    impls = {
        "jax.export": jax_export.deserialize(
            jax_export.export(jax.jit(layer))(*specs).serialize()).call,
        "pmapkit": pe.deserialize(pe.serialize(pe.export(layer)(*specs))).call,
    }
    args = (jnp.ones((8, 16), jnp.float32), jnp.ones((8, 16), jnp.float32))
    return interleaved_cpu_us(impls, lambda call, n: _call_cpu_us(call, args, n),
                              settings, "jax.export", warmup=50, max_calls=20_000)
