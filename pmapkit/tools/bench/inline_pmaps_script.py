"""A classic script that builds its pmaps inline (``pmapkit bench``'s
``inline_pmaps_script_*`` case runs it as is and under ``pmapkit run
--route-pmap``): every iteration ``jax.pmap(step)(x)`` of one function and
``jax.pmap(lambda v: psum(v, 'i'), 'i')(y)`` of a lambda made anew.

    python inline_pmaps_script.py [ITERATIONS]

Prints ``per_iteration_us`` (the median wall time of an iteration, blocking
on its result; the first three left out), ``per_iteration_cpu_us`` (the
process's CPU time, every thread, over the same iterations, on average: steadier
than wall time on a loaded host) and a checksum.
"""
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def step(x):
    return jnp.tanh(x) * 0.5 + 1.0


def main(iterations):
    n = jax.local_device_count()
    x = np.arange(n * 64, dtype=np.float32).reshape(n, 64) / 100
    times = []
    for k in range(iterations):
        if k == 3:
            cpu_start = time.process_time()
        start = time.perf_counter()
        x = jax.pmap(step)(x)
        y = jax.pmap(lambda v: lax.psum(v, "i"), "i")(x)
        jax.block_until_ready(y)
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu_start) / (iterations - 3)
    print(f"per_iteration_us {statistics.median(times[3:]) * 1e6:.1f}")
    print(f"per_iteration_cpu_us {cpu * 1e6:.1f}")
    print(f"checksum {float(jnp.sum(y)):.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
