"""Per-call dispatch cost: pmapkit.pmap vs jax.pmap vs jax.jit, side by side.

Caller-thread CPU time (``time.thread_time``) per call, so device execution on
XLA's worker threads is left out; the body is ``x + 1`` and has no collectives
(XLA:CPU can deadlock with thousands of collective programs in flight). Each
impl runs ``--rounds`` interleaved rounds of ``--calls`` calls; the median
round is reported, with ratios to jax.pmap and jax.jit from the same run.

    python bench/dispatch_cost.py [--calls 2000] [--rounds 7]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import pmapkit  # noqa: E402


def add_one(x):
    return x + 1


def make_impls(ndev):
    devices = jax.devices()[:ndev]
    mesh = Mesh(np.array(devices), ("i",))
    sharding = NamedSharding(mesh, P("i"))
    x = jax.device_put(jnp.arange(ndev, dtype=jnp.float32), sharding)
    ours = pmapkit.pmap(add_one, devices=devices)
    theirs = jax.pmap(add_one, devices=devices)
    jitted = jax.jit(add_one, in_shardings=sharding, out_shardings=sharding)
    # Each impl is fed its own output, the steady state of a training loop.
    return {"pmapkit.pmap": (ours, ours(x)), "jax.pmap": (theirs, theirs(x)),
            "jax.jit": (jitted, jitted(x))}


def cpu_us_per_call(fn, x, calls):
    out = None
    start = time.thread_time()
    for _ in range(calls):
        out = fn(x)
    elapsed = time.thread_time() - start
    out.block_until_ready()
    return elapsed / calls * 1e6


def measure(ndev, calls, rounds):
    impls = make_impls(ndev)
    for fn, x in impls.values():  # warm up: compile, fill caches
        for _ in range(50):
            fn(x)
        fn(x).block_until_ready()
    samples = {name: [] for name in impls}
    for _ in range(rounds):
        for name, (fn, x) in impls.items():
            samples[name].append(cpu_us_per_call(fn, x, calls))
    return {name: statistics.median(v) for name, v in samples.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"pmapkit compiled core: {pmapkit.COMPILED}; jax {jax.__version__}; "
          f"caller-thread CPU us/call, median of {args.rounds} x {args.calls} calls")
    print(f"{'devices':>7}  {'impl':<13} {'us/call':>8}  {'/jax.pmap':>9}  {'/jax.jit':>8}")
    for ndev in (1, 8):
        res = measure(ndev, args.calls, args.rounds)
        for name, us in res.items():
            print(f"{ndev:>7}  {name:<13} {us:>8.2f}  {us / res['jax.pmap']:>9.2f}  "
                  f"{us / res['jax.jit']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
