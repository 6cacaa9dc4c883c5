"""JAX's checks on (tests/conftest.py turns them on for the whole suite, as
JAX's own test base does): ``jax_enable_checks`` typechecks every traced
jaxpr with ``core.check_jaxpr``, which must understand pmapkit's equations
(their bodies use collectives over the pmap's own axis); strict rank and
dtype promotion and typed PRNG keys only.

Every case also runs ``check_jaxpr`` explicitly on the jaxpr of the program,
and compares values with jax.pmap / jax.jit where JAX has the same API.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit import _jax_private as jp
from _checks import N, check, data, sub_jaxprs

PMAP, PJIT = "pmapkit_pmap", "pmapkit_pjit"
_PERM = [(i, (i + 1) % N) for i in range(N)]

COLLECTIVES = {
    "psum": lambda v: v - lax.psum(v, "i") / N,
    "pmean": lambda v: lax.pmean(v, "i") * v,
    "pmax_pmin": lambda v: lax.pmax(v, "i") - lax.pmin(v, "i"),
    "all_gather": lambda v: lax.all_gather(v, "i").sum(0) * v,
    "all_gather_tiled": lambda v: lax.all_gather(v, "i", tiled=True)[:4] + v,
    "ppermute": lambda v: lax.ppermute(v, "i", _PERM) * 2,
    "psum_scatter": lambda v: lax.psum_scatter(jnp.outer(jnp.ones(N), v), "i",
                                               scatter_dimension=0) + v,
    "all_to_all": lambda v: lax.all_to_all(jnp.outer(jnp.arange(1.0, N + 1), v),
                                           "i", 0, 0)[0] * v,
    "axis_index": lambda v: v * lax.axis_index("i").astype(v.dtype),
}


def walk(jaxpr):
    """Every equation, recursively through the jaxprs in equation params."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            for sub in sub_jaxprs(p):
                yield from walk(sub)


def _checked(jaxpr):
    """``check_jaxpr`` on a (closed) jaxpr; returns it for further looks."""
    jp.check_jaxpr(jaxpr.jaxpr if hasattr(jaxpr, "consts") else jaxpr)
    return jaxpr


def _names(jaxpr):
    return {e.primitive.name for e in walk(jaxpr)}


def test_the_suite_runs_with_jax_checks_on():
    assert jax.config.jax_enable_checks
    assert jax.config.jax_numpy_rank_promotion == "raise"
    assert jax.config.jax_numpy_dtype_promotion == "strict"
    assert jax.config.jax_legacy_prng_key == "error"


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_collectives_typecheck_and_run(name):
    body = COLLECTIVES[name]
    x = data(N, 4, seed=1)
    ours, ref = pmapkit.pmap(body, axis_name="i"), jax.pmap(body, axis_name="i")
    assert PMAP in _names(_checked(jax.make_jaxpr(ours)(x)))
    check(ours(x), ref(x))
    check(ours(x), ref(x))   # the hit path


def test_nested_pmaps_with_collectives_over_both_axes():
    inner = pmapkit.pmap(lambda v: v * lax.psum(v, "j") + lax.axis_index("i").astype(v.dtype),
                         axis_name="j")
    outer = pmapkit.pmap(lambda v: inner(v) - lax.pmean(v, "i"), axis_name="i")
    x = data(2, 4, 3, seed=2)
    jaxpr = _checked(jax.make_jaxpr(outer)(x))
    assert sum(e.primitive.name == PMAP for e in walk(jaxpr)) == 2
    # (jax.pmap cannot nest on jax 0.10; the reference is written out.)
    want = (x * x.sum(1, keepdims=True) + np.arange(2, dtype=np.float32)[:, None, None]
            - x.mean(0, keepdims=True))
    np.testing.assert_allclose(np.asarray(outer(x)), want, rtol=1e-5, atol=1e-5)


def _loss(pm):
    f = pm(lambda v: jnp.sin(v) * lax.psum(v, "i"), axis_name="i")
    return lambda x: f(x).sum()


