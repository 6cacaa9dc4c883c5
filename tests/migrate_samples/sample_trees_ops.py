import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.config import config
from jax.experimental import optimizers
from jax.experimental.stax import Dense, Relu, serial
from jax.tree_util import tree_multimap

config.update("jax_enable_x64", False)
tree = {"a": (1.0, 2.0), "b": 3.0}
print("map", jax.tree_map(lambda v: v * 2, tree))
print("multimap", tree_multimap(lambda u, v: u + v, tree, tree),
      jax.tree_multimap(lambda u, v: u - v, tree, tree))
leaves, treedef = jax.tree_flatten(tree)
print("leaves", jax.tree_leaves(tree), jax.tree_unflatten(treedef, leaves[::-1]))
print("structure", jax.tree_structure(tree).num_leaves,
      jax.treedef_is_leaf(jax.tree_structure(1.0)))
print("transpose", jax.tree_transpose(jax.tree_structure([0, 0]), jax.tree_structure((0, 0)),
                                      [(1, 2), (3, 4)]))
x = jnp.arange(6.0)
x = jax.ops.index_update(x, jax.ops.index[1:3], 10.0)
x = jax.ops.index_add(x, 0, 5.0)
x = jax.ops.index_mul(x, jax.ops.index[-1], 3.0)
x = jax.ops.index_min(x, jax.ops.index[4], -1.0)
x = jax.ops.index_max(x, jax.ops.index[::2], 2.0)
where = jax.ops.index[2:]
print("ops", x.tolist(), jnp.arange(5)[where].tolist())
print("types", isinstance(x, jnp.DeviceArray), isinstance(x, jax.interpreters.xla.DeviceArray))


def keyed(key: jax.random.KeyArray):
    return jax.random.shuffle(key, jnp.arange(8))


print("shuffle", keyed(jax.random.PRNGKey(1)).tolist(), lax.tie_in(x, 3.0) + 1)
init, apply = serial(Dense(3), Relu)
_, params = init(jax.random.PRNGKey(0), (-1, 4))
opt_init, opt_update, get_params = optimizers.sgd(0.1)
state = opt_update(0, jax.tree_map(jnp.ones_like, params), opt_init(params))
with jax.profiler.TraceContext("step"):
    out = apply(get_params(state), jnp.ones((2, 4)))
print("stax", out.shape, round(float(jnp.sum(out)), 4))
