"""A JAX 0.3-era pjit program (GDA days), left as it was written.

Runs under ``pmapkit run`` with 8 devices: a 4 x 2 mesh entered with
``with Mesh(...)``, specs given as in/out_axis_resources.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import maps
from jax.experimental.maps import Mesh
from jax.experimental.pjit import PartitionSpec, pjit, with_sharding_constraint


def layer(w, x):
    y = jnp.tanh(x @ w)
    # Keep the activations batch-sharded between the two matmuls.
    y = with_sharding_constraint(y, PartitionSpec("data", None))
    return y @ w.T


devices = np.asarray(jax.devices()).reshape(4, 2)
step = pjit(layer,
            in_axis_resources=(PartitionSpec(None, "model"), PartitionSpec("data", None)),
            out_axis_resources=PartitionSpec("data", None))

w = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) / 24.0
x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 48.0
with Mesh(devices, ("data", "model")):
    print("mesh", dict(maps.thread_resources.env.physical_mesh.shape))
    out = step(w, x)

expected = np.tanh(x @ w) @ w.T
print("shape", out.shape)
print("matches numpy", bool(np.allclose(np.asarray(out), expected, atol=1e-5)))
