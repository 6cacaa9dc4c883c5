"""Classic pmaps pmapkit migrate writes as named defs (issue 57): statics on a
decorated def and on a method, a pmap of a def of the file, a pmap of a lambda
with a static argument. Run both ways by tests/test_migrate_handwritten.py."""
import functools
from functools import partial

import numpy as np

import jax
from jax import lax

n = jax.local_device_count()
x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)


@partial(jax.pmap, axis_name="i", static_broadcasted_argnums=(1, 2))
def powers(v, k, mode):
    """v ** k or v * k, normalised over the devices."""
    if mode == "pow":
        return v ** k / lax.psum(v ** k, "i")
    return v * k


class Model:
    def __init__(self, scale):
        self.scale = scale

    @functools.partial(jax.pmap, axis_name="batch", in_axes=(None, 0, None),
                       static_broadcasted_argnums=(0,))
    def step(self, v, bias):
        return v * self.scale + bias, lax.pmean(v, "batch")


def square(v, w):
    return v ** 2 + w


parallel_square = jax.pmap(square, in_axes=(0, None))
scaled = jax.pmap(lambda v, k: v * k, "i", static_broadcasted_argnums=1)

print(powers(x, 2, "pow")[1].tolist(), powers(x, 3, "mul")[2].tolist())
out, mean = Model(3.0).step(x, np.float32(1.0))
print(out[1].tolist(), mean[0].tolist())
print(parallel_square(x, np.float32(0.5))[3].tolist(), scaled(x, 4)[0].tolist())
