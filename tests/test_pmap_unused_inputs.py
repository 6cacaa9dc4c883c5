"""pmaps whose results do not depend on their inputs (constants, unused
operands, operands passed through), inside enclosing traces: an enclosing
jit must still learn the pmap's devices after DCE drops the unused operands
(it crashed compiling, ``xla.sdy.LocalToGlobalShape`` for Host). Each case is
compared with jax.pmap down to values, shapes and dtypes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit

N = 8
X = np.arange(3 * N, dtype=np.float32).reshape(3, N)

BODIES = {
    "constant": lambda x: 0.,
    "constant_array": lambda x: jnp.ones(2, jnp.int32),
    "unused_then_used": lambda x, y: y * 2,
    "passthrough": lambda x: x,
    "constant_and_passthrough": lambda x: (jnp.float32(1), x),
}

WRAPS = {
    "vmap": lambda p: jax.vmap(p),
    "jit": lambda p: jax.jit(jax.vmap(p)),
    "vmap_jit": lambda p: jax.vmap(jax.jit(p)),
    "scan": lambda p: lambda *xs: jax.lax.scan(lambda c, r: (c, p(*r)), 0., xs)[1],
    "jit_plus_one": lambda p: jax.jit(lambda *xs: jax.tree.map(lambda o: o + 1, jax.vmap(p)(*xs))),
}


def check_same(got, want):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def args_for(name):
    return (X, X + 1) if name == "unused_then_used" else (X,)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("body", BODIES)
def test_matches_jax_pmap(body, wrap):
    f = BODIES[body]
    check_same(WRAPS[wrap](pmapkit.pmap(f))(*args_for(body)),
               WRAPS[wrap](jax.pmap(f))(*args_for(body)))


def test_out_axes_none_constant():
    f = lambda x: (0., x)  # noqa: E731
    got = jax.jit(pmapkit.pmap(f, out_axes=(None, 0)))(X[0])
    want = jax.jit(jax.pmap(f, out_axes=(None, 0)))(X[0])
    check_same(got, want)


def test_grad_through_constant_pmap():
    f = lambda x: jnp.sum(x * 0. + 3.)  # noqa: E731
    loss = lambda pm: lambda x: jnp.sum(pm(f)(x))  # noqa: E731
    check_same(jax.jit(jax.grad(loss(pmapkit.pmap)))(X[0]),
               jax.jit(jax.grad(loss(jax.pmap)))(X[0]))
    check_same(jax.grad(loss(pmapkit.pmap))(X[0]), jax.grad(loss(jax.pmap))(X[0]))


@pytest.mark.parametrize("wrap", ["jit", "vmap", "jit_vmap"])
def test_nested_pmap_constant(wrap):
    # jax.pmap no longer nests: the classic result, 5. at every index.
    inner = lambda y: 5.  # noqa: E731
    nested = pmapkit.pmap(pmapkit.pmap(inner))
    x = X.reshape(3, 2, 4)
    f = {"jit": lambda x: jax.jit(nested)(x[0]), "vmap": jax.vmap(nested),
         "jit_vmap": jax.jit(jax.vmap(nested))}[wrap]
    want = np.full((2, 4) if wrap == "jit" else (3, 2, 4), 5., np.float32)
    check_same(f(x), want)
