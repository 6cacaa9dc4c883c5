import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import PartitionSpec
from jax.experimental import maps
from jax.experimental.pjit import pjit, with_sharding_constraint
from jax.sharding import NamedSharding


def f(x, y):
    z = with_sharding_constraint(x * 2, PartitionSpec("x", None))
    return z + y.sum()


step = pjit(f, (PartitionSpec("x", None), None), PartitionSpec("x", None))


@functools.partial(pjit, in_axis_resources=PartitionSpec("x"),
                   out_axis_resources=PartitionSpec("x"))
def triple(a):
    return a * 3

mesh = maps.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
x = np.arange(16.0, dtype=np.float32).reshape(8, 2)
with mesh:
    print("axes", dict(maps.thread_resources.env.physical_mesh.shape))
    out = step(x, jnp.ones(3))
    print("out", out.shape, out.sharding.spec, float(out.sum()))
    print("triple", triple(np.arange(8.0)).tolist())
    # A committed input laid out otherwise: classic pjit moved it.
    other = jax.device_put(x, NamedSharding(mesh, PartitionSpec(None, "y")))
    print("moved", float(step(other, jnp.ones(3)).sum()))
    rows = pjit(lambda a: a + 1, in_axis_resources=PartitionSpec("x", None),
                out_axis_resources=PartitionSpec("x", None))
    print("one spec", rows(other).sharding.spec, float(rows(other).sum()))
with maps.Mesh(np.array(jax.devices()), ("x",)) as flat:
    print("flat", flat.shape["x"], float(step(x, jnp.zeros(2)).sum()))
plain = pjit(lambda a: a * 3)
print("plain", plain(jnp.arange(4.0)).tolist())
