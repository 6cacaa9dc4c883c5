"""Follows the host_callback documentation of JAX 0.3 (jax-v0.3.x,
jax/experimental/host_callback.py's module docs, github.com/google/jax):
``id_tap`` from inside a pmap, with the era's tree helpers
(``jax.tree_util.tree_multimap``, ``jax.tree_flatten``/``tree_unflatten``,
``jax.tree_structure``, ``jax.tree_transpose``) and ``jax.lax.tie_in``."""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import host_callback as hcb

seen = []


def record(arg, transforms):
  seen.append(float(np.asarray(arg).sum()))


def step(x):
  y = lax.tie_in(x, jnp.cos(x)) * 2.0
  y = hcb.id_tap(record, y)
  return lax.psum(y, "i")


out = jax.pmap(step, axis_name="i")(jnp.arange(8.0).reshape(8, 1))
hcb.barrier_wait()
print("psum", round(float(out[0, 0]), 5), "taps", len(seen), round(sum(seen), 5))

pairs = {"a": (1.0, 2.0), "b": (3.0, 4.0)}
summed = jax.tree_util.tree_multimap(lambda u, v: u + v, pairs, pairs)
leaves, treedef = jax.tree_flatten(summed)
print("leaves", leaves, jax.tree_unflatten(treedef, leaves[::-1]))
outer = jax.tree_structure({"a": 0, "b": 0})
inner = jax.tree_structure((0, 0))
print("transposed", jax.tree_transpose(outer, inner, pairs))
