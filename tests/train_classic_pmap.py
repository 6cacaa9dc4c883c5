"""A classic data-parallel training loop (jax.pmap, pmean of gradients,
donated state), as 2020-2023 programs wrote it. docs/migrate.md shows it
beside its migrated form; tests/test_migrate_translate.py holds both."""
import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

n = jax.local_device_count()
rng = np.random.default_rng(0)
true_w = np.array([2.0, -3.0, 0.5], np.float32)
xs = rng.normal(size=(n, 16, 3)).astype(np.float32)
ys = xs @ true_w + 0.1


def loss(params, x, y):
    pred = x @ params["w"] + params["b"]
    return jnp.mean((pred - y) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def train_step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    grads = lax.pmean(grads, axis_name="batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return params, lax.pmean(value, axis_name="batch")


evaluate = jax.pmap(lambda p, x, y: lax.pmean(loss(p, x, y), "b"), "b", in_axes=(0, 0, 0))
params = {"w": jnp.zeros((n, 3)), "b": jnp.zeros((n,))}
for step in range(30):
    params, value = train_step(params, xs, ys)
    if step % 10 == 0:
        print(step, round(float(value[0]), 4))
print("w", np.round(np.asarray(params["w"][0]), 3).tolist())
print("eval", round(float(evaluate(params, xs, ys)[0]), 5))
