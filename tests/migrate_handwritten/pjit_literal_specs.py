"""Classic pjit sites with literal specs (issue 57): pmapkit migrate writes
them as jax.jit(f, in_shardings=..., out_shardings=...); a site whose specs
are read at run time (a parameter, which may be None) keeps the _pjit helper. Run both ways by
tests/test_migrate_handwritten.py (--check)."""
from functools import partial

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import PartitionSpec as P
from jax.experimental.maps import Mesh
from jax.experimental.pjit import pjit

devices = np.array(jax.devices()).reshape(4, 2)


@partial(pjit, in_axis_resources=(P("x"), None), out_axis_resources=None)
def add(a, b):
    return a + b


scale = pjit(lambda a: a * 3, in_axis_resources=P("x", "y"), out_axis_resources=P("y", None))
spec = P("x")
double = pjit(lambda a: a * 2, in_axis_resources=(spec,), out_axis_resources=spec)


def shard_along(a, axis):
    names = [None] * a.ndim
    names[axis] = "x"
    return pjit(lambda v: v, in_axis_resources=P(*names), out_axis_resources=P(*names))(a)


def placed(a, spec):
    return pjit(lambda v: v + 0, in_axis_resources=spec, out_axis_resources=spec)(a)


x = np.arange(16.0).reshape(8, 2)
with Mesh(devices, ("x", "y")):
    made = jnp.arange(8.0)
    out = add(x, np.ones(2))
    print(out.tolist(), out.sharding.spec)
    s = scale(x.astype(np.float32) + 1)
    print(s.tolist(), s.sharding.spec)
    d = double(made)
    print(d.tolist(), d.sharding.spec)
    r = shard_along(x, 0)
    print(r.tolist(), r.sharding.spec)
    p = placed(x, None)
    print(p.tolist(), p.sharding.spec)

f = pjit(lambda v: v + 1, in_axis_resources=None, out_axis_resources=P("x"))
with Mesh(devices, ("x", "y")):
    print(f(x).tolist(), f(x).sharding.spec)
f = pjit(lambda v: v - 1, in_axis_resources=None, out_axis_resources=P("y"))
with Mesh(devices, ("x", "y")):
    print(f(x.T).tolist(), f(x.T).sharding.spec)
