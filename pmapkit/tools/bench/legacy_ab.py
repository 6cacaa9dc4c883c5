"""``python -m pmapkit.tools.bench.legacy_ab [--rounds N]``: the hit path with and
without ``pmapkit.legacy.install()``.

Installing is process-wide and cannot be undone, so the sides run in fresh
processes, interleaved round by round: A (nothing installed), B
(``install(route_pmap=True)``), C (the same with ``report=True``). Each
measures caller-thread CPU microseconds per cached call (``time.thread_time``)
of a pmapkit pmap on 8 devices, a mesh-less pjit run as jax.jit, a pjit over
an 8-device mesh, and jax.jit as a control; the report prints the medians
over rounds and the ratios B/A and C/A.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIDES = ("A", "B", "C")
CASES = ("pmap 8 devices", "pjit as jit", "pjit 8-device mesh", "jax.jit (control)")


def _per_call_us(fn, arg, calls, repeats=7):
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            out = fn(arg)
        out.block_until_ready()
        samples.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(samples)


def _measure(side):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import pmapkit
    if side != "A":
        import pmapkit.legacy
        pmapkit.legacy.install(route_pmap=True, report=side == "C")
    from jax.sharding import PartitionSpec as P
    mesh = pmapkit.Mesh(np.array(jax.devices()), ("x",))
    pjit_mesh = pmapkit.pjit(lambda v: v * 2, P("x"), P("x"))

    def on_mesh(v):
        with mesh:
            return pjit_mesh(v)

    cases = [(pmapkit.pmap(lambda v: v + 1), jnp.zeros((8, 4)), 200),
             (pmapkit.pjit(lambda v: v * 2), jnp.zeros(4), 2000),
             (on_mesh, jnp.zeros(16), 200),
             (jax.jit(lambda v: v * 2), jnp.zeros(4), 2000)]
    placed = []
    for fn, arg, calls in cases:
        arg = fn(arg)        # the miss, and an input placed as the program wants
        placed.append((fn, arg, calls))
        _per_call_us(fn, arg, max(calls // 10, 5), repeats=2)
    return [_per_call_us(fn, arg, calls) for fn, arg, calls in placed]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pmapkit.tools.bench.legacy_ab")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(_measure(args.side)))
        return 0
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    results = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        for side in SIDES:
            proc = subprocess.run(
                [sys.executable, "-m", "pmapkit.tools.bench.legacy_ab", "--side", side],
                capture_output=True, text=True, env=env, timeout=600, check=True)
            results[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    medians = {side: [statistics.median(r[k] for r in rows) for k in range(len(CASES))]
               for side, rows in results.items()}
    print(f"legacy A/B, {args.rounds} interleaved rounds, us/call caller-thread CPU "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'case':20s} {'A plain':>9s} {'B installed':>12s} {'C +report':>10s} "
          f"{'B/A':>6s} {'C/A':>6s}")
    for k, case in enumerate(CASES):
        a, b, c = (medians[s][k] for s in SIDES)
        print(f"{case:20s} {a:9.2f} {b:12.2f} {c:10.2f} {b / a:6.2f} {c / a:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
