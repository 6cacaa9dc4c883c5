"""Follows JAX's examples/mnist_classifier.py (jax-v0.2.x, github.com/google/jax)
made data-parallel the way the Pmap Cookbook (cloud_tpu_colabs) did it:
``from jax.experimental import optimizers, stax``, a pmap'd update with
``lax.pmean`` and ``jax.tree_multimap``. Synthetic data, tiny net, 3 steps."""
import numpy.random as npr
import numpy as np

import jax
import jax.numpy as jnp
from jax import grad, jit, lax, pmap, random
from jax.experimental import optimizers, stax
from jax.experimental.stax import Dense, LogSoftmax, Relu

init_random_params, predict = stax.serial(Dense(8), Relu, Dense(4), LogSoftmax)


def loss(params, batch):
  inputs, targets = batch
  preds = predict(params, inputs)
  return -jnp.mean(jnp.sum(preds * targets, axis=1))


opt_init, opt_update, get_params = optimizers.momentum(0.1, mass=0.9)
n = jax.local_device_count()


def update(i, opt_state, batch):
  params = get_params(opt_state)
  grads = grad(loss)(params, batch)
  grads = jax.tree_multimap(lambda g: lax.pmean(g, "i"), grads)
  return opt_update(i, grads, opt_state)


p_update = pmap(update, axis_name="i", in_axes=(None, 0, 0))

rng = random.PRNGKey(0)
_, init_params = init_random_params(rng, (-1, 16))
data = npr.RandomState(1)
x = data.randn(64, 16).astype(np.float32)
y = np.eye(4, dtype=np.float32)[data.randint(0, 4, 64)]
opt_state = jax.tree_map(lambda a: jnp.stack([a] * n), opt_init(init_params))
batch = (x.reshape(n, -1, 16), y.reshape(n, -1, 4))
for i in range(3):
  opt_state = p_update(i, opt_state, batch)
  params = jax.tree_map(lambda a: a[0], get_params(opt_state))
  print("step", i, "loss", round(float(jit(loss)(params, (x, y))), 5))
