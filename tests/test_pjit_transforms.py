"""JAX transformations of ``pmapkit.pjit`` (grad, vmap, jvp, linearize, jit,
checkpoint), its jaxpr-level behaviour (our ``pmapkit_pjit`` primitive
carries the computation; DCE), pmap/pjit nesting, and the compiled fast path.

Every value is compared against the same computation through ``jax.jit``
with the equivalent ``NamedSharding``s (or plain numpy): values, dtypes,
shapes and output shardings (exact ``NamedSharding`` equality where both
sides give one).

The pjit'd functions are module-level, so their compiled programs are
shared between tests.
"""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend import core as jex_core
from jax.sharding import NamedSharding

import pmapkit

from _checks import sub_jaxprs
from pmapkit import PartitionSpec as P
from pmapkit.core.programs import compiling

PRIM = "pmapkit_pjit"
AXES = ("x", "y")
TOL = 1e-5

# ``pmapkit.pjit`` is the function (re-exported by the package), which shadows
# the submodule of the same name; the module itself is here.
pjit_module = importlib.import_module("pmapkit.pjit._pjit")

MESH = pmapkit.Mesh(np.array(jax.devices()).reshape(2, 4), AXES)
MESH_1x8 = pmapkit.Mesh(np.array(jax.devices()).reshape(1, 8), AXES)
MESH_4x2 = pmapkit.Mesh(np.array(jax.devices()).reshape(4, 2), AXES)


def ns(spec, mesh=MESH):
    return NamedSharding(mesh.jax_mesh, P() if spec is None else spec)


def farange(*shape, start=0):
    return ((np.arange(np.prod(shape)) + start) / 7).reshape(shape).astype(np.float32)


def body(a, b):
    return jnp.sin(a) * b + a


IN_SPECS = (P("x"), P("x", "y"))
OUT_SPEC = P("x", "y")
PF = pmapkit.pjit(body, IN_SPECS, OUT_SPEC)
JF = jax.jit(body, in_shardings=(ns(IN_SPECS[0]), ns(IN_SPECS[1])),
             out_shardings=ns(OUT_SPEC))

X, Y = farange(8, 8), farange(8, 8, start=3)
TX, TY = farange(8, 8, start=-5), farange(8, 8, start=11)


