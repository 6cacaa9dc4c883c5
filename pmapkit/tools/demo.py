"""The demo: a data-parallel training loop on 8 simulated CPU devices.

``pmapkit demo`` / ``python -m pmapkit`` (see pmapkit/tools/cli.py) run it.

Linear regression, one batch shard per device; each device computes its
gradient, ``lax.pmean`` averages them over the device axis, every device
applies the same update. The same step runs under ``pmapkit.pmap`` and
``jax.pmap`` and the demo checks that both agree at every step.

Then the cost of one step, three ways (``step_costs``): ``pmapkit.pmap``,
``jax.pmap`` and ``jax.jit`` of ``jax.shard_map`` over the same step (what
``jax.pmap`` is built from in jax 0.10, and what ``pmapkit migrate`` writes):
caller-thread CPU per call, the work of dispatching it (the devices' work
runs on XLA's threads and is left out). ``pmapkit bench`` measures more.

Under ``pmapkit launch -n N`` it joins the run first, and each process feeds
its block of the same global batch (one shard per device of the run): the
losses are those of one process driving all the devices.

"""
import os
import statistics
import time

NUM_DEVICES = 8


def configure_devices():
    # Must run before jax creates its CPU client (importing jax does not).
    from pmapkit import distributed
    if distributed.launched():
        return  # the launcher gave each process its devices
    flag = f"--xla_force_host_platform_device_count={NUM_DEVICES}"
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import jax
    jax.config.update("jax_num_cpu_devices", NUM_DEVICES)


#: The step timing: rounds of steps per impl, the order reversed every other
#: round; steps are timed in chunks, each chunk's results waited for untimed.
TIMING_ROUNDS = 5
TIMING_STEPS = 100
# XLA:CPU aborts when ~100 calls of a program with a collective are queued
# without waiting (JAX_NOTES); 10 keeps far from it.
TIMING_CHUNK = 10


def make_step(lr=0.1):
    """One training step of the demo's linear regression, for a pmap: the
    per-device batch in, the gradients averaged over axis ``batch``."""
    import jax
    import jax.numpy as jnp

    def loss_fn(params, xb, yb):
        w, b = params
        return jnp.mean((xb @ w + b - yb) ** 2)

    def step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        grads = jax.lax.pmean(grads, "batch")
        loss = jax.lax.pmean(loss, "batch")
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return params, loss
    return step


def make_batch():
    """(x, y, n): this process's block of the global batch, one row per local
    device (all of it on one process), and the local device count."""
    import jax
    import numpy as np

    n = jax.local_device_count()
    total = jax.device_count()   # all processes' devices: one shard each
    rng = np.random.default_rng(0)
    true_w = np.array([2.0, -3.0, 0.5, 1.0], np.float32)
    x = rng.normal(size=(total, 32, 4)).astype(np.float32)
    y = x @ true_w + 0.7 + 0.01 * rng.normal(size=(total, 32)).astype(np.float32)
    mine = slice(jax.process_index() * n, (jax.process_index() + 1) * n)
    return x[mine], y[mine], n


def initial_params(n):
    """The parameters replicated: one copy per device along the mapped axis."""
    import numpy as np
    return (np.zeros((n, 4), np.float32), np.zeros((n,), np.float32))


def train(pmap_impl, steps=20, lr=0.1):
    x, y, n = make_batch()
    p_step = pmap_impl(make_step(lr), axis_name="batch")
    params = initial_params(n)
    losses = []
    for _ in range(steps):
        params, loss = p_step(params, x, y)
        losses.append(float(loss[0]))
    return losses, params, p_step


def jit_of_shard_map(step, mesh):
    """``step`` as ``jax.jit`` of ``jax.shard_map`` over ``mesh``'s axis
    ``batch``: each device sees its block with the leading axis of size 1,
    which the pmap form does not have."""
    import jax
    from jax.sharding import PartitionSpec as P

    def per_block(params, xb, yb):
        params, loss = step(jax.tree_util.tree_map(lambda a: a[0], params), xb[0], yb[0])
        return jax.tree_util.tree_map(lambda a: a[None], (params, loss))
    return jax.jit(jax.shard_map(per_block, mesh=mesh, in_specs=P("batch"),
                                 out_specs=P("batch")))


