"""A jaxline-style training loop's placement (JAX 0.2 era): ``jax.api`` used
as an attribute of ``jax``, never imported (classic ``jax/__init__`` imported
it)."""
import jax
import numpy as np

devices = jax.local_devices()
per_device = [np.full((2,), i, np.float32) for i in range(len(devices))]
params = jax.api.device_put_sharded(per_device, devices)
replicated = jax.api.device_put_replicated(np.float32(0.5), devices)
print("sharded", params.shape, float(params.sum()))
print("replicated", replicated.shape, float(replicated.sum()))
print("jit is jax.jit", jax.api.jit is jax.jit)
