"""Classic pmap sites each called only with arrays whose leading size is a
number written in the source (issue 57): classic pmap ran them on the first n
devices; pmapkit migrate writes meshes of jax.local_devices()[:n] (no
_first_devices). Run both ways by tests/test_migrate_handwritten.py (--check)."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


@partial(jax.pmap, axis_name="i")
def normalize(x):
    return x / jax.lax.psum(x, "i")


square = jax.pmap(lambda v: v ** 2)
halves = jnp.ones((2, 3))

print(np.asarray(normalize(jnp.arange(4.))).round(4).tolist())
print(np.asarray(normalize(jnp.ones(4))).tolist())
print(np.asarray(square(jnp.arange(4.))).tolist())
print(np.asarray(jax.pmap(lambda v: v * 2)(halves)).tolist())
print(np.asarray(jax.pmap(lambda k: jax.random.normal(k, (2,)))(
    jax.random.split(jax.random.PRNGKey(0), 2))).round(5).tolist())
