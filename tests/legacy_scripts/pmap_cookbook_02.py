"""Follows the Pmap Cookbook (cloud_tpu_colabs/Pmap_Cookbook.ipynb, jax-v0.2.x,
github.com/google/jax): a pmap'd result is a ShardedDeviceArray whose
``device_buffers`` are the per-device pieces; a ring ``ppermute`` and a halo
written in with ``jax.ops.index_update``."""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax, pmap
from jax.config import config
from jax.interpreters import pxla

config.enable_omnistaging() if hasattr(config, "enable_omnistaging") else None

x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
y = pmap(lambda v: jnp.sin(v) * 2)(x)
print("sharded", isinstance(y, pxla.ShardedDeviceArray), isinstance(y, jnp.DeviceArray))
print("buffers", len(y.device_buffers), y.device_buffers[0].shape,
      [b.device().id if callable(b.device) else b.device.id for b in y.device_buffers])
print("buffer 3", np.round(np.asarray(y.device_buffers[3]), 5).tolist())

perm = [(i, (i + 1) % 8) for i in range(8)]


def halo(v):
  left = lax.ppermute(v, "i", perm)
  v = jax.ops.index_update(v, jax.ops.index[0], left[-1])
  return jax.ops.index_add(v, jax.ops.index[-1], 100.0)


w = pmap(halo, "i")(x)
print("halo", np.asarray(w)[:3].tolist())
print("firsts", [float(b[0]) for b in w.device_buffers])
