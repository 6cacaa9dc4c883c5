"""A 2023-era program: host_callback taps and jax2tf's jax_export, left as
it was written."""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import host_callback as hcb
from jax.experimental.jax2tf import jax_export

seen = []


def record(arg, transforms):
    seen.append(np.asarray(arg).tolist())


def model(x):
    y = hcb.id_print(jnp.sin(x), what="sin")
    y = hcb.id_tap(record, y * 2.0)
    return jnp.sum(y)


out = jax.jit(model)(jnp.arange(3.0))
hcb.barrier_wait()
print("jit result", round(float(out), 5))
print("tapped", [[round(v, 5) for v in row] for row in seen])


def predict(w, x):
    return jnp.tanh(x @ w)


w = np.full((3, 2), 0.5, np.float32)
exp = jax_export.export(predict)(
    jax.ShapeDtypeStruct(w.shape, w.dtype),
    jax.ShapeDtypeStruct((4, 3), np.float32))
print("exported", exp.fun_name, [str(a) for a in exp.in_avals], [str(a) for a in exp.out_avals])
blob = jax_export.serialize(exp)
restored = jax_export.deserialize(blob)
x = np.arange(12, dtype=np.float32).reshape(4, 3) / 12
result = jax_export.call_exported(restored)(w, x)
print("round trip matches", bool(np.allclose(np.asarray(result), np.tanh(x @ w), atol=1e-6)))
