"""``pmapkit.pmap`` under and around ``jax.jit``.

Under an outer trace the primitive is bound inside a sharded ``jit`` equation
(pmapkit/core/programs/compiling.py ``bind_in_outer_trace``). References are computed
without pmapkit: classic ``jax.pmap`` (same program shape) or numpy.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit

from _checks import N, check, data


_PERM = [(i, (i + 1) % N) for i in range(N)]

BODIES = {
    "elementwise": lambda v: jnp.sin(v) * 2 + 1,
    "psum": lambda v: v - lax.psum(v, "i") / N,
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", tiled=True)[:4] * v,
    "ppermute": lambda v: lax.ppermute(v, "i", _PERM) + lax.axis_index("i").astype(v.dtype),
    "int_psum": lambda v: lax.psum((v * 10).astype(jnp.int32), "i"),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_jit_of_pmap(name):
    x = data(N, 4, seed=1)
    out = jax.jit(pmapkit.pmap(BODIES[name], axis_name="i"))(x)
    check(out, jax.jit(jax.pmap(BODIES[name], axis_name="i"))(x))


@pytest.mark.parametrize("name", ["elementwise", "psum"])
def test_pmap_of_jit(name):
    x = data(N, 4, seed=2)
    out = pmapkit.pmap(jax.jit(BODIES[name]), axis_name="i")(x)
    check(out, jax.pmap(jax.jit(BODIES[name]), axis_name="i")(x))


def test_pmap_inside_jit_with_ops_around():
    def make(pm):
        inner = pm(lambda v, w: jnp.tanh(v @ w) + lax.pmean(v, "i").sum(),
                   axis_name="i", in_axes=(0, None))

        @jax.jit
        def f(x, w):
            y = jnp.cos(x) * 3.0           # before: a global op feeding the pmap
            z = inner(y, w.T)
            return z.sum(axis=0) + x.mean(), z[::2]   # after: global ops on the result
        return f

    x, w = data(N, 3, seed=3), data(5, 3, seed=4)
    check(make(pmapkit.pmap)(x, w), make(jax.pmap)(x, w))
    # numpy reference
    y = np.cos(x) * 3.0
    z = np.tanh(y @ w.T) + y.mean(0).sum()
    check(make(pmapkit.pmap)(x, w), (z.sum(0) + x.mean(), z[::2]))


def test_two_pmaps_chained_inside_jit():
    def make(pm):
        a = pm(lambda v: v * lax.axis_index("i").astype(v.dtype), axis_name="i")
        b = pm(lambda v: lax.psum(v, "j") - v, axis_name="j", in_axes=1, out_axes=1)
        return jax.jit(lambda x: b(a(x).T))

    x = data(N, N, seed=5)
    check(make(pmapkit.pmap)(x), make(jax.pmap)(x))


def test_jit_of_pmap_in_axes_none_out_axes_one_and_none():
    f = lambda v, w: (v * w, lax.psum(v, "i"))
    kw = dict(axis_name="i", in_axes=(1, None), out_axes=(1, None))
    x, w = data(3, N, seed=6), data(3, seed=7)
    out = jax.jit(pmapkit.pmap(f, **kw))(x, w)
    check(out, jax.jit(jax.pmap(f, **kw))(x, w))
    check(out, (x * w[:, None], x.sum(1)))


def test_jit_of_pmap_traces_once():
    traces = []

    def body(v):
        traces.append(1)
        return lax.psum(v * v, "i")

    f = jax.jit(pmapkit.pmap(body, axis_name="i"))
    for k in range(3):
        x = data(N, 2, seed=k)
        out = f(x).block_until_ready()
        check(out, np.broadcast_to((x * x).sum(0), (N, 2)))
    assert len(traces) == 1


@pytest.mark.parametrize("power", [2, 3])
def test_static_broadcasted_argnums_under_jit(power):
    def body(v, p, scale):
        return lax.psum(v ** p, "i") * scale

    ours = pmapkit.pmap(body, axis_name="i", static_broadcasted_argnums=1,
                        in_axes=(0, None, None))
    ref = jax.pmap(body, axis_name="i", static_broadcasted_argnums=1,
                   in_axes=(0, None, None))
    # the static value comes through jit's own static_argnums
    f = jax.jit(lambda x, p, s: ours(x, p, s), static_argnums=1)
    g = jax.jit(lambda x, p, s: ref(x, p, s), static_argnums=1)
    x = data(N, 4, seed=8)
    check(f(x, power, np.float32(0.5)), g(x, power, np.float32(0.5)))
    check(f(x, power, np.float32(0.5)),
          np.broadcast_to((x ** power).sum(0) * 0.5, (N, 4)).astype(np.float32))


def test_donate_argnums_of_inner_pmap_under_jit():
    # Inside jit the inner donation is not a buffer donation of the caller's
    # array (jit owns the buffers): values are right and, as with jax.pmap,
    # the caller's input stays alive.
    def make(pm):
        p = pm(lambda v, w: (v * 2 + w, lax.psum(w, "i")), axis_name="i",
               donate_argnums=0)
        return jax.jit(lambda x, w: p(x + 1, w))

    x, w = jnp.asarray(data(N, 4, seed=9)), jnp.asarray(data(N, 4, seed=10))
    out = make(pmapkit.pmap)(x, w)
    x2, w2 = jnp.asarray(data(N, 4, seed=9)), jnp.asarray(data(N, 4, seed=10))
    ref = make(jax.pmap)(x2, w2)
    check(out, ref)
    assert x.is_deleted() == x2.is_deleted()
    assert not x.is_deleted()


def test_jit_donate_argnums_around_pmap():
    # Donation by the enclosing jit: the donated input is consumed as with jax.pmap.
    def make(pm):
        return jax.jit(pm(lambda v: jnp.sin(v) + lax.pmean(v, "i"), axis_name="i"),
                       donate_argnums=0)

    xs = data(N, 4, seed=11)
    x = jax.device_put(xs)
    out = make(pmapkit.pmap)(x)
    x_ref = jax.device_put(xs)
    ref = make(jax.pmap)(x_ref)
    check(out, ref)
    check(out, np.sin(xs) + xs.mean(0, keepdims=True))
    assert x.is_deleted() == x_ref.is_deleted()


# ------------------------------------ inputs that already live on the pmap mesh --

# Regression (fixed in 1707751): under an outer trace the operands' avals
# carry a NamedSharding on an Auto mesh named like the pmap axis (what a pmap
# output, or a device_put onto the pmap's mesh, is). The per-device body was
# traced with those avals, so ops building a broadcast with a sharding param
# (ones_like, grad's seed cotangent) mixed that Auto mesh with the Manual one
# of the lowering's shard_map: "ValueError: Mesh for all inputs should be equal".
ON_MESH_BODIES = {
    "elementwise": lambda v: jnp.sin(v) * 2,
    "ones_like": lambda v: v * jnp.ones_like(v),
    "inner_grad": lambda v: jax.grad(lambda u: jnp.sin(u).sum())(v) + lax.psum(v, "i"),
}


def on_mesh(x, axis_name):
    mesh = Mesh(np.array(jax.devices()[:N]), (axis_name,))
    return jax.device_put(x, NamedSharding(mesh, P(axis_name)))


@pytest.mark.parametrize("name", ["elementwise", "ones_like", "inner_grad"])
def test_jit_of_pmap_fed_array_sharded_on_pmap_mesh(name):
    xs = data(N, 3, seed=12)
    body = BODIES.get(name) or ON_MESH_BODIES[name]
    out = jax.jit(pmapkit.pmap(body, axis_name="i"))(on_mesh(xs, "i"))
    check(out, jax.jit(jax.pmap(body, axis_name="i"))(on_mesh(xs, "i")))


def test_jit_of_pmap_fed_its_own_output():
    f = pmapkit.pmap(ON_MESH_BODIES["ones_like"], axis_name="i")
    xs = data(N, 3, seed=13)
    y = f(xs)                 # eager: fine
    check(jax.jit(f)(y), xs)  # traced with y's sharded aval


# ---------------------------------------------------- cached jitted train step --

@pytest.mark.parametrize("pmap_impl,feed", [
    ("jax", "device"),  # control: proves the trace-count expectation itself is right
    ("pmapkit", "device"),
    # params round-tripped through the host each step (numpy in: the
    # operands' avals carry no mesh)
    ("pmapkit", "host"),
])
def test_cached_jitted_training_step_compiles_once_and_matches_reference(pmap_impl, feed):
    """pmap inside jax.jit with grad + pmean (the README demo's linear
    regression): the step body is traced once over 20 steps and the params
    match a single-device numpy (float64) full-batch gradient descent."""
    pm = pmapkit.pmap if pmap_impl == "pmapkit" else jax.pmap
    rng = np.random.default_rng(0)
    true_w = np.array([2.0, -3.0, 0.5, 1.0], np.float32)
    xb = rng.normal(size=(N, 32, 4)).astype(np.float32)
    yb = (xb @ true_w + 0.7 + 0.01 * rng.normal(size=(N, 32))).astype(np.float32)
    lr, steps = 0.1, 20

    def loss_fn(params, x, y):
        w, b = params
        return jnp.mean((x @ w + b - y) ** 2)

    body_traces, step_traces = [], []

    def per_device(params, x, y):
        body_traces.append(1)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = lax.pmean(grads, "batch")
        loss = lax.pmean(loss, "batch")
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

    p_step = pm(per_device, axis_name="batch")

    @jax.jit
    def step(params, x, y):
        step_traces.append(1)
        return p_step(params, x, y)

    # Replicated params placed like the step's outputs, so the outputs fed
    # back hit the same jit cache entry from the first call on.
    params = (np.zeros((N, 4), np.float32), np.zeros((N,), np.float32))
    if feed == "device":
        params = on_mesh(params, "batch")
    losses = []
    for _ in range(steps):
        if feed == "host":
            params = jax.tree_util.tree_map(np.asarray, params)
        params, loss = step(params, xb, yb)
        jax.block_until_ready((params, loss))
        losses.append(np.asarray(loss))
    assert len(step_traces) == 1
    assert len(body_traces) == 1
    assert step._cache_size() == 1

    # single-device reference: full-batch GD (equal shard sizes => the pmean
    # of per-shard mean-loss gradients is the full-batch gradient)
    X = xb.reshape(-1, 4).astype(np.float64)
    Y = yb.reshape(-1).astype(np.float64)
    w, b = np.zeros(4), 0.0
    ref_losses = []
    for _ in range(steps):
        r = X @ w + b - Y
        ref_losses.append(np.mean(r ** 2))
        w, b = w - lr * 2 * X.T @ r / len(Y), b - lr * 2 * r.mean()
    check(params, (np.broadcast_to(w, (N, 4)).astype(np.float32),
                   np.broadcast_to(b, (N,)).astype(np.float32)))
    check(jnp.stack(losses), np.stack([np.full((N,), l, np.float32) for l in ref_losses]),
          tol=1e-4)
