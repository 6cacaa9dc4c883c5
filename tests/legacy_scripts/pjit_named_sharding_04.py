"""A JAX 0.4-era pjit program, left as it was written.

``jax.Array`` inputs and ``Sharding`` objects as in/out_axis_resources: the
sharding carries its mesh, so no ``with mesh:`` is needed.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental.pjit import pjit
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",))
rows = NamedSharding(mesh, P("x"))
replicated = NamedSharding(mesh, P())


def normalize(x, scale):
    return (x - x.mean()) * scale


f = pjit(normalize,
         in_axis_resources=(rows, replicated),
         out_axis_resources=rows)

x = jnp.arange(16.0)
y = f(x, jnp.float32(2.0))
print("sharding kept", y.sharding == rows)
print("values", np.asarray(y)[:4].tolist())
print("matches numpy", bool(np.allclose(np.asarray(y), (np.arange(16.0) - 7.5) * 2.0)))

# Specs omitted: a committed jax.Array keeps its sharding, outside any mesh.
shift = pjit(lambda a: a + 1.0)
z = shift(jax.device_put(jnp.ones((8, 2)), rows))
print("omitted specs keep", z.sharding == rows, float(z.sum()))
