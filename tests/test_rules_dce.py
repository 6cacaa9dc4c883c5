"""Jaxpr-level behaviour of ``pmapkit_pmap``: dead-code elimination, and the
structure transformations leave behind (our primitive, with a transformed
body, carries the computation; no shard_map / jax pmap in the traced jaxpr).

Values are still checked against references computed without pmapkit.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

import pmapkit

from _checks import N, check, data, sub_jaxprs

PRIM = "pmapkit_pmap"


# ------------------------------------------------------------ jaxpr walking --

def walk(jaxpr, into_ours=True):
    """Yield (eqn, inside_our_primitive) for every equation, recursively
    through params that are Jaxpr / ClosedJaxpr (or tuples of them)."""
    if isinstance(jaxpr, jex_core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr

    def go(j, inside):
        for eqn in j.eqns:
            yield eqn, inside
            ours = eqn.primitive.name == PRIM
            if ours and not into_ours:
                continue
            for p in eqn.params.values():
                for sub in sub_jaxprs(p):
                    yield from go(sub, inside or ours)

    yield from go(jaxpr, False)


def our_eqns(jaxpr):
    return [e for e, _ in walk(jaxpr) if e.primitive.name == PRIM]


def primitive_names(jaxpr, into_ours=True):
    return {e.primitive.name for e, _ in walk(jaxpr, into_ours)}


def assert_ours_carries_it(jaxpr):
    """Our primitive is there; no shard_map / classic pmap anywhere in the
    traced jaxpr (pmapkit lowers to SPMD only at lowering time)."""
    assert our_eqns(jaxpr), f"no {PRIM} in\n{jaxpr}"
    names = primitive_names(jaxpr)
    for foreign in ("shard_map", "xla_pmap", "pmap"):
        assert foreign not in names, (foreign, sorted(names))


def body_prims(eqn):
    return primitive_names(eqn.params["jaxpr"])


# --------------------------------------------------------------------- DCE --

def _dce(closed):
    # JAX's own DCE pass over the traced jaxpr (what jit does before lowering);
    # it dispatches to pmapkit's rule for the pmap equation nested in the jit.
    from pmapkit._jax_private import pe
    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    return jaxpr


def test_dce_drops_unused_output_and_its_sin():
    f = jax.jit(lambda x: pmapkit.pmap(lambda y: (y * 2, jnp.sin(y)))(x)[0])
    x = data(N, 4, seed=1)
    check(f(x), x * 2)

    traced = f.trace(x).jaxpr
    (eqn,) = our_eqns(traced)
    assert len(eqn.outvars) == 2  # before DCE both outputs are there

    (eqn,) = our_eqns(_dce(traced))
    assert len(eqn.outvars) == 1
    assert len(eqn.params["out_axes"]) == 1
    assert "sin" not in body_prims(eqn)
    assert "mul" in body_prims(eqn)
    assert eqn.params["jaxpr"].out_avals[0].shape == (4,)

    text = f.lower(x).as_text()
    assert "sine" not in text
    assert "multiply" in text


def test_dce_prunes_inputs_only_dead_outputs_needed():
    def body(a, b, c):
        return a * 2 + c, jnp.sin(b), lax.psum(b, "i")

    f = jax.jit(lambda a, b, c: pmapkit.pmap(body, axis_name="i",
                                             in_axes=(0, 0, None),
                                             donate_argnums=1)(a, b, c)[0])
    a, b, c = data(N, 3, seed=2), data(N, 3, seed=3), data(3, seed=4)
    check(f(a, b, c), a * 2 + c)
    (eqn,) = our_eqns(_dce(f.trace(a, b, c).jaxpr))
    assert len(eqn.invars) == 2 and len(eqn.outvars) == 1
    assert eqn.params["in_axes"] == (0, None)
    assert len(eqn.params["donated_invars"]) == 2
    assert not {"sin", "psum"} & body_prims(eqn)
    assert "sine" not in f.lower(a, b, c).as_text()


def test_dce_keeps_collective_feeding_a_live_output():
    f = jax.jit(lambda x: pmapkit.pmap(
        lambda y: (lax.psum(y, "i"), jnp.cos(y), y + 1), axis_name="i")(x)[::2])
    x = data(N, 4, seed=5)
    check(f(x), (np.broadcast_to(x.sum(0), (N, 4)), x + 1))
    (eqn,) = our_eqns(_dce(f.trace(x).jaxpr))
    assert len(eqn.outvars) == 2
    prims = body_prims(eqn)
    assert "psum" in prims and "cos" not in prims


def test_dce_of_grad_drops_unused_primal_work():
    # Only the gradient is used: DCE of the jitted grad removes the known
    # pmap's dead primal output (the loss) path where it is not a residual.
    g = jax.jit(jax.grad(lambda x: jnp.sum(pmapkit.pmap(
        lambda y: jnp.exp(y) * 3.0, axis_name="i")(x))))
    x = data(N, 4, seed=6)
    check(g(x), jax.jit(jax.grad(lambda x: jnp.sum(jax.pmap(
        lambda y: jnp.exp(y) * 3.0, axis_name="i")(x))))(x))
    traced = g.trace(x).jaxpr
    known = lambda j: [e for e in our_eqns(j) if e.params["name"].startswith("known(")]
    (before,) = known(traced)
    (after,) = known(_dce(traced))
    # the primal output (exp(y) * 3) is dead; only the residual exp(y) is left
    assert len(before.outvars) == 2 and len(after.outvars) == 1
    assert "mul" not in body_prims(after) and "exp" in body_prims(after)
    for e in our_eqns(_dce(traced)):
        assert len(e.outvars) == len(e.params["out_axes"])
        assert len(e.invars) == len(e.params["in_axes"]) == len(e.params["donated_invars"])


def test_shard_map_check_is_not_vacuous():
    # The walker does see shard_map: classic jax.pmap on 0.10.2 traces to one.
    x = data(N, 4, seed=14)
    jaxpr = jax.make_jaxpr(jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i"))(x)
    assert "shard_map" in primitive_names(jaxpr)
    assert not our_eqns(jaxpr)
    check(pmapkit.pmap(lambda v: lax.psum(v, "i"), axis_name="i")(x),
          np.broadcast_to(x.sum(0), (N, 4)))


# --------------------------------------------------------- jaxpr structure --

def _f():
    return pmapkit.pmap(lambda v: jnp.sin(v) * lax.psum(v, "i"), axis_name="i")


def _ref():
    return jax.pmap(lambda v: jnp.sin(v) * lax.psum(v, "i"), axis_name="i")


def _names(jaxpr):
    return [e.params["name"] for e in our_eqns(jaxpr)]


def test_structure_of_grad():
    x = data(N, 4, seed=7)
    g = jax.grad(lambda x: jnp.sum(_f()(x) ** 2))
    jaxpr = jax.make_jaxpr(g)(x)
    assert_ours_carries_it(jaxpr)
    names = _names(jaxpr)
    assert any(n.startswith("known(") for n in names), names
    assert any(n.startswith("transpose(") for n in names), names
    for e in our_eqns(jaxpr):
        if e.params["name"].startswith("transpose("):
            assert "psum" in body_prims(e)  # the transposed collective stays inside
    check(jax.jit(g)(x), jax.jit(jax.grad(lambda x: jnp.sum(_ref()(x) ** 2)))(x))


def test_structure_of_jvp():
    x, t = data(N, 4, seed=8), data(N, 4, seed=9)
    fn = lambda x, t: jax.jvp(_f(), (x,), (t,))
    jaxpr = jax.make_jaxpr(fn)(x, t)
    assert_ours_carries_it(jaxpr)
    (eqn,) = our_eqns(jaxpr)
    assert eqn.params["name"].startswith("jvp(")
    assert len(eqn.invars) == 2 and len(eqn.outvars) == 2
    check(jax.jit(fn)(x, t), jax.jit(lambda x, t: jax.jvp(_ref(), (x,), (t,)))(x, t))


def test_structure_of_linearize():
    x, t = data(N, 4, seed=10), data(N, 4, seed=11)

    def fn(x, t):
        y, f_lin = jax.linearize(_f(), x)
        return y, f_lin(t)

    jaxpr = jax.make_jaxpr(fn)(x, t)
    assert_ours_carries_it(jaxpr)
    names = _names(jaxpr)
    assert any(n.startswith("known(jvp(") for n in names), names
    assert any(n.startswith("unknown(jvp(") for n in names), names
    check(jax.jit(fn)(x, t), jax.jit(lambda x, t: jax.jvp(_ref(), (x,), (t,)))(x, t))


def test_structure_of_vmap():
    x = data(3, N, 4, seed=12)
    jaxpr = jax.make_jaxpr(jax.vmap(_f()))(x)
    assert_ours_carries_it(jaxpr)
    (eqn,) = our_eqns(jaxpr)
    assert eqn.params["name"].startswith("vmap(")
    assert eqn.params["jaxpr"].in_avals[0].shape == (3, 4)   # batched body
    assert eqn.outvars[0].aval.shape == (3, N, 4)
    check(jax.jit(jax.vmap(_f()))(x), jax.jit(jax.vmap(_ref()))(x))


def test_structure_nested_inside_a_jit_equation():
    # Under an outer trace the primitive is bound inside a jit equation.
    x = data(N, 4, seed=13)
    jaxpr = jax.make_jaxpr(lambda x: _f()(x) + 1)(x)
    top = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert PRIM not in top and "jit" in top
    (eqn,) = our_eqns(jaxpr)
    assert eqn.params["axis_size"] == N and eqn.params["axis_name"] == "i"
    assert_ours_carries_it(jaxpr)
    check(jax.jit(lambda x: _f()(x) + 1)(x), jax.jit(lambda x: _ref()(x) + 1)(x))
