"""What pmap bodies do: loops whose carries start from constants or from
unmapped values, collectives over the pmap axis and over an inner vmap's
axis name, axis_index, psum of a constant, all_gather, gradients averaged
with pmean."""
import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

n = jax.local_device_count()
x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)


def fori_from_constant(v):
    return lax.fori_loop(0, 3, lambda i, c: c + v.sum() * i, 0.0)


def scan_from_constant(v):
    total, partial_sums = lax.scan(lambda c, r: (c + r, c), jnp.zeros(()), v)
    return total, partial_sums


def while_from_unmapped(v, start):
    def cond(c):
        return c[0] < 4

    def body(c):
        return c[0] + 1, c[1] * 0.5 + v.mean()
    return lax.while_loop(cond, body, (0, start))[1]


print("fori", jax.pmap(fori_from_constant)(x).tolist())
total, partial_sums = jax.pmap(scan_from_constant)(x)
print("scan", total.tolist(), partial_sums[1].tolist())
print("while", jax.pmap(while_from_unmapped, in_axes=(0, None))(x, np.float32(8.0)).tolist())


@functools.partial(jax.pmap, axis_name="devices")
def centered(v):
    # vmap over the rows with a name; pmean over that name, then over the devices.
    rows = v.reshape(2, 2)
    per_row = jax.vmap(lambda r: r - lax.pmean(r, "rows"), axis_name="rows")(rows)
    both = jax.vmap(lambda r: lax.pmean(r, ("devices", "rows")), axis_name="rows")(rows)
    return per_row, both


per_row, both = centered(x)
print("vmap axis pmean", per_row[1].tolist(), both[0].tolist())


@functools.partial(jax.pmap, axis_name="i")
def collectives(v):
    me = lax.axis_index("i")
    return {"index": me, "count": lax.psum(1, "i"), "sum": lax.psum(v, "i"),
            "mean": lax.pmean(v.sum(), "i"), "max": lax.pmax(v[0], "i"),
            "gathered": lax.all_gather(v[0], "i"),
            "shifted": lax.ppermute(v[0], "i", [(k, (k + 1) % n) for k in range(n)])}


out = collectives(x)
print("collectives", out["index"].tolist(), out["count"].tolist(), out["sum"][0].tolist(),
      out["mean"].tolist(), out["max"].tolist(), out["gathered"][3].tolist(),
      out["shifted"].tolist())


def loss(w, batch):
    return jnp.mean((batch @ w) ** 2)


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,))
def sgd(w, batch):
    value, grads = jax.value_and_grad(loss)(w, batch)
    grads = lax.pmean(grads, axis_name="batch")
    return w - 0.01 * grads, lax.pmean(value, axis_name="batch")


w = jnp.ones((n, 4), jnp.float32)
for _ in range(3):
    w, value = sgd(w, x)
print("sgd", np.round(np.asarray(w[0]), 4).tolist(), round(float(value[0]), 2))
