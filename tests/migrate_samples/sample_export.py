import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental.jax2tf import jax_export


def f(x, y):
    return jnp.sin(x) * y


b, = jax_export.symbolic_shape("b")
exp = jax_export.export(f)(jax.ShapeDtypeStruct((b, 2), np.float32),
                           jax.ShapeDtypeStruct((2,), np.float32))
print("avals", [str(a) for a in exp.in_avals], [str(a) for a in exp.out_avals])
restored = jax_export.deserialize(jax_export.serialize(exp))
x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
print("call", np.round(np.asarray(jax_export.call_exported(restored)(x, np.ones(2, np.float32))), 5).tolist())
jitted = jax_export.export(jax.jit(f))(x, np.ones(2, np.float32))
print("jitted", jitted.fun_name, [str(a) for a in jitted.in_avals])
