"""One XLA compile per signature: pmapkit.pmap / pjit called outside jit under
grad, jvp, vjp, linearize and vmap compile on the first call of a signature
only, as jax.pmap / jax.jit do.

Compiles are counted with JAX's own monitoring event (fired once per backend
compile, whoever compiles: our impl rule, the jit our equation is wrapped in
under a transformation, or JAX's eager ops). Each case runs the same step
with JAX's implementation and with pmapkit's: both must compile nothing after
the first call.
"""
import contextlib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P

N = 8
CALLS = 5
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    def __init__(self):
        self.count = 0

    def __call__(self, event, duration, **kwargs):
        if event == _BACKEND_COMPILE:
            self.count += 1

    def per_call(self, step, calls=CALLS):
        """Compiles of each of ``calls`` runs of ``step`` (results blocked on)."""
        counts = []
        for _ in range(calls):
            before = self.count
            jax.block_until_ready(step())
            counts.append(self.count - before)
        return counts


@pytest.fixture
def compiles():
    counter = CompileCounter()
    jax.monitoring.register_event_duration_secs_listener(counter)
    yield counter
    jax.monitoring.unregister_event_duration_listener(counter)


def _data(*shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


def _body(v):
    return jnp.sin(v) * lax.psum(v, "i") + lax.axis_index("i").astype(v.dtype)


X = _data(N, 3)
T = _data(N, 3, seed=1)


def _transformed(f, x, t):
    return {
        "grad": lambda: jax.grad(lambda x: f(x).sum())(x),
        "value_and_grad": lambda: jax.value_and_grad(lambda x: (f(x) ** 2).sum())(x),
        "jvp": lambda: jax.jvp(f, (x,), (t,)),
        "vjp": lambda: jax.vjp(f, x)[1](t),
        "linearize": lambda: jax.linearize(f, x)[1](t),
        "vmap": lambda: jax.vmap(f)(jnp.stack([x, 2 * x])),
        "vmap_of_grad": lambda: jax.vmap(jax.grad(lambda x: f(x).sum()))(
            jnp.stack([x, 2 * x])),
        "jacrev": lambda: jax.jacrev(lambda x: f(x).sum(0))(x),
        "hessian_vector": lambda: jax.jvp(jax.grad(lambda x: f(x).sum()), (x,), (t,)),
    }


TRANSFORMS = list(_transformed(None, None, None))
PMAPS = {"jax": jax.pmap, "pmapkit": pmapkit.pmap}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("impl", list(PMAPS))
def test_pmap_under_transform_compiles_once(compiles, impl, transform):
    f = PMAPS[impl](_body, axis_name="i")
    counts = compiles.per_call(_transformed(f, X, T)[transform])
    assert counts[0] >= 1, counts
    assert counts[1:] == [0] * (CALLS - 1), counts


@pytest.mark.parametrize("transform", ["grad", "jvp", "vmap", "linearize"])
def test_pmap_transform_values_match_jax(transform):
    ours = _transformed(pmapkit.pmap(_body, axis_name="i"), X, T)[transform]
    ref = _transformed(jax.pmap(_body, axis_name="i"), X, T)[transform]
    for _ in range(2):  # the cached second call too
        for o, r in zip(jax.tree_util.tree_leaves(ours()), jax.tree_util.tree_leaves(ref())):
            np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-5, atol=1e-5)


def test_each_signature_compiles_once(compiles):
    # A function of its own: wrappers of _body share what earlier tests compiled.
    f = pmapkit.pmap(lambda v: _body(v), axis_name="i")
    g = jax.grad(lambda x: f(x).sum())
    x3, x5 = X, _data(N, 5, seed=2)
    counts = [compiles.per_call(lambda x=x: g(x), calls=1)[0]
              for x in (x3, x5, x3, x5, x3, x5)]
    assert counts[0] >= 1 and counts[1] >= 1, counts
    assert counts[2:] == [0, 0, 0, 0], counts


def test_training_loop_compiles_in_the_first_steps_only(compiles):
    def loss(w, xb):
        return lax.pmean(jnp.mean((xb @ w) ** 2), "i")

    for impl in (jax.pmap, pmapkit.pmap):
        step_loss = impl(loss, axis_name="i")
        w = jnp.broadcast_to(_data(3, 2, seed=4), (N, 3, 2))
        xb = _data(N, 4, 3, seed=5)

        def step():
            nonlocal w
            grads = jax.grad(lambda w: step_loss(w, xb).sum())(w)
            w = w - 0.1 * grads
            return w

        counts = compiles.per_call(step, calls=6)
        # The first step sees a host-made w; later ones the updated array.
        assert counts[2:] == [0] * 4, (impl, counts)


