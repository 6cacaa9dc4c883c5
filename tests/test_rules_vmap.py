"""Batching rule of ``pmapkit_pmap``: vmap of a pmap and pmap of a vmap.

References are computed without pmapkit: classic ``jax.pmap`` (a
jit(shard_map) shim on jax 0.10.2) where it batches, else nested
``jax.vmap`` with the pmap's ``axis_name``, or numpy.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax


from _checks import N, both, check, data

B = 3      # vmapped (non-device) batch size


def body(v):
    return jnp.sin(v) * lax.psum(v, "i") + lax.axis_index("i").astype(v.dtype)


@pytest.mark.parametrize("vmap_axis,shape", [(0, (B, N, 4)), (1, (N, B, 4)), (2, (N, 4, B))])
def test_vmap_of_pmap_over_a_non_mapped_axis(vmap_axis, shape):
    x = data(*shape, seed=1)
    ours, ref = both(body, axis_name="i")
    out = jax.vmap(ours, in_axes=vmap_axis)(x)
    check(out, jax.vmap(ref, in_axes=vmap_axis)(x))
    # vmap-of-vmap reference: same semantics with no devices at all
    check(out, jax.vmap(jax.vmap(body, axis_name="i"), in_axes=vmap_axis)(x))


def test_vmap_of_pmap_in_axes_one_out_axes_one():
    # pmap maps axis 1, vmap batches axis 0 and returns its axis at 2.
    kw = dict(axis_name="i", in_axes=1, out_axes=1)
    x = data(B, 4, N, seed=2)
    ours, ref = both(body, **kw)
    out = jax.vmap(ours, in_axes=0, out_axes=2)(x)
    assert out.shape == (4, N, B)
    check(out, jax.vmap(ref, in_axes=0, out_axes=2)(x))


def test_pmap_of_vmap():
    def inner(v):  # per device: v is (B, 4)
        return jax.vmap(lambda r: r * lax.pmean(r, "i") + lax.psum(r, "b"),
                        axis_name="b")(v)

    x = data(N, B, 4, seed=3)
    ours, ref = both(inner, axis_name="i")
    out = ours(x)
    check(out, ref(x))
    # numpy
    want = x * x.mean(0, keepdims=True) + x.sum(1, keepdims=True)
    check(out, want)


def test_vmap_axis_name_collective_inside_pmap_body():
    # psum over the *vmap* axis name, from inside the pmap body.
    def inner(v):
        return v / lax.psum(jnp.abs(v), "b") + lax.pmean(v, "i") * lax.axis_index("b").astype(v.dtype)

    x = data(B, N, 4, seed=4)
    ours, ref = both(inner, axis_name="i")
    out = jax.vmap(ours, axis_name="b")(x)
    check(out, jax.vmap(ref, axis_name="b")(x))
    want = (x / np.abs(x).sum(0, keepdims=True)
            + x.mean(1, keepdims=True) * np.arange(B, dtype=np.float32)[:, None, None])
    check(out, want)


def test_vmap_collective_over_both_axes():
    inner = lambda v: v - lax.pmean(v, ("b", "i"))
    x = data(B, N, 2, seed=5)
    ours, ref = both(inner, axis_name="i")
    out = jax.vmap(ours, axis_name="b")(x)
    check(out, jax.vmap(ref, axis_name="b")(x))
    check(out, x - x.mean((0, 1), keepdims=True))


@pytest.mark.parametrize("batched", ["broadcast_arg", "mapped_arg", "both"])
def test_vmap_with_pmap_in_axes_none_argument(batched):
    def inner(v, w):
        return jnp.tanh(v @ w) + lax.psum(v, "i").sum()

    kw = dict(axis_name="i", in_axes=(0, None))
    x, xs = data(N, 3, seed=6), data(B, N, 3, seed=7)
    w, ws = data(3, 2, seed=8), data(B, 3, 2, seed=9)
    args, vin = {
        "broadcast_arg": ((x, ws), (None, 0)),
        "mapped_arg": ((xs, w), (0, None)),
        "both": ((xs, ws), (0, 0)),
    }[batched]
    ours, ref = both(inner, **kw)
    out = jax.vmap(ours, in_axes=vin)(*args)
    assert out.shape == (B, N, 2)
    check(out, jax.vmap(ref, in_axes=vin)(*args))


def test_vmap_of_pmap_with_out_axes_none():
    inner = lambda v: (lax.psum(jnp.sin(v), "i"), v * 2)
    kw = dict(axis_name="i", out_axes=(None, 0))
    x = data(B, N, 4, seed=10)
    ours, ref = both(inner, **kw)
    out = jax.vmap(ours)(x)
    assert out[0].shape == (B, 4) and out[1].shape == (B, N, 4)
    check(out, jax.vmap(ref)(x))
    check(out, (np.sin(x).sum(1), x * 2))


def test_vmap_of_pmap_pytree_partially_batched():
    def inner(d):
        return {"y": d["a"] * lax.pmean(d["c"], "i"), "z": lax.psum(d["a"], "i")}

    a, c = data(B, N, 2, seed=11), data(N, 2, seed=12)
    ours, ref = both(inner, axis_name="i")
    vin = ({"a": 0, "c": None},)
    out = jax.vmap(ours, in_axes=vin)({"a": a, "c": c})
    check(out, jax.vmap(ref, in_axes=vin)({"a": a, "c": c}))


def test_jit_of_vmap_of_pmap():
    x = data(N, B, 4, seed=13)
    ours, ref = both(body, axis_name="i")
    check(jax.jit(jax.vmap(ours, in_axes=1))(x), jax.jit(jax.vmap(ref, in_axes=1))(x))


def test_vmap_of_grad_of_pmap():
    x = data(B, N, 4, seed=14)
    ours, ref = both(body, axis_name="i")
    g = lambda f: jax.vmap(jax.grad(lambda v: jnp.sum(jnp.cos(f(v)))))
    check(jax.jit(g(ours))(x), jax.jit(g(ref))(x))
