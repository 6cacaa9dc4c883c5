"""Classic pmap sites whose shard_map body pmapkit migrate writes in place
(issue 57): a pmap called where it is made, of a name or of a lambda, gets a
lambda taking the mapped axis off and back (no _per_device); a pmap-decorated
def of *args squeezes args itself. Every array is sized by the device count.
Run both ways by tests/test_migrate_handwritten.py (--check)."""
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

n = jax.local_device_count()
x = jnp.arange(n * 3.0).reshape(n, 3)
w = jnp.array([1.0, -2.0, 0.5])


def scale(a, b):
    return a * b


f = lambda v: v / jax.lax.psum(v, axis_name="i")
print(np.asarray(jax.pmap(f, axis_name="i")(x)).round(4).tolist())
print(np.asarray(jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)).tolist())
print(np.asarray(jax.pmap(jnp.dot)(x, x)).tolist())
print(np.asarray(jax.pmap(scale, in_axes=(0, None))(x, w)).tolist())
print(np.asarray(jax.pmap(lambda v: jnp.sum(v), out_axes=None)(jnp.ones((n, 2)))).tolist())
# a tree argument and a tree result
tree = jax.pmap(lambda d: {"s": d["a"] + d["b"], "t": (d["a"],)})({"a": x, "b": 2 * x})
print({k: np.asarray(jax.tree.leaves(v)[0]).tolist() for k, v in tree.items()})
# mapped along axis 1, returned along axis 1
print(np.asarray(jax.pmap(lambda v: v * 2, in_axes=1, out_axes=1)(x.T)).tolist())


@jax.pmap
def many(*args):
    total = 0
    for a in args:
        total += a
    return total


print(np.asarray(many(x, x, 2 * x)).tolist())
