"""Multi-process benchmark (``pmapkit bench --multiprocess``; not in --quick).

``pmap_psum_step_2x4_processes_wall`` / ``..._cpu``: one training-style step,
``x = f(x)`` with ``f`` a pmapped ``psum`` fed its own output, over 2 local
processes × 4 CPU devices started by ``pmapkit launch`` (loopback, gloo).
pmapkit.pmap and jax.pmap run in the same launch, in interleaved rounds of the
same number of steps (every process must make the same calls: each step is a
collective). Rank 0 reports the medians: wall µs per step (dispatch plus the
cross-process all-reduce) and the caller thread's CPU µs per step (dispatch).

This module is also the worker: ``python -m pmapkit.tools.bench.features_multiprocess OUT
CALLS ROUNDS`` under the launcher.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from pmapkit.tools.bench.features import feature_case

PROCESSES, DEVICES_PER_PROCESS = 2, 4
_TIMEOUT_S = 300
_cached: dict = {}


def _measure(settings):
    """Launch the worker once per bench run; both cases read its result."""
    key = (settings["rounds"], settings["target_s"])
    if key in _cached:
        return _cached[key]
    calls = max(100, int(settings["target_s"] * 10_000))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ)
        env.pop("XLA_FLAGS", None)  # the launcher sets each process's devices
        proc = subprocess.run(
            [sys.executable, "-m", "pmapkit", "launch", "-n", str(PROCESSES),
             "--devices-per-process", str(DEVICES_PER_PROCESS), "--timeout",
             str(_TIMEOUT_S), "-m", "pmapkit.tools.bench.features_multiprocess", out, str(calls),
             str(settings["rounds"])],
            env=env, capture_output=True, text=True, timeout=_TIMEOUT_S + 30)
        if proc.returncode != 0:
            raise RuntimeError("multi-process benchmark failed:\n"
                               + proc.stdout[-3000:] + proc.stderr[-2000:])
        with open(out) as f:
            _cached[key] = json.load(f)
    return _cached[key]


def _rows(result, what, unit):
    return [{"impl": impl, "value": result[impl][what], "unit": unit,
             "steps_per_round": result["calls"], "rounds": result["rounds"],
             "processes": PROCESSES, "devices_per_process": DEVICES_PER_PROCESS}
            for impl in ("jax.pmap", "pmapkit")]


@feature_case("pmap_psum_step_2x4_processes_wall", baseline="jax.pmap",
              higher_is_better=False, multiprocess=True)
def psum_step_wall(settings):
    return _rows(_measure(settings), "wall_us", "us/step (wall)")


@feature_case("pmap_psum_step_2x4_processes_cpu", baseline="jax.pmap",
              higher_is_better=False, multiprocess=True)
def psum_step_cpu(settings):
    return _rows(_measure(settings), "cpu_us", "us/step (cpu)")


def _worker(out, calls, rounds):
    import jax
    import numpy as np

    import pmapkit
    from pmapkit import distributed

    distributed.initialize()
    n = jax.local_device_count()

    def step(x):
        return jax.lax.psum(x, "i") * 0.125

    impls = {"jax.pmap": jax.pmap(step, axis_name="i"),
             "pmapkit": pmapkit.pmap(step, axis_name="i")}
    state = {name: f(np.ones((n, 128), np.float32)) for name, f in impls.items()}
    for name, f in impls.items():       # warm: compile, fill caches
        for _ in range(20):
            state[name] = f(state[name])
        state[name].block_until_ready()
    samples = {name: {"wall_us": [], "cpu_us": []} for name in impls}
    for _ in range(rounds):
        for name, f in impls.items():
            x = state[name]
            w0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                x = f(x)
                x.block_until_ready()
            samples[name]["wall_us"].append((time.perf_counter() - w0) / calls * 1e6)
            samples[name]["cpu_us"].append((time.thread_time() - c0) / calls * 1e6)
            state[name] = x
    if jax.process_index() == 0:
        result = {name: {k: statistics.median(v) for k, v in s.items()}
                  for name, s in samples.items()}
        result.update(calls=calls, rounds=rounds)
        with open(out, "w") as f:
            json.dump(result, f)
    distributed.shutdown()


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
