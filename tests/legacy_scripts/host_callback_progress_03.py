"""In the style of host_callback progress reporting of the JAX 0.3 era
(jax-v0.3.x docs of jax.experimental.host_callback; training loops that
reported from inside ``lax.fori_loop``): ``id_tap`` with ``result=`` to report
every few iterations without changing the loop's value, ``id_print`` with a
keyword label, ``call`` to a host function with a ``result_shape``, and
``barrier_wait`` before reading what was recorded."""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import host_callback as hcb

progress = []


def report(arg, transforms):
  step, loss = arg
  progress.append((int(step), round(float(loss), 4)))


def host_lookup(x):
  # A host-side table lookup (numpy), as programs did with hcb.call.
  table = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
  return table[np.asarray(x).astype(np.int32) % 4]


def body(i, carry):
  w, loss = carry
  grad = 2 * (w - 3.0)
  w = w - 0.1 * grad
  loss = (w - 3.0) ** 2
  w = lax.cond(i % 5 == 0,
               lambda w: hcb.id_tap(report, (i, loss), result=w),
               lambda w: w, w)
  return w, loss


@jax.jit
def fit(w):
  w, loss = lax.fori_loop(0, 20, body, (w, jnp.float32(0.0)))
  return hcb.id_print(loss, what="final loss")


loss = fit(jnp.float32(0.0))
hcb.barrier_wait()
print("progress", progress)
print("loss", round(float(loss), 5))

looked_up = jax.jit(lambda x: hcb.call(host_lookup, x,
                                       result_shape=jax.ShapeDtypeStruct(x.shape, np.float32)))(
    jnp.arange(6.0))
print("looked up", np.asarray(looked_up).tolist())