def test_static_broadcasted_argument_keys_the_trace(compiles):
    f = pmapkit.pmap(lambda v, k: v * k, axis_name="i", static_broadcasted_argnums=1)
    g2 = lambda: jax.grad(lambda x: f(x, 2.0).sum())(X)
    g3 = lambda: jax.grad(lambda x: f(x, 3.0).sum())(X)
    assert compiles.per_call(g2)[1:] == [0] * (CALLS - 1)
    np.testing.assert_allclose(np.asarray(g2()), np.full((N, 3), 2.0))
    # Another static value is another signature: traced and compiled anew ...
    assert compiles.per_call(g3, calls=1)[0] >= 1
    np.testing.assert_allclose(np.asarray(g3()), np.full((N, 3), 3.0))
    # ... and the first one is still cached.
    assert compiles.per_call(g2, calls=2) == [0, 0]


def test_nested_pmap_under_grad_compiles_once(compiles):
    inner = pmapkit.pmap(lambda v: v * lax.psum(v, "j"), axis_name="j")
    outer = pmapkit.pmap(lambda v: inner(v) + lax.psum(v, "i"), axis_name="i")
    x = _data(2, 4, 3, seed=6)
    counts = compiles.per_call(lambda: jax.grad(lambda x: outer(x).sum())(x))
    assert counts[1:] == [0] * (CALLS - 1), counts


def test_effectful_pmap_compiles_once_per_signature(compiles):
    # An effect keeps the signature off the compiled fast path: every call
    # takes Python, and must still reuse its traced body and program.
    seen = []
    f = pmapkit.pmap(lambda v: (jax.debug.callback(lambda: seen.append(1)), v * 2)[1],
                     axis_name="i")
    x = np.arange(N, dtype=np.float32)
    counts = compiles.per_call(lambda: f(x))
    jax.effects_barrier()
    assert counts[1:] == [0] * (CALLS - 1), counts
    assert len(seen) == CALLS * N


def test_clear_cache_retraces(compiles):
    traces = []

    def body(v):
        traces.append(1)
        return v * 2

    f = pmapkit.pmap(body, axis_name="i")
    g = lambda: jax.grad(lambda x: f(x).sum())(X)
    compiles.per_call(g, calls=2)
    assert len(traces) == 1
    f.clear_cache()
    g()
    assert len(traces) == 2


# -- pjit ----------------------------------------------------------------------
_DEVS = np.array(jax.devices()[:4]).reshape(2, 2)
MESH = pmapkit.Mesh(_DEVS, ("x", "y"))
JAX_MESH = jax.sharding.Mesh(_DEVS, ("x", "y"))
A = _data(8, 4, seed=7)
TA = _data(8, 4, seed=8)


def _pjit_body(a):
    return jnp.tanh(a) * 3.0 + a.sum()


def _jit_ref():
    return jax.jit(_pjit_body, in_shardings=NamedSharding(JAX_MESH, P("x", "y")),
                   out_shardings=NamedSharding(JAX_MESH, P("x")))


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("impl", ["jit", "pjit"])
def test_pjit_under_transform_compiles_once(compiles, impl, transform):
    f = (pmapkit.pjit(_pjit_body, P("x", "y"), P("x")) if impl == "pjit"
         else _jit_ref())
    # jax.jit names its shardings; `with MESH` would also set JAX's mesh,
    # under which JAX itself refuses the reference's committed operands.
    with MESH if impl == "pjit" else contextlib.nullcontext():
        counts = compiles.per_call(_transformed(f, A, TA)[transform])
    assert counts[0] >= 1, counts
    assert counts[1:] == [0] * (CALLS - 1), counts


def test_pjit_grad_values_match_jit():
    f = pmapkit.pjit(_pjit_body, P("x", "y"), P("x"))
    ref = jax.grad(lambda a: _jit_ref()(a).sum())(A)
    with MESH:
        for _ in range(2):
            out = jax.grad(lambda a: f(a).sum())(A)
            np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5)


def test_pjit_mesh_keys_the_trace(compiles):
    # The same function under another mesh is another program.
    other = pmapkit.Mesh(np.array(jax.devices()[4:8]).reshape(2, 2), ("x", "y"))
    f = pmapkit.pjit(_pjit_body, P("x", "y"), P("x"))
    g = lambda: jax.grad(lambda a: f(a).sum())(A)
    with MESH:
        first = g()
        assert compiles.per_call(g, calls=2) == [0, 0]
    with other:
        out = g()
        assert out.sharding.mesh.devices.flat[0] == jax.devices()[4]
        assert compiles.per_call(g, calls=2) == [0, 0]
    np.testing.assert_allclose(np.asarray(out), np.asarray(first), rtol=1e-6)
