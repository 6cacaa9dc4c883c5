import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import host_callback as hcb

taps = []


def tap(arg, transforms):
    taps.append(np.asarray(arg).tolist())


def f(x):
    y = hcb.id_tap(tap, x * 2)
    z = hcb.id_tap(tap, y.sum(), result=y + 1)
    hcb.id_print(z.sum(), where="f", step=3)
    return hcb.call(lambda v: np.asarray(v) * 10, z,
                    result_shape=jax.ShapeDtypeStruct(z.shape, z.dtype))


print("out", jax.jit(f)(jnp.arange(3.0)).tolist())
hcb.barrier_wait()
print("taps", taps)
taps.clear()
per_device = jax.pmap(lambda v: hcb.id_tap(tap, v + 1))(np.arange(8.0))
hcb.barrier_wait()
print("pmap taps", sorted(taps), per_device.tolist())
taps.clear()


def tap_device(arg, transforms, device):
    taps.append((device.id, float(arg)))


jax.pmap(lambda v: hcb.id_tap(tap_device, v.sum(), tap_with_device=True))(np.arange(8.0))
hcb.barrier_wait()
print("device taps", sorted(taps))