TRANSFORMS = {
    "grad": lambda pm, x: jax.grad(_loss(pm))(x),
    "jvp": lambda pm, x: jax.jvp(_loss(pm), (x,), (jnp.ones_like(x),)),
    "vjp": lambda pm, x: jax.vjp(_loss(pm), x)[1](jnp.ones((), x.dtype)),
    "linearize": lambda pm, x: jax.linearize(_loss(pm), x)[1](jnp.ones_like(x)),
    "vmap": lambda pm, x: jax.vmap(pm(lambda v: v / lax.psum(v, "b") + lax.pmean(v, "i"),
                                      axis_name="i"), axis_name="b")(jnp.stack([x, x + 1])),
    "checkpoint": lambda pm, x: jax.grad(jax.checkpoint(_loss(pm)))(x),
    "jit_grad": lambda pm, x: jax.jit(jax.grad(_loss(pm)))(x),
    "hessian": lambda pm, x: jax.hessian(lambda x: _loss(pm)(x).sum())(x[:, :1]),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transformed_pmaps_typecheck_and_match_jax(name):
    x = data(N, 3, seed=3)
    run = TRANSFORMS[name]
    jaxpr = _checked(jax.make_jaxpr(lambda x: run(pmapkit.pmap, x))(x))
    assert PMAP in _names(jaxpr)
    check(run(pmapkit.pmap, x), run(jax.pmap, x), tol=1e-4)


def test_effectful_body_typechecks():
    seen = []
    f = pmapkit.pmap(lambda v: (jax.debug.callback(lambda: seen.append(1)),
                                lax.psum(v, "i"))[1], axis_name="i")
    x = data(N, seed=4)
    _checked(jax.make_jaxpr(f)(x))
    check(f(x), np.broadcast_to(x.sum(), (N,)))
    jax.effects_barrier()
    assert len(seen) == N


# -- pjit ----------------------------------------------------------------------------
DEVS = np.array(jax.devices()[:4]).reshape(2, 2)
MESH = pmapkit.Mesh(DEVS, ("x", "y"))
JAX_MESH = jax.sharding.Mesh(DEVS, ("x", "y"))


def test_pjit_typechecks_with_constraints_and_transforms():
    def body(a):
        b = pmapkit.with_sharding_constraint(jnp.tanh(a) * 2, P("y", "x"))
        return b @ b.T
    f = pmapkit.pjit(body, P("x", "y"), P("x"))
    ref = jax.jit(lambda a: jnp.tanh(a) * 2 @ (jnp.tanh(a) * 2).T)
    a = data(8, 4, seed=5)
    with MESH:
        assert PJIT in _names(_checked(jax.make_jaxpr(f)(a)))
        _checked(jax.make_jaxpr(jax.grad(lambda a: f(a).sum()))(a))
        _checked(jax.make_jaxpr(jax.vmap(f))(jnp.stack([a, a])))
        out = f(a)
        g = jax.grad(lambda a: f(a).sum())(a)
    check(out, ref(a), tol=1e-4)
    check(g, jax.grad(lambda a: ref(a).sum())(a), tol=1e-4)
    assert out.sharding == NamedSharding(JAX_MESH, P("x"))


def test_pmap_inside_pjit_typechecks():
    pm = pmapkit.pmap(lambda v: v - lax.pmean(v, "i"), axis_name="i")
    f = pmapkit.pjit(lambda a: pm(a) * 2, None, None)
    a = data(4, 3, seed=6)
    with pmapkit.Mesh(np.array(jax.devices()[:4]), ("x",)):
        jaxpr = _checked(jax.make_jaxpr(f)(a))
        assert {PMAP, PJIT} <= _names(jaxpr)
        check(f(a), 2 * (a - a.mean(0, keepdims=True)))


# -- the typecheck rules reject malformed equations ---------------------------------
def _our_eqn(jaxpr, name):
    """(the jaxpr directly holding our first equation, its index)."""
    for outer in [jaxpr.jaxpr] + [s for e in walk(jaxpr) for s in _subs(e)]:
        for k, eqn in enumerate(outer.eqns):
            if eqn.primitive.name == name:
                return outer, k
    raise AssertionError(f"no {name} equation")


def _subs(eqn):
    for p in eqn.params.values():
        if isinstance(p, jp.ClosedJaxpr):
            yield p.jaxpr
        elif isinstance(p, jp.Jaxpr):
            yield p


def _tampered(holder, k, **params):
    eqn = holder.eqns[k]
    bad = eqn.replace(params={**eqn.params, **params})
    return holder.replace(eqns=[*holder.eqns[:k], bad, *holder.eqns[k + 1:]])


def _pmap_holder():
    f = pmapkit.pmap(lambda v: lax.psum(v, "i") * v, axis_name="i")
    return _our_eqn(jax.make_jaxpr(f)(data(N, 3)), PMAP)


@pytest.mark.parametrize("params,match", [
    ({"axis_size": 4}, "not mapped with size 4"),
    ({"in_axes": (0, 0)}, "param in_axes has 2 entries for 1 operands"),
    ({"in_axes": (None,)}, "does not match the body's input type"),
    ({"in_axes": (1,)}, "not mapped with size"),
    ({"out_axes": (3,)}, "out_axes 3 is out of range"),
    ({"donated_invars": ()}, "param donated_invars has 0 entries"),
])
def test_pmap_typecheck_rejects(params, match):
    holder, k = _pmap_holder()
    jp.check_jaxpr(holder)   # as traced: fine
    with pytest.raises(jp.JaxprTypeError, match=match):
        jp.check_jaxpr(_tampered(holder, k, **params))


def test_pmap_typecheck_checks_the_body_with_its_axis_bound_only():
    # The body's collective names the pmap's axis; renaming the axis leaves
    # the collective unbound, which the check reports (a NameError from JAX).
    holder, k = _pmap_holder()
    with pytest.raises(NameError, match="unbound axis name: i"):
        jp.check_jaxpr(_tampered(holder, k, axis_name="other"))


def test_pjit_typecheck_rejects():
    f = pmapkit.pjit(lambda a: a * 2, P("x"), P("x"))
    with MESH:
        holder, k = _our_eqn(jax.make_jaxpr(f)(data(8, 2)), PJIT)
    jp.check_jaxpr(holder)
    eqn = holder.eqns[k]
    with pytest.raises(jp.JaxprTypeError, match="in_shardings has 2 entries"):
        jp.check_jaxpr(_tampered(holder, k, in_shardings=eqn.params["in_shardings"] * 2))
    other_body = jax.make_jaxpr(lambda a: a * 2)(jnp.ones((8, 2), jnp.int32))
    with pytest.raises(jp.JaxprTypeError, match="does not match the body's input type"):
        jp.check_jaxpr(_tampered(holder, k, jaxpr=other_body))


# -- strict promotion and typed keys: errors as JAX's, opt-outs work ------------------
@pytest.mark.parametrize("impl", [jax.pmap, pmapkit.pmap], ids=["jax", "pmapkit"])
def test_rank_promotion_raises_like_jax_and_opts_out(impl):
    f = impl(lambda v, w: v + w, in_axes=(0, None))
    x, w = data(N, 2, 3), data(3)
    with pytest.raises(ValueError, match="rank_promotion"):
        f(x, w)
    with jax.numpy_rank_promotion("allow"):
        check(f(x, w), x + w)


@pytest.mark.parametrize("impl", [jax.pmap, pmapkit.pmap], ids=["jax", "pmapkit"])
def test_dtype_promotion_raises_like_jax_and_opts_out(impl):
    f = impl(lambda v, i: v * i)
    x, i = data(N, 2), np.arange(2 * N, dtype=np.int32).reshape(N, 2)
    with pytest.raises(jax.dtypes.TypePromotionError):
        f(x, i)
    with jax.numpy_dtype_promotion("standard"):
        check(f(x, i), x * i.astype(np.float32))


@pytest.mark.parametrize("impl", [jax.pmap, pmapkit.pmap], ids=["jax", "pmapkit"])
def test_legacy_uint32_keys_refused_inside_the_body(impl):
    f = impl(lambda s: jax.random.uniform(jax.random.PRNGKey(0), ()) + s)
    with pytest.raises(Exception, match="legacy"):
        f(jnp.zeros(N))
