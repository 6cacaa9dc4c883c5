"""Follows dm-haiku's examples of 2020 (v0.0.3, github.com/deepmind/dm-haiku):
``topk_mask`` from examples/mnist_pruning.py (``jax.random.shuffle``,
``jax.ops.index_update``, ``jax.tree_util.tree_multimap``, ``jax.tree_leaves``)
inside the data-parallel loop of examples/imagenet/train.py (a pmap'd step with
``jax.lax.pmean``, ``jax.profiler.StepTraceContext``, ``jax.tree_map`` to
unreplicate). A linear model on synthetic data stands in for the Haiku nets."""
import functools

import numpy as np

import jax
import jax.numpy as jnp


def topk_mask(value, density_fraction):
  def topk_mask_internal(value):
    assert value.ndim == 1
    indices = jnp.argsort(value)
    k = jnp.round(density_fraction * jnp.size(value)).astype(jnp.int32)
    mask = jnp.greater_equal(np.arange(value.size), value.size - k)
    mask = jax.ops.index_update(jnp.zeros_like(mask), indices, mask)
    return mask.astype(np.int32)

  # shuffle value so that identical values aren't always pruned
  # with a bias to lower indices
  orig_shape = value.shape
  value = jnp.reshape(value, -1)
  shuffled_indices = jax.random.shuffle(
      jax.random.PRNGKey(42), jnp.arange(0, jnp.size(value), dtype=jnp.int32))

  shuffled_mask = topk_mask_internal(value[shuffled_indices])
  mask = jax.ops.index_update(
      jnp.zeros_like(shuffled_mask), shuffled_indices, shuffled_mask)
  mask = jnp.reshape(mask, orig_shape)
  return mask


def loss_fn(params, images, labels):
  logits = images @ params['w'] + params['b']
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.sum(logp * labels, axis=1))


@functools.partial(jax.pmap, axis_name='i')
def train_step(params, images, labels):
  grads = jax.grad(loss_fn)(params, images, labels)
  grads = jax.lax.pmean(grads, axis_name='i')
  params = jax.tree_multimap(lambda p, g: p - 0.5 * g, params, grads)
  masks = jax.tree_util.tree_map(lambda p: topk_mask(p, 0.5), params)
  return jax.tree_util.tree_multimap(lambda x, y: x * y, params, masks)


rng = np.random.RandomState(0)
params = {'w': rng.randn(16, 4).astype(np.float32) * 0.1,
          'b': np.zeros(4, np.float32)}
images = rng.randn(64, 16).astype(np.float32)
labels = np.eye(4, dtype=np.float32)[rng.randint(0, 4, 64)]
n = jax.local_device_count()
params = jax.tree_map(lambda x: np.stack([x] * n), params)
for step_num in range(3):
  with jax.profiler.StepTraceContext('train', step_num=step_num):
    params = train_step(params, images.reshape(n, -1, 16), labels.reshape(n, -1, 4))
  host = jax.tree_map(lambda x: x[0], params)
  nnz = sum(int(jnp.sum(x != 0.)) for x in jax.tree_leaves(host))
  print('step', step_num, 'loss', round(float(loss_fn(host, images, labels)), 5),
        'nnz', nnz, 'of', sum(jnp.size(x) for x in jax.tree_leaves(host)))
