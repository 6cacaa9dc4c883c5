"""A classic script whose pmaps are built inline, run by ``pmapkit run
--route-pmap`` (``jax.pmap`` is pmapkit's) and as is (JAX's own pmap).

``inline_pmaps_script_route_pmap_8_devices``: wall µs per iteration of
``inline_pmaps_script.py`` (a fresh ``jax.pmap(step)`` of one function and a
fresh ``jax.pmap`` of a lambda made anew, each iteration), the median of
each process's iterations; the two runs alternate, rounds of fresh
processes, and the medians of the rounds are reported (with the process
CPU µs per iteration, every thread, in ``cpu_us``: steadier on a loaded
host).

``pmap_fresh_wrapper_8dev_process_cpu_us``: ``pmap(f, axis_name='i')(x)``
with a new wrapper every call on 8 devices, each call blocking, in process
CPU µs per call (every thread: the caller's and XLA's), pmapkit against
``jax.pmap``; interleaved rounds, median (the dispatch case
``pmap_fresh_wrapper_8_devices`` gives the caller's thread).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

from pmapkit.tools.bench.features import feature_case

#: The classic script both this case and ``features_migrate`` run.
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inline_pmaps_script.py")
_TIMEOUT_S = 300
_ITERATIONS = 20


def run_script(command):
    """Run ``command`` (an interpreter and a copy of ``SCRIPT``, or
    ``SCRIPT`` itself) on 8 CPU devices: (wall µs per iteration, process CPU
    µs per iteration, the run's checksum)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    proc = subprocess.run(command + [str(_ITERATIONS)], env=env, capture_output=True,
                          text=True, timeout=_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    return (float(lines["per_iteration_us"]), float(lines["per_iteration_cpu_us"]),
            lines["checksum"])


def alternating_rows(commands, settings, what=None):
    """Run each of ``commands`` (impl -> command running ``SCRIPT`` or a copy
    of it) in rounds of fresh processes, the order reversed every other
    round; one result row per impl: the median wall µs per iteration, the
    process CPU µs riding along, and, with ``what``, a "what" text per row
(``what[impl]``, else ``what[None]``). Raises if
    the runs' checksums disagree (they computed different things)."""
    rounds = max(3, settings["rounds"] // 2)
    wall = {impl: [] for impl in commands}
    cpu = {impl: [] for impl in commands}
    checksums = set()
    for k in range(rounds):
        order = list(commands.items())
        for impl, command in (order if k % 2 == 0 else order[::-1]):
            us, cpu_us, checksum = run_script(command)
            wall[impl].append(us)
            cpu[impl].append(cpu_us)
            checksums.add(checksum)
    if len(checksums) != 1:
        raise RuntimeError(f"the runs disagree: checksums {sorted(checksums)}")
    rows = []
    for impl, v in wall.items():
        row = {"impl": impl, "value": statistics.median(v), "unit": "us/iteration (wall)",
               "rounds": v, "cpu_us": statistics.median(cpu[impl]),
               "cpu_us_rounds": cpu[impl]}
        if what is not None:
            row["what"] = what.get(impl, what.get(None))
        rows.append(row)
    return rows


@feature_case("inline_pmaps_script_route_pmap_8_devices", baseline="jax.pmap",
              higher_is_better=False, fresh_processes=True)
def inline_pmaps_script(settings):
    return alternating_rows(
        {"jax.pmap": [sys.executable, SCRIPT],
         "pmapkit": [sys.executable, "-m", "pmapkit", "run", "--route-pmap", SCRIPT]},
        settings)


@feature_case("pmap_fresh_wrapper_8dev_process_cpu_us", baseline="jax.pmap",
              higher_is_better=False)
def fresh_wrapper_process_cpu(settings):
    import time

    import jax
    import numpy as np

    import pmapkit

    devices = jax.devices()[:8]

    def scale_shift(x):
        return x * 2.0 + 1.0

    host = np.arange(len(devices) * 16, dtype=np.float32).reshape(len(devices), 16)
    impls = {"pmapkit": pmapkit.pmap, "jax.pmap": jax.pmap}
    inputs = {name: pm(scale_shift, axis_name="i", devices=devices)(host)
              for name, pm in impls.items()}
    samples = {name: [] for name in impls}
    per_round = 200
    for k in range(max(3, settings["rounds"])):
        order = list(impls.items()) if k % 2 == 0 else list(impls.items())[::-1]
        for name, pm in order:
            x = inputs[name]
            c0 = time.process_time()
            for _ in range(per_round):
                pm(scale_shift, axis_name="i", devices=devices)(x).block_until_ready()
            samples[name].append((time.process_time() - c0) / per_round * 1e6)
    return [{"impl": name, "value": statistics.median(v), "unit": "us/call process cpu",
             "rounds": len(v), "devices": len(devices)} for name, v in samples.items()]
