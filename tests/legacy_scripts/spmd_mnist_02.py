"""Follows JAX's examples/spmd_mnist_classifier_fromscratch.py (jax-v0.2.x,
github.com/google/jax), left in its 2020 style: ``from jax.config import
config``, ``jax.tree_map`` to replicate and unreplicate, a pmap'd SGD step
with ``lax.psum``. Synthetic data in place of MNIST, tiny sizes, 3 steps."""
from functools import partial

import numpy as np
import numpy.random as npr

import jax
import jax.numpy as jnp
from jax import grad, jit, lax, pmap
from jax.config import config
from jax.scipy.special import logsumexp

config.update("jax_enable_x64", False)


def init_random_params(scale, layer_sizes, rng=npr.RandomState(0)):
  return [(scale * rng.randn(m, n).astype(np.float32),
           scale * rng.randn(n).astype(np.float32))
          for m, n, in zip(layer_sizes[:-1], layer_sizes[1:])]


def predict(params, inputs):
  activations = inputs
  for w, b in params[:-1]:
    outputs = jnp.dot(activations, w) + b
    activations = jnp.tanh(outputs)
  final_w, final_b = params[-1]
  logits = jnp.dot(activations, final_w) + final_b
  return logits - logsumexp(logits, axis=1, keepdims=True)


def loss(params, batch):
  inputs, targets = batch
  preds = predict(params, inputs)
  return -jnp.mean(jnp.sum(preds * targets, axis=1))


step_size = 0.5
num_devices = jax.device_count()
rng = npr.RandomState(0)
images = rng.randn(64, 16).astype(np.float32)
labels = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 64)]


@partial(pmap, axis_name='batch')
def spmd_update(params, batch):
  grads = grad(loss)(params, batch)
  # We compute the total gradients, summing across the device-mapped axis,
  # using the `lax.psum` SPMD primitive, which does a fast all-reduce-sum.
  grads = [(lax.psum(dw, 'batch'), lax.psum(db, 'batch')) for dw, db in grads]
  return [(w - step_size * dw, b - step_size * db)
          for (w, b), (dw, db) in zip(params, grads)]


params = init_random_params(0.1, [16, 8, 4])
replicate_array = lambda x: np.broadcast_to(x, (num_devices,) + x.shape)
replicated_params = jax.tree_map(replicate_array, params)
batch = (images.reshape(num_devices, -1, 16), labels.reshape(num_devices, -1, 4))
for step in range(3):
  replicated_params = spmd_update(replicated_params, batch)
  params = jax.tree_map(lambda x: x[0], replicated_params)
  print("step", step, "loss", round(float(jit(loss)(params, (images, labels))), 5))
