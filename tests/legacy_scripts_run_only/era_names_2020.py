"""A 2020-2022 program using names JAX removed before 0.4.13: `from jax import
partial` (JAX's old DP-SGD example), jax.lib.xla_bridge's device queries
(neural-tangents-style batching), jax.linear_util (a custom ODE solver's
transformations), lax.zeros_like_array (a custom primitive's batching
rule), the jax_parallel_functions_output_gda option, GlobalDeviceArray and
sharded_jit (t5x-era partitioning)."""
import numpy as np

import jax
import jax.linear_util as lu
from jax import lax, partial
from jax.config import config
from jax.experimental import PartitionSpec as P
from jax.experimental import maps
from jax.experimental.global_device_array import GlobalDeviceArray, get_shard_indices
from jax.interpreters import sharded_jit as sj
from jax.lib import xla_bridge

config.update("jax_parallel_functions_output_gda", True)
print("gda option", config.jax_parallel_functions_output_gda)

scale = partial(lax.mul, 3.0)
print("partial", float(scale(2.0)))

n = xla_bridge.device_count()
print("devices", n, xla_bridge.local_device_count(), xla_bridge.host_id(),
      xla_bridge.host_count())


@lu.transformation
def doubled(*args):
    out = yield args, {}
    yield out * 2


f = doubled(lu.wrap_init(lambda x: x + 1))
print("linear_util", float(f.call_wrapped(1.0)))

z = lax.zeros_like_array(np.arange(3.0, dtype=np.float32))
print("zeros_like_array", z.dtype, z.shape, z.tolist())

mesh = maps.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
data = np.arange(16, dtype=np.float32).reshape(8, 2)
gda = GlobalDeviceArray.from_callback((8, 2), mesh, P("data", "model"), lambda i: data[i])
first = gda.local_shards[0]
print("gda", isinstance(gda, GlobalDeviceArray), len(gda.local_shards), first.index,
      np.asarray(first.data).ravel().tolist(), np.array_equal(np.asarray(gda), data))
indices = get_shard_indices((8, 2), mesh, P("data", None))
print("indices", [indices[d] == (slice(2 * (i // 2), 2 * (i // 2) + 2), slice(None))
                  for i, d in enumerate(mesh.devices.flat)].count(True))


def layer(x, w):
    h = sj.with_sharding_constraint(x @ w, sj.PartitionSpec(4, 2))
    return h + 1.0


step = sj.sharded_jit(layer, in_parts=(sj.PartitionSpec(8, 1), None),
                      out_parts=sj.PartitionSpec(4, 2))
x = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
w = np.eye(8, dtype=np.float32)
out = step(x, w)
print("sharded_jit", np.allclose(np.asarray(out), x @ w + 1.0),
      out.sharding.shard_shape(out.shape))
