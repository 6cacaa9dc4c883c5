"""Follows the JAX 0.4 era (jax-v0.4.1 docs: "pjit" and the jax.Array
migration guide, github.com/google/jax), as flax/t5x-era code wrote it: pjit
used as jit with no mesh and no specs, ``jax.random.KeyArray`` annotations,
``jnp.DeviceArray`` checks, ``.device_buffer``, and a mesh-less
``with_sharding_constraint`` caught as the ValueError 0.3 raised."""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import PartitionSpec as P
from jax.experimental.pjit import pjit, with_sharding_constraint


def init(key: jax.random.KeyArray, sizes):
  keys = jax.random.split(key, len(sizes) - 1)
  return [jax.random.normal(k, (m, n)) / np.sqrt(m)
          for k, m, n in zip(keys, sizes[:-1], sizes[1:])]


def apply(params, x):
  for w in params:
    x = jnp.tanh(x @ w)
  return x


params = init(jax.random.PRNGKey(42), [6, 5, 3])
print("params", sum(p.size for p in jax.tree_leaves(params)))
f = pjit(apply)
out = f(params, jnp.ones((4, 6)))
print("is DeviceArray", isinstance(out, jnp.DeviceArray), out.shape)
print("one buffer", out.device_buffer.shape, out.device_buffer.device == jax.devices()[0])
print("values", np.round(np.asarray(out)[0], 5).tolist())
grads = jax.grad(lambda p: f(p, jnp.ones((4, 6))).sum())(params)
print("grad norms", [round(float(jnp.linalg.norm(g)), 5) for g in jax.tree_leaves(grads)])
try:
  jax.jit(lambda a: with_sharding_constraint(a, P("dp")))(jnp.ones(8))
except ValueError as e:
  print("no mesh:", "resource axis dp is undefined" in str(e))
