"""In the style of the flax/haiku data-parallel examples of 2021 (flax
examples/imagenet train.py, haiku examples/imagenet; jax-v0.2.x): parameters
replicated with ``jax.device_put_replicated``, batches placed with
``jax.device_put_sharded``, a ``functools.partial(jax.pmap, ...)`` train step
that donates its state and averages gradients with ``lax.pmean``, metrics
read from ``device_buffers``, ``jax.tree_multimap`` updates and an
unreplicate by ``jax.tree_map``. A small MLP on synthetic data stands in
for the models."""
import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax


def init(rng, sizes):
  params = []
  for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
    w = jax.random.normal(jax.random.fold_in(rng, k), (m, n)) / np.sqrt(m)
    params.append({"w": w, "b": jnp.zeros(n)})
  return params


def apply(params, x):
  for layer in params[:-1]:
    x = jax.nn.relu(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, batch):
  logits = apply(params, batch["x"])
  return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * batch["y"], axis=-1))


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(state, batch):
  params, momentum = state
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  grads = lax.pmean(grads, axis_name="batch")
  momentum = jax.tree_multimap(lambda m, g: 0.9 * m + g, momentum, grads)
  params = jax.tree_multimap(lambda p, m: p - 0.1 * m, params, momentum)
  metrics = {"loss": lax.pmean(loss, "batch"),
             "grad_norm": jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_leaves(grads)))}
  return (params, momentum), metrics


# Evaluated per example over the batch axis (axis 1 of the stacked batch):
# this one stays a jax.pmap (in_axes=1 has no shard_map-over-axis-0 spelling).
eval_norms = jax.pmap(lambda x: jnp.linalg.norm(x, axis=-1), in_axes=1)

devices = jax.local_devices()
n = len(devices)
params = init(jax.random.PRNGKey(0), [12, 16, 3])
state = jax.device_put_replicated((params, jax.tree_map(jnp.zeros_like, params)), devices)
print("replicated", state[0][0]["w"].shape, len(state[0][0]["w"].device_buffers))

rng = np.random.RandomState(0)
for step in range(3):
  x = rng.randn(n * 4, 12).astype(np.float32)
  y = np.eye(3, dtype=np.float32)[rng.randint(0, 3, n * 4)]
  shards = [{"x": x[i * 4:(i + 1) * 4], "y": y[i * 4:(i + 1) * 4]} for i in range(n)]
  batch = jax.device_put_sharded(shards, devices)
  state, metrics = train_step(state, batch)
  per_device = [float(b) for b in metrics["loss"].device_buffers]
  print("step", step, "loss", round(per_device[0], 5), "agree", len(set(per_device)) == 1,
        "grad_norm", round(float(metrics["grad_norm"][0]), 5))

host_params = jax.tree_map(lambda a: a[0], state[0])
print("params", [round(float(jnp.sum(l["w"])), 4) for l in host_params])
norms = eval_norms(np.arange(2 * n * 3, dtype=np.float32).reshape(2, n, 3))
print("eval norms", norms.shape, [round(float(v), 4) for v in np.asarray(norms)[:, 0]])
