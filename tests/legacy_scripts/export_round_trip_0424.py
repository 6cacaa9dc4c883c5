"""In the style of a jax.experimental.export round trip of JAX 0.4.2x
(jax-v0.4.24 docs "Exporting and serializing staged-out computations"): a
shape-polymorphic export with ``symbolic_shape``, ``lowering_platforms=``,
``Exported.call`` inside a jitted function, ``serialize``/``deserialize`` of
the artifact, and the older ``call_exported`` spelling."""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import export


def predict(params, x):
  return jax.nn.softmax(jnp.tanh(x @ params["w"]) + params["b"])


params = {"w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
          "b": np.zeros(3, np.float32)}
batch, = export.symbolic_shape("batch")
exp = export.export(predict, lowering_platforms=("cpu",))(
    jax.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params),
    jax.ShapeDtypeStruct((batch, 4), np.float32))
print("exported", exp.fun_name, [str(a) for a in exp.in_avals], exp.platforms)

blob = export.serialize(exp)
restored = export.deserialize(blob)
for rows in (2, 5):
  x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 10
  out = jax.jit(restored.call)(params, x)
  print("rows", rows, out.shape, [round(float(v), 5) for v in np.asarray(out)[0]])
again = export.call_exported(restored)(params, np.ones((3, 4), np.float32))
print("matches direct", bool(np.allclose(np.asarray(again),
                                          predict(params, np.ones((3, 4), np.float32)),
                                          atol=1e-6)))
