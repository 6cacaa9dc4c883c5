import numpy as np

import jax
import jax.numpy as jnp

devices = jax.local_devices()
replicated = jax.device_put_replicated({"w": np.arange(3.0)}, devices)
print("replicated", replicated["w"].shape, [d.id for d in replicated["w"].devices()] == [d.id for d in devices])
sharded = jax.device_put_sharded([np.full((2,), float(k)) for k in range(len(devices))], devices)
print("sharded", sharded.shape, [b.tolist() for b in sharded.device_buffers][:3])
out = jax.pmap(lambda v: v * 2)(sharded)
buffers = out.device_buffers
print("pmap buffers", len(buffers), buffers[1].shape, float(buffers[3][0]),
      [b.device.id for b in buffers][:4])
single = jax.jit(lambda v: v + 1)(jnp.arange(4.0))
print("single", single.device_buffer.shape, len(single.device_buffers),
      single.device_buffers[0].tolist())
