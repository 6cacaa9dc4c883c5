"""x.device_buffers of a classic pjit's output (issue 57): pmapkit migrate
writes [s.data for s in x.addressable_shards] (no _device_buffers), each shard
keeping every axis as classic pjit's did, on a 1-D mesh too (where the helper
would take a pmap output's mapped axis off). Run both ways by
tests/test_migrate_handwritten.py (--check)."""
import numpy as np

import jax
from jax.experimental import PartitionSpec as P
from jax.experimental.maps import Mesh
from jax.experimental.pjit import pjit

line = np.array(jax.devices())
grid = line.reshape(4, 2)

f = pjit(lambda x: x * 2, in_axis_resources=None, out_axis_resources=P("x"))
with Mesh(line, ("x",)):
    data = f(np.arange(16.0).reshape(8, 2))
print([b.shape for b in data.device_buffers])
print([np.asarray(b).tolist() for b in data.device_buffers])

f = pjit(lambda x: x + 1, in_axis_resources=None, out_axis_resources=P("x", "y"))
with Mesh(grid, ("x", "y")):
    data = f(np.arange(16.0).reshape(4, 4))
print([b.shape for b in data.device_buffers])
print([np.asarray(b).tolist() for b in data.device_buffers])
