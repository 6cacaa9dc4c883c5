"""Autodiff rules of ``pmapkit_pmap``: jvp, linearize, vjp, grad, jacobians.

Every test compares against a reference computed *without* pmapkit: classic
``jax.pmap`` where it differentiates on jax 0.10.2 (it is a jit(shard_map)
shim there), else ``jax.vmap`` with the same ``axis_name`` over the mapped
axis, or numpy. ``check`` pins pytree structure, shape, dtype and values
(float32: rtol = atol = 1e-5).
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

import pmapkit

from _checks import N, both, check, data


# ----------------------------------------------------------------- helpers --


def loss_of(mapped):
    # A non-symmetric scalar loss so every output element gets its own weight.
    def loss(*args):
        out = mapped(*args)
        return sum(jnp.sum(jnp.sin(o) * (o + 0.5)) for o in jax.tree_util.tree_leaves(out))
    return loss


# ---------------------------------------------------- bodies with collectives --

_PERM = [(i, (i + 1) % N) for i in range(N)]

COLLECTIVE_BODIES = {
    "psum": lambda v: jnp.sin(v) * lax.psum(v, "i"),
    "pmean": lambda v: v ** 2 * lax.pmean(jnp.cos(v), "i"),
    "all_gather": lambda v: (lax.all_gather(v, "i") * jnp.arange(1.0, N + 1)[:, None]).sum(0) * v,
    "all_gather_tiled": lambda v: jnp.dot(jnp.sin(lax.all_gather(v, "i", tiled=True)),
                                         jnp.arange(4.0 * N)) * v,
    "ppermute": lambda v: lax.ppermute(jnp.sin(v), "i", _PERM) * v,
    "psum_scatter": lambda v: lax.psum_scatter(
        jnp.outer(jnp.arange(1.0, N + 1), v) * v[0], "i", scatter_dimension=0) * v,
    "psum_scatter_tiled": lambda v: lax.psum_scatter(
        jnp.outer(jnp.arange(1.0, N + 1), jnp.sin(v)), "i", tiled=True) * v[None],
    "all_to_all": lambda v: lax.all_to_all(
        jnp.outer(jnp.arange(1.0, N + 1), jnp.sin(v)), "i", 0, 0) * v[None],
    "axis_index": lambda v: v ** 2 * (lax.axis_index("i") + 1).astype(jnp.float32),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVE_BODIES))
def test_grad_through_collective(name):
    body = COLLECTIVE_BODIES[name]
    x = data(N, 4, seed=1)
    ours, ref = both(body, axis_name="i")
    check(ours(x), ref(x))
    # jit(grad): one program per implementation (eager grad is covered below)
    check(jax.jit(jax.grad(loss_of(ours)))(x), jax.jit(jax.grad(loss_of(ref)))(x))


def test_grad_eager_through_psum():
    # No enclosing jit: the known pmap runs now, the residuals it returns are
    # concrete sharded arrays fed to the transposed pmap.
    x = data(N, 4, seed=1)
    ours, ref = both(COLLECTIVE_BODIES["psum"], axis_name="i")
    check(jax.grad(loss_of(ours))(x), jax.grad(loss_of(ref))(x))


@pytest.mark.parametrize("name", ["psum", "all_gather_tiled", "ppermute", "all_to_all",
                                  "axis_index"])
def test_jvp_through_collective(name):
    body = COLLECTIVE_BODIES[name]
    x, t = data(N, 4, seed=2), data(N, 4, seed=3)
    ours, ref = both(body, axis_name="i")
    jvp = lambda f: jax.jit(lambda x, t: jax.jvp(f, (x,), (t,)))
    check(jvp(ours)(x, t), jvp(ref)(x, t))


def test_grad_through_pmax_of_stopped_value():
    # pmax/pmin have no differentiation rule in JAX itself; the usual pattern
    # normalises by a stop_gradient'ed pmax, whose gradient is zero.
    def body(v):
        return v / lax.pmax(lax.stop_gradient(jnp.abs(v)), "i") + lax.pmin(
            lax.stop_gradient(v), "i")

    x = data(N, 4, seed=4)
    ours, ref = both(body, axis_name="i")
    check(ours(x), ref(x))
    check(jax.grad(loss_of(ours))(x), jax.grad(loss_of(ref))(x))
    # numpy reference for the value too
    want = x / np.abs(x).max(0, keepdims=True) + x.min(0, keepdims=True)
    check(ours(x), want)


@pytest.mark.parametrize("pmap_impl", ["pmapkit", "jax"])
def test_grad_through_pmax_is_unimplemented_like_jax(pmap_impl):
    # Parity: differentiating pmax itself is NotImplementedError in JAX.
    pm = pmapkit.pmap if pmap_impl == "pmapkit" else jax.pmap
    f = pm(lambda v: lax.pmax(v * v, "i") * v, axis_name="i")
    with pytest.raises(NotImplementedError, match="pmax"):
        jax.grad(lambda x: f(x).sum())(data(N, 4))


# ------------------------------------------------------ forward-mode / linearize --

def test_jvp_pytree_with_zero_tangent_input():
    # Tangent for one input, a symbolic zero for the other (grad w.r.t. one arg).
    def body(a, b):
        return {"s": jnp.sin(a) * b, "m": lax.pmean(a * b, "i")}

    a, b, ta = data(N, 3, seed=5), data(N, 3, seed=6), data(N, 3, seed=7)
    ours, ref = both(body, axis_name="i")
    got = jax.jvp(lambda a: ours(a, b), (a,), (ta,))
    want = jax.jvp(lambda a: ref(a, b), (a,), (ta,))
    check(got, want)


def test_linearize_matches_jvp():
    x, t1, t2 = data(N, 4, seed=8), data(N, 4, seed=9), data(N, 4, seed=10)
    ours, ref = both(COLLECTIVE_BODIES["psum"], axis_name="i")
    y, f_lin = jax.linearize(ours, x)
    y_ref, f_lin_ref = jax.linearize(ref, x)
    check(y, y_ref)
    check(f_lin(t1), f_lin_ref(t1))
    check(f_lin(t2), jax.jvp(ref, (x,), (t2,))[1])


def test_jacfwd():
    x = data(N, 2, seed=11)
    ours, ref = both(lambda v: jnp.sin(v) * lax.psum(v, "i"), axis_name="i")
    check(jax.jit(jax.jacfwd(ours))(x), jax.jit(jax.jacfwd(ref))(x))


# ---------------------------------------------------------------- reverse mode --

def test_vjp_multiple_outputs():
    def body(a, b):
        return jnp.sin(a) * b, lax.psum(a * b, "i")

    a, b = data(N, 3, seed=12), data(N, 3, seed=13)
    ca, cb = data(N, 3, seed=14), data(N, 3, seed=15)
    ours, ref = both(body, axis_name="i")
    y, vjp = jax.vjp(ours, a, b)
    y_ref, vjp_ref = jax.vjp(ref, a, b)
    check(y, y_ref)
    check(vjp((ca, cb)), vjp_ref((ca, cb)))


def test_grad_wrt_broadcast_in_axes_none_input():
    # The cotangent of an in_axes=None operand is summed over the devices.
    def body(v, w):
        return jnp.tanh(v @ w) * lax.pmean(v, "i")[0]

    x, w = data(N, 3, seed=16), data(3, 5, seed=17)
    ours, ref = both(body, axis_name="i", in_axes=(0, None))
    g = jax.jit(jax.grad(loss_of(ours), argnums=(0, 1)))(x, w)
    g_ref = jax.jit(jax.grad(loss_of(ref), argnums=(0, 1)))(x, w)
    check(g, g_ref)
    # independent reference: vmap over the mapped axis
    g_vmap = jax.grad(loss_of(jax.vmap(body, in_axes=(0, None), axis_name="i")),
                      argnums=(0, 1))(x, w)
    check(g, g_vmap)


def test_grad_out_axes_none_psum_output():
    # out_axes=None output (one replicated value): its cotangent is shared
    # out over the devices and must add back up to exactly one copy.
    def body(v, w):
        return lax.psum(jnp.sin(v) * w, "i"), v * 2

    x, w = data(N, 4, seed=18), data(4, seed=19)
    ours, ref = both(body, axis_name="i", in_axes=(0, None), out_axes=(None, 0))
    out = ours(x, w)
    check(out, ref(x, w))
    assert out[0].shape == (4,)
    g = jax.jit(jax.grad(loss_of(ours), argnums=(0, 1)))(x, w)
    check(g, jax.jit(jax.grad(loss_of(ref), argnums=(0, 1)))(x, w))
    # numpy: d/dx sum(sin(S)*(S+.5)) with S = sum_i sin(x_i) w, plus the 2x part
    s = (np.sin(x) * w).sum(0)
    ds = np.cos(s) * (s + 0.5) + np.sin(s)
    dy = np.cos(2 * x) * (2 * x + 0.5) + np.sin(2 * x)
    check(g, (ds * np.cos(x) * w + 2 * dy, (ds * np.sin(x)).sum(0)), tol=1e-4)


def _grad_of_grad(pm):
    x = data(N, 4, seed=20)
    f = pm(lambda v, s: jnp.sin(v * s) * lax.psum(v, "i"), axis_name="i",
           in_axes=(0, None))
    inner = jax.grad(lambda x, s: jnp.sum(f(x, s) ** 2), argnums=1)
    return jax.grad(lambda s: inner(x, s))


def test_grad_of_grad_jit():
    s = np.float32(1.3)
    check(jax.jit(_grad_of_grad(pmapkit.pmap))(s), jax.jit(_grad_of_grad(jax.pmap))(s))


# Regression (fixed in 1707751): eager second-order / vmap-of-transpose fed
# the concrete residuals' sharded avals (Auto mesh) into the re-transformed
# body -> "ValueError: Mesh for all inputs should be equal" at lowering.
def test_grad_of_grad_eager():
    s = np.float32(1.3)
    check(_grad_of_grad(pmapkit.pmap)(s), _grad_of_grad(jax.pmap)(s))


def test_hessian_vector_product():
    # forward-over-reverse: jvp of grad
    x, t = data(N, 3, seed=21), data(N, 3, seed=22)
    ours, ref = both(COLLECTIVE_BODIES["pmean"], axis_name="i")
    hvp = lambda f: jax.jit(lambda x, t: jax.jvp(jax.grad(loss_of(f)), (x,), (t,)))
    check(hvp(ours)(x, t), hvp(ref)(x, t))


def _jacrev_pair():
    x = data(N, 2, seed=23)
    ours, ref = both(lambda v: jnp.sin(v) * lax.psum(v, "i"), axis_name="i")
    return x, ours, ref


def test_jacrev_jit():
    x, ours, ref = _jacrev_pair()
    check(jax.jit(jax.jacrev(ours))(x), jax.jit(jax.jacrev(ref))(x))


def test_jacrev_eager():
    # jacrev = vmap of the vjp: vmap of the transposed pmap, residuals concrete.
    x, ours, ref = _jacrev_pair()
    check(jax.jacrev(ours)(x), jax.jacrev(ref)(x))


def test_value_and_grad_has_aux_pytree_params():
    def body(params, xb):
        w, b = params["w"], params["b"]
        pred = xb @ w + b[None]
        return lax.pmean(jnp.mean(pred ** 2), "i"), pred

    params = {"w": data(N, 3, 2, seed=24), "b": data(N, 2, seed=25)}
    xb = data(N, 5, 3, seed=26)

    def total(pm):
        f = pm(body, axis_name="i")

        def loss(p):
            l, pred = f(p, xb)
            return l.sum(), pred
        return jax.value_and_grad(loss, has_aux=True)(params)

    check(total(pmapkit.pmap), total(jax.pmap))


def test_static_broadcasted_argnums_under_grad():
    def body(v, power, scale):
        return lax.psum(v ** power, "i") * scale

    x = data(N, 4, seed=27)
    for power in (2, 3):
        ours, ref = both(body, axis_name="i", static_broadcasted_argnums=1,
                         in_axes=(0, None, None))
        g = jax.jit(jax.grad(lambda x, s: loss_of(ours)(x, power, s), argnums=(0, 1)))(
            x, np.float32(0.7))
        g_ref = jax.jit(jax.grad(lambda x, s: loss_of(ref)(x, power, s), argnums=(0, 1)))(
            x, np.float32(0.7))
        check(g, g_ref)


def test_data_parallel_step_pmap_of_grad_then_pmean():
    # pmapkit.pmap(jax.grad(f)) then lax.pmean: one data-parallel SGD step.
    def loss(w, xb, yb):
        return jnp.mean((xb @ w - yb) ** 2)

    def step(w, xb, yb):
        g = lax.pmean(jax.grad(loss)(w, xb, yb), "batch")
        return w - 0.1 * g, g

    w = np.zeros((N, 3), np.float32) + data(3, seed=28)
    xb, yb = data(N, 6, 3, seed=29), data(N, 6, seed=30)
    ours, ref = both(step, axis_name="batch")
    out = ours(w, xb, yb)
    check(out, ref(w, xb, yb))
    # numpy: the full-batch gradient of the mean loss (equal shard sizes)
    X, Y = xb.reshape(-1, 3).astype(np.float64), yb.reshape(-1).astype(np.float64)
    g_np = 2 * X.T @ (X @ w[0] - Y) / len(Y)
    check(out[1], np.broadcast_to(g_np, (N, 3)).astype(np.float32))


def test_grad_wrt_closed_over_tracer():
    # A value closed over by the body is a tracer of the outer grad: it must
    # become an explicit (broadcast) operand and get its cotangent summed.
    x = data(N, 4, seed=31)

    def make(pm):
        def outer(s):
            return jnp.sum(pm(lambda v: jnp.sin(v * s) * lax.psum(v, "i"),
                              axis_name="i")(x) ** 2)
        return jax.grad(outer)

    s = np.float32(0.8)
    check(make(pmapkit.pmap)(s), make(jax.pmap)(s))


# ------------------------------------------- committed cotangents (eager) --

def _replicated(x):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("params",))
    return jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


@pytest.mark.parametrize("how", ["grad", "vjp", "value_and_grad"])
def test_eager_grad_with_committed_weights_through_cyclic_ppermute(how):
    # A replicated weight (as flax's replicate makes) multiplies the pmap's
    # output: its cotangent comes back committed, placed unlike the pmap's
    # output. It must be accepted as classic pmap did (no "Sharding passed to
    # jit does not match the sharding on the respective arg").
    x = data(N, 4, seed=3)
    w = _replicated(data(N, 4, seed=4))
    ours, ref = both(lambda v: lax.ppermute(jnp.sin(v), "i", _PERM) * v, axis_name="i")

    def run(mapped):
        if how == "vjp":
            _, pullback = jax.vjp(mapped, x)
            return pullback(w)
        loss = lambda v: jnp.sum(mapped(v) * w)  # noqa: E731
        if how == "grad":
            return jax.grad(loss)(x)
        return jax.value_and_grad(loss)(x)

    check(run(ours), run(ref))