def step_costs(rounds=TIMING_ROUNDS, steps=TIMING_STEPS):
    """Caller-thread CPU µs per call of one training step (one process), one
    value per round: ``{"pmapkit.pmap": [us, ...], "jax.pmap": [...],
    "jax.jit": [...]}``.

    Every impl is fed the same batch, already on the devices, and its own
    parameters of the step before (a training loop); the devices' work runs on
    XLA's threads, outside the caller's CPU time."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import pmapkit

    x, y, n = make_batch()
    mesh = Mesh(np.array(jax.local_devices()), ("batch",))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("batch")))
    step = make_step()
    impls = {"pmapkit.pmap": pmapkit.pmap(step, axis_name="batch"),
             "jax.pmap": jax.pmap(step, axis_name="batch"),
             "jax.jit": jit_of_shard_map(step, mesh)}
    params = {}
    for name, fn in impls.items():   # compile, then warm up
        p = initial_params(n)
        for _ in range(TIMING_CHUNK):
            p, _ = fn(p, x, y)
        params[name] = jax.block_until_ready(p)

    def cpu_us(name):
        fn, p, spent = impls[name], params[name], 0.0
        for _ in range(steps // TIMING_CHUNK):
            start = time.thread_time()
            for _ in range(TIMING_CHUNK):
                p, loss = fn(p, x, y)
            spent += time.thread_time() - start
            jax.block_until_ready((p, loss))
        params[name] = p
        return spent / (steps // TIMING_CHUNK * TIMING_CHUNK) * 1e6

    samples = {name: [] for name in impls}
    for k in range(rounds):
        for name in (list(impls) if k % 2 == 0 else list(impls)[::-1]):
            samples[name].append(cpu_us(name))
    return samples


def format_costs(samples, steps=TIMING_STEPS):
    """The three-line comparison of ``step_costs``' rounds: each impl's
    min–median–max over the rounds, and the ratio of the medians, which is
    what to compare (the µs themselves follow the machine's load)."""
    rounds = min(len(v) for v in samples.values())
    median = {name: statistics.median(values) for name, values in samples.items()}
    ours = median["pmapkit.pmap"]
    # Within 100 columns, as every line the demo prints (caller-thread CPU:
    # the devices' work is not in it).
    lines = [f"per training step, caller-thread CPU µs over {rounds} rounds of {steps}, "
             "min – median – max:"]
    for name, label in (("pmapkit.pmap", "pmapkit.pmap"), ("jax.pmap", "jax.pmap"),
                        ("jax.jit", "jax.jit(shard_map)")):
        values = samples[name]
        line = (f"  {label:<19}{min(values):>7.1f} – {median[name]:>6.1f} – "
                f"{max(values):>6.1f} µs")
        if name != "pmapkit.pmap":
            ratio = median[name] / ours
            line += (f"   pmapkit.pmap is {ratio:.2f}x faster" if ratio >= 1 else
                     f"   pmapkit.pmap is {1 / ratio:.2f}x slower")
        lines.append(line)
    lines.append("Compare the ratios (of the medians), not the µs, which follow the "
                 "machine's load;\nwhere two impls' min–max overlap, this run does not "
                 "tell them apart.")
    return "\n".join(lines)


def main(argv=(), prog="pmapkit demo"):
    """``pmapkit demo``: its options (only ``-h``), then the demo."""
    import argparse
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A data-parallel training loop (linear regression, one "
                    "batch shard per device, gradients averaged with pmean) on "
                    f"{NUM_DEVICES} simulated CPU devices, run under pmapkit.pmap "
                    "and jax.pmap and checked to agree at every step; then the "
                    "caller-thread CPU of one step under pmapkit.pmap, jax.pmap "
                    "and jax.jit of shard_map. Takes a few seconds. "
                    f"'{prog.rpartition(' ')[0]} bench' measures more.")
    parser.parse_args(list(argv))
    return demo()


def demo():
    configure_devices()
    import jax
    import numpy as np

    import pmapkit
    from pmapkit import distributed
    if distributed.launched() and not distributed.is_initialized():
        distributed.initialize()

    print(f"pmapkit {pmapkit.__version__} (compiled dispatch core: {pmapkit.COMPILED}), "
          f"jax {jax.__version__}, {jax.local_device_count()} devices: "
          f"{jax.devices()[0].platform}"
          + (f" (process {jax.process_index()} of {jax.process_count()}, "
             f"{jax.device_count()} devices in all)" if jax.process_count() > 1 else ""))
    ours, our_params, p_step = train(pmapkit.pmap)
    theirs, their_params, _ = train(jax.pmap)
    print(f"{'step':>4}  {'pmapkit loss':>14}  {'jax.pmap loss':>14}")
    for i, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{i:>4}  {a:>14.6f}  {b:>14.6f}")
    agree = np.allclose(ours, theirs, rtol=1e-5, atol=1e-6) and all(
        np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        for a, b in zip(our_params, their_params))
    w, b = (np.asarray(p[0]) for p in our_params)
    print(f"learned w={np.round(w, 3)} b={b:.3f}; compiled programs cached: "
          f"{p_step._cache_size}")
    print("pmapkit.pmap and jax.pmap agree" if agree else
          "MISMATCH: pmapkit.pmap and jax.pmap disagree")
    if jax.process_count() == 1:   # several processes: each would time only its part
        print()
        print(format_costs(step_costs()))
        if not pmapkit.COMPILED:
            print("(pmapkit's pure-Python build ran: its stderr line says why and how "
                  "to run the compiled one)")
    return 0 if agree else 1
