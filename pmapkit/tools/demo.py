"""The demo: a data-parallel training loop on 8 simulated CPU devices.

``pmapkit demo`` / ``python -m pmapkit`` (see pmapkit/tools/cli.py) run it.

Linear regression, one batch shard per device; each device computes its
gradient, ``lax.pmean`` averages them over the device axis, every device
applies the same update. The same step runs under ``pmapkit.pmap`` and
``jax.pmap`` and the demo checks that both agree at every step.

Under ``pmapkit launch -n N`` it joins the run first, and each process feeds
its block of the same global batch (one shard per device of the run): the
losses are those of one process driving all the devices.

"""
import os

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


def train(pmap_impl, steps=20, lr=0.1):
    import jax
    import jax.numpy as jnp
    import numpy as np

    n = jax.local_device_count()
    total = jax.device_count()   # all processes' devices: one shard each
    rng = np.random.default_rng(0)
    true_w = np.array([2.0, -3.0, 0.5, 1.0], np.float32)
    x = rng.normal(size=(total, 32, 4)).astype(np.float32)
    y = x @ true_w + 0.7 + 0.01 * rng.normal(size=(total, 32)).astype(np.float32)
    # This process's block (all of it on one process).
    mine = slice(jax.process_index() * n, (jax.process_index() + 1) * n)
    x, y = x[mine], y[mine]

    def loss_fn(params, xb, yb):
        w, b = params
        return jnp.mean((xb @ w + b - yb) ** 2)

    def step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        grads = jax.lax.pmean(grads, "batch")
        loss = jax.lax.pmean(loss, "batch")
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return params, loss

    p_step = pmap_impl(step, axis_name="batch")
    # Replicate the parameters: one copy per device along the mapped axis.
    params = (np.zeros((n, 4), np.float32), np.zeros((n,), np.float32))
    losses = []
    for _ in range(steps):
        params, loss = p_step(params, x, y)
        losses.append(float(loss[0]))
    return losses, params, p_step


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
    return 0 if agree else 1

