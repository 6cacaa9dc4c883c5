import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax, pmap

n = jax.local_device_count()
x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)


@jax.pmap
def double(v):
    return v * 2


@functools.partial(pmap, axis_name="i")
def normalize(v):
    return v / lax.psum(v.sum(), "i")


scale = jax.pmap(lambda s, v: s * v + lax.axis_index("j"), axis_name="j", in_axes=(None, 0))
print("double", double(x)[1].tolist())
print("normalize", round(float(normalize(x).sum()), 5))
print("scale", scale(2.0, x)[:, 0].tolist())
print("four devices", jax.pmap(lambda v: v + 1, devices=jax.local_devices()[:4])(x[:4]).shape)
print("pytree", jax.pmap(lambda d: {"s": d["a"] + d["b"]})({"a": x, "b": x})["s"][2].tolist())
for k in range(3):
    y = jax.pmap(lambda v: lax.pmax(v, "k"), "k")(x + k)
print("inline", y[0].tolist())
total = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i", out_axes=None)(x)
print("kept", total.shape, total.tolist())
