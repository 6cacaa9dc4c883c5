"""In the style of JAX 0.4-era pjit models (t5x / paxml-like, jax-v0.4.x docs
"Distributed arrays and automatic parallelization"): a 2-D mesh built from
``mesh_utils.create_device_mesh`` and entered with ``with mesh:``,
``jax.experimental.pjit.pjit`` with ``in_shardings``/``out_shardings`` of
PartitionSpecs and ``static_argnums``, ``with_sharding_constraint`` on the
hidden activations, a training loop whose inputs arrive committed to another
layout (pjit moved them), and ``jax.experimental.PartitionSpec``."""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import PartitionSpec as P
from jax.experimental import mesh_utils
from jax.experimental.pjit import pjit, with_sharding_constraint
from jax.sharding import Mesh, NamedSharding


def mlp(params, x):
  h = jnp.tanh(x @ params["w1"])
  h = with_sharding_constraint(h, P("data", "model"))
  return h @ params["w2"]


def train_step(params, batch, learning_rate):
  def loss(p):
    return jnp.mean((mlp(p, batch["x"]) - batch["y"]) ** 2)
  value, grads = jax.value_and_grad(loss)(params)
  return jax.tree_map(lambda p, g: p - learning_rate * g, params, grads), value


param_specs = {"w1": P(None, "model"), "w2": P("model", None)}
batch_specs = {"x": P("data", None), "y": P("data", None)}
p_train_step = pjit(train_step,
                    in_shardings=(param_specs, batch_specs),
                    out_shardings=(param_specs, None),
                    static_argnums=(2,))

mesh = Mesh(mesh_utils.create_device_mesh((4, 2)), ("data", "model"))
rng = np.random.RandomState(0)
params = {"w1": rng.randn(8, 16).astype(np.float32) * 0.3,
          "w2": rng.randn(16, 4).astype(np.float32) * 0.3}
# The data loader hands over batches committed to a row layout over all devices.
rows = NamedSharding(Mesh(np.array(jax.devices()), ("all",)), P("all"))
with mesh:
  for step in range(3):
    x = rng.randn(16, 8).astype(np.float32)
    batch = {"x": jax.device_put(x, rows), "y": jax.device_put(np.sin(x[:, :4]), rows)}
    params, loss = p_train_step(params, batch, 0.1)
    print("step", step, "loss", round(float(loss), 5))
  print("w1 layout", params["w1"].sharding.spec, "shards", len(params["w1"].addressable_shards))
print("w2 sum", round(float(jnp.sum(params["w2"])), 4))