def compare(out, ref, tol=TOL):
    """Same tree, type, shape, dtype, values and sharding."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert out_tree == ref_tree, f"tree mismatch: {out_tree} vs {ref_tree}"
    for o, r in zip(out_leaves, ref_leaves):
        assert isinstance(o, jax.Array), type(o)
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        if isinstance(r, jax.Array):
            if isinstance(o.sharding, NamedSharding) and isinstance(r.sharding, NamedSharding):
                assert o.sharding == r.sharding, (o.sharding, r.sharding)
            else:
                assert o.sharding.is_equivalent_to(r.sharding, o.ndim), (o.sharding, r.sharding)
        np.testing.assert_allclose(np.asarray(o, np.float64), np.asarray(r, np.float64),
                                   rtol=tol, atol=tol)


# ------------------------------------------------------------ jaxpr walking --

def walk(jaxpr):
    """Every equation, recursively through Jaxpr / ClosedJaxpr params."""
    if isinstance(jaxpr, jex_core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            for sub in sub_jaxprs(p):
                yield from walk(sub)


def our_eqns(jaxpr):
    return [e for e in walk(jaxpr) if e.primitive.name == PRIM]


# -------------------------------------------------------------- autodiff --

def test_grad():
    def loss(f):
        return lambda a, b: (f(a, b) ** 2).sum()

    with MESH:
        out = jax.grad(loss(PF), argnums=(0, 1))(X, Y)
    ref = jax.grad(loss(JF), argnums=(0, 1))(X, Y)
    compare(out, ref, tol=1e-4)


def test_value_and_grad_closing_over_a_tracer():
    # The pjit body closes over ``w``, a tracer of the enclosing grad.
    def loss(make):
        def inner(w):
            return make(lambda a: jnp.sin(a * w) + w)(X).sum()
        return inner

    mk_pjit = lambda fun: pmapkit.pjit(fun, P("x"), P("x", "y"))
    mk_jit = lambda fun: jax.jit(fun, in_shardings=ns(P("x")),
                                 out_shardings=ns(P("x", "y")))
    with MESH:
        out = jax.value_and_grad(loss(mk_pjit))(np.float32(1.5))
    ref = jax.value_and_grad(loss(mk_jit))(np.float32(1.5))
    compare(out, ref, tol=1e-3)


def test_jvp():
    with MESH:
        out = jax.jvp(PF, (X, Y), (TX, TY))
    ref = jax.jvp(JF, (X, Y), (TX, TY))
    compare(out, ref)
    assert out[1].sharding == ns(OUT_SPEC)


def test_linearize():
    with MESH:
        primal, f_jvp = jax.linearize(PF, X, Y)
        tangent = f_jvp(TX, TY)
    ref_primal, ref_jvp = jax.linearize(JF, X, Y)
    compare(primal, ref_primal)
    compare(tangent, ref_jvp(TX, TY))


def test_checkpoint_around_pjit():
    def loss(f):
        return lambda a, b: (jax.checkpoint(f)(a, b) * a).sum()

    with MESH:
        out = jax.grad(loss(PF), argnums=(0, 1))(X, Y)
        jaxpr = jax.make_jaxpr(jax.grad(loss(PF)))(X, Y)
    ref = jax.grad(loss(JF), argnums=(0, 1))(X, Y)
    compare(out, ref, tol=1e-4)
    assert our_eqns(jaxpr)


# ------------------------------------------------------------------ vmap --

def test_vmap():
    xs, ys = np.stack([X, X + 1, X * 2]), np.stack([Y, Y - 1, Y / 2])
    with MESH:
        out = jax.vmap(PF)(xs, ys)
        # an unbatched argument and a batch axis that is not leading
        out2 = jax.vmap(PF, in_axes=(None, 2))(X, np.moveaxis(ys, 0, 2))
    compare(out, jax.vmap(JF)(xs, ys))
    compare(out2, jax.vmap(JF, in_axes=(None, 2))(X, np.moveaxis(ys, 0, 2)))
    assert out.sharding == ns(P(None, "x", "y"))


def test_vmap_spmd_axis_name():
    f = pmapkit.pjit(lambda a: jnp.cos(a) * 3, P(None, "y"), P(None, "y"))
    j = jax.jit(lambda a: jnp.cos(a) * 3, in_shardings=ns(P(None, "y")),
                out_shardings=ns(P(None, "y")))
    xs = np.stack([X, X + 1])  # batch of 2 over mesh axis 'x' (size 2)
    with MESH:
        out = jax.vmap(f, spmd_axis_name="x")(xs)
    ref = jax.vmap(j, spmd_axis_name="x")(xs)
    assert out.sharding.spec[0] == "x", out.sharding
    compare(out, ref)
    assert out.sharding == ns(P("x", None, "y"))


# ------------------------------------------------------------------- jit --

def test_jit_of_pjit():
    outer = lambda f: jax.jit(lambda a, b: f(a, b) * 2 + 1)
    jp_ = outer(PF)
    with MESH:
        out = jp_(X, Y)
        again = jp_(X, Y)
    ref = outer(JF)(X, Y)
    compare(out, ref)
    compare(again, ref)


def test_jit_of_grad_of_pjit():
    def loss(f):
        return lambda a, b: jnp.tanh(f(a, b)).sum()

    with MESH:
        out = jax.jit(jax.grad(loss(PF)))(X, Y)
    compare(out, jax.jit(jax.grad(loss(JF)))(X, Y), tol=1e-4)


def test_jit_of_pjit_reads_the_mesh_at_each_call():
    # Regression: the pmapkit mesh is a JAX trace-context state, so a jax.jit
    # around a pjit'd call retraces under a new mesh instead of reusing the old.
    f = pmapkit.pjit(lambda a: a * 2, P("x"), P("x", "y"))
    outer = jax.jit(lambda a: f(a) + 1)
    with MESH:
        o1 = outer(X)
    with MESH_4x2:
        o2 = outer(X)
    assert o1.sharding == ns(P("x", "y"))
    np.testing.assert_allclose(np.asarray(o2), X * 2 + 1)
    assert o2.sharding == ns(P("x", "y"), MESH_4x2)


# ----------------------------------------------------------------- jaxpr --

def test_make_jaxpr_of_grad_and_vmap_binds_our_primitive():
    with MESH:
        grad_jaxpr = jax.make_jaxpr(jax.grad(lambda a, b: PF(a, b).sum()))(X, Y)
        vmap_jaxpr = jax.make_jaxpr(jax.vmap(PF))(np.stack([X, X]), np.stack([Y, Y]))
        jvp_jaxpr = jax.make_jaxpr(lambda a, t: jax.jvp(lambda u: PF(u, Y), (a,), (t,)))(X, TX)
    assert len(our_eqns(grad_jaxpr)) >= 2, grad_jaxpr  # forward + transpose
    (eqn,) = our_eqns(vmap_jaxpr)
    assert eqn.params["in_shardings"] == (ns(P(None, "x")), ns(P(None, "x", "y")))
    assert eqn.params["out_shardings"] == (ns(P(None, "x", "y")),)
    assert our_eqns(jvp_jaxpr)


def test_dce_drops_an_unused_output():
    from pmapkit._jax_private import pe
    f = pmapkit.pjit(lambda a: (a * 2, jnp.sin(a)), P("x"), (P("x"), P("y")))
    outer = jax.jit(lambda a: f(a)[0])
    with MESH:
        out = outer(X)
        traced = outer.trace(X).jaxpr
        text = outer.lower(X).as_text()
    compare(out, jax.jit(lambda a: a * 2, in_shardings=ns(None),
                         out_shardings=ns(P("x")))(X))

    (eqn,) = our_eqns(traced)
    assert len(eqn.outvars) == 2  # before DCE both outputs are there
    jaxpr, _ = pe.dce_jaxpr(traced.jaxpr, [True] * len(traced.jaxpr.outvars))
    (eqn,) = our_eqns(jaxpr)
    assert len(eqn.outvars) == 1
    assert eqn.params["out_shardings"] == (ns(P("x")),)
    body_prims = {e.primitive.name for e in walk(eqn.params["jaxpr"])}
    assert "sin" not in body_prims and "mul" in body_prims
    assert "sine" not in text and "multiply" in text


# ------------------------------------------------------ pmap / pjit nesting --

def test_pmap_inside_pjit():
    # On a 1x8 mesh: the pmap inside maps the 8 rows over the 8 devices.
    inner = pmapkit.pmap(lambda b: b - lax.pmean(b, "i") + jnp.sin(b), axis_name="i")
    f = pmapkit.pjit(lambda a: inner(a) * 2, P("y"), P("y"))
    with MESH_1x8:
        out = f(X)
        rep = pmapkit.pjit(lambda a: inner(a) * 2, None, None)(X)
    want = (X - X.mean(0, keepdims=True) + np.sin(X)) * 2
    ref = jax.jit(lambda a: (a - a.mean(0, keepdims=True) + jnp.sin(a)) * 2,
                  in_shardings=ns(P("y"), MESH_1x8), out_shardings=ns(P("y"), MESH_1x8))(X)
    compare(out, ref, tol=1e-4)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-4)
    assert rep.sharding == ns(None, MESH_1x8)
    np.testing.assert_allclose(np.asarray(rep), want, rtol=1e-4, atol=1e-4)


def test_pjit_inside_pmap():
    # A replicated pjit inside a pmap body runs on each device's slice.
    g = pmapkit.pjit(lambda b: jnp.cos(b) * 3 + 1, None, None)
    f = pmapkit.pmap(lambda b: g(b) - b)
    with MESH:
        out = f(X)
    np.testing.assert_allclose(np.asarray(out), np.cos(X) * 3 + 1 - X, rtol=1e-5, atol=1e-5)
    assert out.shape == X.shape and out.dtype == X.dtype
    assert set(out.sharding.device_set) == set(jax.devices())


def test_partitioned_pjit_inside_pmap_is_refused():
    # Not meaningful: a pmap body is per-device, so its mesh axes are manual
    # and a pjit cannot partition a value over them. It raises (jax's own
    # error about manual mesh axes; pmapkit adds no message of its own).
    g = pmapkit.pjit(lambda b: b * 3, P("y"), P("y"))
    f = pmapkit.pmap(lambda b: g(b))
    with MESH_1x8, pytest.raises(ValueError, match="manual"):
        f(farange(8, 8))


def test_pjit_inside_pmap_needs_a_mesh():
    g = pmapkit.pjit(lambda b: b * 3, None, None)
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh"):
        pmapkit.pmap(lambda b: g(b))(X)


# ------------------------------------------------------------- fast path --

class MissSpy:
    """Counts entries into pjit's Python miss path: ``pjit._prepare``
    (validate and trace) and ``compiling.compile_program`` (compile)."""

    def __init__(self, monkeypatch):
        self.prepare = 0
        self.compile = 0
        real_prepare = pjit_module._prepare
        real_compile = compiling.compile_program

        def prepare(*a, **k):
            self.prepare += 1
            return real_prepare(*a, **k)

        def compile_program(*a, **k):
            self.compile += 1
            return real_compile(*a, **k)

        monkeypatch.setattr(pjit_module, "_prepare", prepare)
        monkeypatch.setattr(compiling, "compile_program", compile_program)


def test_cached_call_skips_the_miss_path(monkeypatch):
    spy = MissSpy(monkeypatch)
    f = pmapkit.pjit(lambda a, b: a * b + 1, (P("x"), None), P("x", "y"))
    with MESH:
        o1 = f(X, Y)
        assert (spy.prepare, spy.compile) == (1, 1)
        o2 = f(X, Y)                       # identical call
        assert (spy.prepare, spy.compile) == (1, 1)
        o3 = f(jnp.asarray(X), o1)         # device arrays, o1 resharded
        assert (spy.prepare, spy.compile) == (1, 1)
        assert f._cache_size == 1
    with MESH_4x2:
        o4 = f(X, Y)                       # another mesh: another entry
    assert (spy.prepare, spy.compile) == (2, 2)
    assert f._cache_size == 2
    with MESH:
        f(X, Y)
    assert (spy.prepare, spy.compile) == (2, 2)
    ref = jax.jit(lambda a, b: a * b + 1, in_shardings=(ns(P("x")), ns(None)),
                  out_shardings=ns(P("x", "y")))
    compare(o1, ref(X, Y))
    compare(o2, ref(X, Y))
    compare(o3, ref(X, np.asarray(o1)))
    assert o4.sharding == ns(P("x", "y"), MESH_4x2)
    np.testing.assert_allclose(np.asarray(o4), X * Y + 1, rtol=TOL)


def test_eager_vjp_with_a_committed_cotangent_placed_otherwise():
    # Shardings as leaves, no mesh context (0.4-era pjit): the equation runs
    # in a jit naming its devices. A cotangent committed with another layout
    # (a replicated weight's) is accepted, as pjit moves its operands (a
    # jax.jit with out_shardings refuses it eagerly).
    f = pmapkit.pjit(body, in_axis_resources=(ns(IN_SPECS[0]), ns(IN_SPECS[1])),
                     out_axis_resources=ns(OUT_SPEC))
    ct = jax.device_put(TX, ns(None))
    out, pullback = jax.vjp(f, X, Y)
    got = pullback(ct)
    _, ref_pullback = jax.vjp(body, X, Y)
    for g, r in zip(got, ref_pullback(TX)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=TOL, atol=TOL)
    assert out.sharding == ns(OUT_SPEC)
