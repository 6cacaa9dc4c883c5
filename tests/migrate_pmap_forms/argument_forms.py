"""The argument forms of pmap: nested in_axes trees with None, in_axes other
than 0, out_axes 1, None and a tree, static_broadcasted_argnums (in_axes
covering all the positional arguments, or only those before a trailing static
one), donate_argnums, devices=, a partial(pmap) decorator, a pmap's output fed
to another over other devices' axis names, pmap passed as a value. (What the
translation does not do, each failing loudly, is in
tests/test_migrate_translate.py.)"""
import functools
from functools import partial

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax, pmap

n = jax.local_device_count()
x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)

tree_axes = jax.pmap(lambda a, d: a * d["scale"] + d["shift"],
                     in_axes=(0, {"scale": None, "shift": 0}))
print("nested in_axes", tree_axes(x, {"scale": np.float32(2), "shift": x})[1].tolist())
print("in_axes 1", jax.pmap(lambda v: v * 2, in_axes=1)(x.T)[2].tolist())
print("out_axes 1", jax.pmap(lambda v: v * 2, out_axes=1)(x).shape)
total, each = jax.pmap(lambda v: (lax.psum(v, "i"), v), axis_name="i", out_axes=(None, 0))(x)
print("out_axes tree", total.tolist(), each.shape)


@partial(pmap, axis_name="i", static_broadcasted_argnums=(1, 2))
def powers(v, k, mode):
    return v ** k if mode == "pow" else v * k


print("static", powers(x, 2, "pow")[1].tolist(), powers(x, 3, "mul")[1].tolist(),
      powers(x, 2, "pow")[2].tolist())


@functools.partial(jax.pmap, axis_name="i", in_axes=(None, 0, None),
                   static_broadcasted_argnums=(0,))
def static_first(mode, v, bias):
    return (v + bias) if mode == "add" else v


print("static first", static_first("add", x, np.float32(1.0))[0].tolist())


@functools.partial(jax.pmap, axis_name="i", in_axes=(0, 0, 0, None),
                   static_broadcasted_argnums=4)
def static_last(a, b, c, bias, mode):
    return (a * b + c + bias) if mode == "fma" else a


print("in_axes of the others", static_last(x, x, x, np.float32(0.5), "fma")[2].tolist())

p_update = jax.pmap(lambda w, g: w - g, donate_argnums=(0,))
w = jnp.asarray(x)
w = p_update(w, x)
print("donate", w[1].tolist())

half = jax.devices()[n // 2:]
on_half = jax.pmap(lambda v: lax.psum(v, "h"), "h", devices=half)(x[:len(half)])
print("devices", on_half[0].tolist(), sorted({d.id for d in on_half.devices()}) == sorted(
    d.id for d in half))
other_half = jax.pmap(lambda v: v * 2, devices=half)(x[:len(half)])
print("fed on", jax.pmap(lambda v: lax.psum(v, "j"), "j", devices=half)(other_half)[0].tolist())


def scale_by(v, k):
    return v * k


print("a partial", jax.pmap(functools.partial(scale_by, k=3.0), axis_name="i")(x)[1].tolist())


class Learner:
    def __init__(self, mapper):
        self.count = np.zeros((n,), np.float32)
        self.p_update = mapper(self._update, axis_name="devices")

    def _update(self, count, batch):
        return count + lax.psum(batch.sum(), "devices")

    def step(self, batch):
        self.count = self.p_update(self.count, batch)
        return self.count


map_fn = jax.pmap if n > 1 else jax.vmap
learner = Learner(map_fn)
learner.step(x)
print("a method, pmap as a value", learner.step(x).tolist())
