"""An EasyLM-style pjit model (JAX 0.3/0.4): activation sharding constraints
added only when jax.interpreters.pxla.thread_resources shows a mesh."""
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import maps
from jax.experimental.pjit import pjit, with_sharding_constraint
from jax.experimental import PartitionSpec as PS
from jax.interpreters import pxla


def with_sharding_constraint_if_mesh(x, spec):
    if pxla.thread_resources.env.physical_mesh.empty:
        return x
    return with_sharding_constraint(x, spec)


def forward(x, w):
    h = jnp.tanh(x @ w)
    return with_sharding_constraint_if_mesh(h, PS("dp", "mp"))


x = np.arange(64.0, dtype=np.float32).reshape(8, 8) / 64
w = np.eye(8, dtype=np.float32)
mesh = maps.Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp"))
print("outside", pxla.thread_resources.env.physical_mesh.empty)
with mesh:
    step = pjit(forward, in_axis_resources=(PS("dp", None), None), out_axis_resources=None)
    text = step.lower(x, w).as_text()
    out = step(x, w)
    print("inside", pxla.thread_resources.env.physical_mesh.shape)
print("constrained", text.count("sharding_constraint") + text.count("@Sharding") > 0)
print("values", bool(np.allclose(out, np.tanh(x @ w))))
print("after", pxla.thread_resources.env.physical_mesh.empty)
