"""A classic script whose pmaps are built inline, run by ``pmapkit run
--route-pmap`` (``jax.pmap`` is pmapkit's) and as is (JAX's own pmap).

``inline_pmaps_script_route_pmap_8_devices``: wall µs per iteration of
``inline_pmaps_script.py`` (a fresh ``jax.pmap(step)`` of one function and a
fresh ``jax.pmap`` of a lambda made anew, each iteration), the median of
each process's iterations; the two runs alternate, rounds of fresh
processes, and the medians of the rounds are reported (with the process
CPU µs per iteration, every thread, in ``cpu_us``: steadier on a loaded
host).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

from pmapkit.bench.features import feature_case

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


def _per_iteration_us(route_pmap):
    command = ([sys.executable, "-m", "pmapkit", "run", "--route-pmap"]
               if route_pmap else [sys.executable])
    return run_script(command + [SCRIPT])


@feature_case("inline_pmaps_script_route_pmap_8_devices", baseline="jax.pmap",
              higher_is_better=False)
def inline_pmaps_script(settings):
    rounds = max(3, settings["rounds"] // 2)
    samples = {"jax.pmap": [], "pmapkit": []}
    cpu = {"jax.pmap": [], "pmapkit": []}
    checksums = set()
    for k in range(rounds):
        order = [("jax.pmap", False), ("pmapkit", True)]
        for impl, route in (order if k % 2 == 0 else order[::-1]):
            us, cpu_us, checksum = _per_iteration_us(route)
            samples[impl].append(us)
            cpu[impl].append(cpu_us)
            checksums.add(checksum)
    if len(checksums) != 1:
        raise RuntimeError(f"the two runs disagree: checksums {sorted(checksums)}")
    return [{"impl": impl, "value": statistics.median(v), "unit": "us/iteration (wall)",
             "rounds": v, "cpu_us": statistics.median(cpu[impl]),
             "cpu_us_rounds": cpu[impl]} for impl, v in samples.items()]
