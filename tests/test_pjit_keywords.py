"""pjit as later classic releases had it: in/out_axis_resources may be
omitted, and the keywords static_argnames, device, backend, keep_unused and
inline. Each case runs beside jax.jit with the same options (NamedShardings
of the same mesh, or none) and compares values and shardings with ``==``.
"""
import importlib
import pickle

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

import pmapkit

pjit_module = importlib.import_module("pmapkit.pjit._pjit")
calls_module = importlib.import_module("pmapkit.core.misses.calls")

AXES = ("x", "y")
DEVICES = np.array(jax.devices()).reshape(2, 4)
MESH = pmapkit.Mesh(DEVICES, AXES)
pytestmark = pytest.mark.filterwarnings(
    "ignore:backend and device argument on jit is deprecated:DeprecationWarning")


def farange(*shape, start=0):
    return (np.arange(np.prod(shape), dtype=np.float32) + start).reshape(shape)


def ns(spec):
    return NamedSharding(MESH, spec)


def same(ours, ref, rtol=0.0):
    """Equal values and equal shardings, leaf by leaf."""
    ours_l, ref_l = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(ref)
    for a, b in zip(ours_l, ref_l):
        assert a.sharding == b.sharding, (a.sharding, b.sharding)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol)


def count_traces(monkeypatch):
    traces = []
    real = calls_module.trace_user_fun
    monkeypatch.setattr(calls_module, "trace_user_fun",
                        lambda *a, **k: traces.append(a[0]) or real(*a, **k))
    return traces


def cosine(a):
    return jnp.cos(a)


def matmul_add(a, b):
    return a @ b + 1


# ------------------------------------------------ omitted shardings ----

@pytest.mark.parametrize("spec", [P(), P("x"), P("y"), P("x", "y"), P(None, "y")])
def test_omitted_both_keeps_committed_input_shardings(spec):
    a = jax.device_put(farange(8, 8), ns(spec))
    with MESH:
        ours = pmapkit.pjit(matmul_add)(a, a)
        ref = jax.jit(matmul_add)(a, a)
    same(ours, ref)
    assert ours.sharding.mesh == MESH


def test_omitted_both_host_values_are_replicated():
    x, y = farange(8, 8), farange(8, 8, start=3)
    with MESH:
        ours = pmapkit.pjit(matmul_add)(x, y)
    ref = jax.jit(matmul_add, in_shardings=ns(P()))(x, y)
    same(ours, ref)
    assert ours.sharding == ns(P())


def test_omitted_both_uncommitted_device_array_is_replicated():
    x = jnp.asarray(farange(8, 8))      # made outside the mesh: uncommitted
    assert not x.committed
    with MESH:
        ours = pmapkit.pjit(lambda a: a * 2)(x)
    ref = jax.jit(lambda a: a * 2, in_shardings=ns(P()))(x)
    same(ours, ref)


def test_omitted_out_takes_the_partitioners_choice():
    x = farange(8, 8)
    f = lambda a: (a * 2, a.sum(0))  # noqa: E731
    with MESH:
        ours = pmapkit.pjit(f, P("x", "y"))(x)
        ours_modern = pmapkit.pjit(f, in_shardings=P("x", "y"))(x)
    ref = jax.jit(f, in_shardings=ns(P("x", "y")))(x)
    same(ours, ref)
    same(ours_modern, ref)


def test_omitted_in_with_given_out():
    a = jax.device_put(farange(8, 8), ns(P("y")))
    with MESH:
        ours = pmapkit.pjit(jnp.sin, out_axis_resources=P("x"))(a, )
    ref = jax.jit(jnp.sin, out_shardings=ns(P("x")))(a)
    same(ours, ref, rtol=1e-6)
    assert ours.sharding == ns(P("x"))


def test_omitted_in_mixed_committed_and_host():
    a = jax.device_put(farange(8, 8), ns(P("x")))
    with MESH:
        ours = pmapkit.pjit(matmul_add)(a, farange(8, 8, start=1))
    ref = jax.jit(matmul_add, in_shardings=(ns(P("x")), ns(P())))(
        a, farange(8, 8, start=1))
    same(ours, ref)


def test_omitted_in_caches_per_input_sharding(monkeypatch):
    # A committed argument's sharding is part of the signature: a call with
    # another sharding compiles again rather than resharding to the first.
    traces = count_traces(monkeypatch)
    f = pmapkit.pjit(lambda a: a + 1)
    x = farange(8, 8)
    with MESH:
        o1 = f(jax.device_put(x, ns(P("x"))))
        o2 = f(jax.device_put(x, ns(P("y"))))
        o3 = f(jax.device_put(x, ns(P("x"))))
        o4 = f(jax.device_put(x, ns(P("y"))))
    assert len(traces) == 2
    assert o1.sharding == o3.sharding == jax.jit(lambda a: a + 1)(
        jax.device_put(x, ns(P("x")))).sharding
    assert o2.sharding == o4.sharding == jax.jit(lambda a: a + 1)(
        jax.device_put(x, ns(P("y")))).sharding
    for o in (o1, o2, o3, o4):
        np.testing.assert_array_equal(np.asarray(o), x + 1)


def test_omitted_without_a_mesh_uses_the_committed_arrays_mesh():
    a = jax.device_put(farange(8, 8), ns(P("x", "y")))
    ours = pmapkit.pjit(lambda v: v * 3)(a)
    ref = jax.jit(lambda v: v * 3)(a)
    same(ours, ref)


def test_omitted_without_a_mesh_or_committed_input_runs_as_jit():
    """0.4-era pjit without a mesh and without specs is jax.jit: the default
    device, SingleDeviceSharding results, the same values."""
    x = farange(8)
    ours = pmapkit.pjit(lambda v: v * 3)(x)
    ref = jax.jit(lambda v: v * 3)(x)
    assert ours.sharding == ref.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    f = pmapkit.pjit(lambda v: v * 3)
    for _ in range(2):   # the miss, then the hit path
        # Uncommitted inputs give uncommitted results, a committed one
        # committed results on its device, as from jax.jit.
        assert f(x).committed is jax.jit(lambda v: v * 3)(x).committed is False
        placed = jax.device_put(x, jax.devices()[2])
        out = f(placed)
        assert out.committed and out.sharding == SingleDeviceSharding(jax.devices()[2])
    np.testing.assert_array_equal(
        jax.grad(lambda v: pmapkit.pjit(lambda u: u * 3)(v).sum())(x), np.full(8, 3.0))


def test_mesh_less_pjit_nested_under_transformations_is_a_nested_jit():
    """Nested in a trace (another pjit, jvp, vmap) a mesh-less pjit places
    nothing of its own: values stay where the enclosing computation puts
    them, as with nested jax.jit (0.4.2's test_vmap_of_jvp_pjit_no_axis_resources)."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("x")))

    def nest(wrap, n):
        if n == 0:
            return lambda v: v * 2.0
        inner = nest(wrap, n - 1)
        return wrap(lambda v: inner(v - 1.0))

    ours, ref = nest(pmapkit.pjit, 3), nest(jax.jit, 3)
    same(ours(x), ref(x))
    run = lambda f: jax.vmap(lambda xs, ts: jax.jvp(f, xs, ts))((x,), (x,))
    for got, want in zip(run(ours), run(ref)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_omitted_in_specs_with_out_specs_naming_axes_still_needs_a_mesh():
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh"):
        pmapkit.pjit(lambda v: v * 3, out_axis_resources=P("x"))(farange(8))


def test_omitted_committed_elsewhere_is_refused():
    other = pmapkit.Mesh(DEVICES[:, :2], AXES)
    a = jax.device_put(farange(8, 8), NamedSharding(other, P("x")))
    with MESH, pytest.raises(ValueError, match=r"argument 'v' \(positional argument 0\) "
                             r"is committed to devices \[0, 1, 4, 5\]"):
        pmapkit.pjit(lambda v: v * 3)(a)


def test_omitted_allows_dynamic_keyword_arguments():
    a = jax.device_put(farange(8, 8), ns(P("x")))
    with MESH:
        ours = pmapkit.pjit(matmul_add)(a, b=farange(8, 8))
        ref = jax.jit(matmul_add)(a, b=jax.device_put(farange(8, 8), ns(P())))
    same(ours, ref)


def test_keywords_refused_when_in_axis_resources_given():
    # The seed's pjit raised NotImplementedError, 0.4 pjit ValueError: both.
    for error in (NotImplementedError, ValueError):
        with MESH, pytest.raises(error, match="pjit does not support kwargs when "
                                              "in_axis_resources is specified"):
            pmapkit.pjit(matmul_add, P(), P())(farange(8, 8), b=farange(8, 8))
    with pytest.raises(ValueError, match="pjit does not support kwargs when "
                                         "in_axis_resources is specified"):
        pmapkit.pjit(lambda x: x, in_axis_resources=None)(x=farange(8))


def test_grad_and_vmap_of_omitted_shardings():
    x = farange(8, 8) / 64
    f_ours, f_ref = pmapkit.pjit(jnp.sin), jax.jit(jnp.sin)
    with MESH:
        g = jax.grad(lambda v: f_ours(v).sum())(x)
        v = jax.vmap(f_ours)(jnp.stack([x, x + 1]))
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(lambda v: f_ref(v).sum())(x)),
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(v), np.sin(np.stack([x, x + 1])), rtol=1e-6)


def test_lower_with_omitted_shardings():
    a = jax.device_put(farange(8, 8), ns(P("x")))
    with MESH:
        lowered = pmapkit.pjit(lambda v: v + 1).lower(a)
    assert "sharding" in lowered.as_text()


# ---------------------------------------------------- static_argnames --

def scaled(x, power, *, scale=1.0):
    return (x ** power) * scale


@pytest.mark.parametrize("call", [
    lambda f, x: f(x, 2, scale=3.0),
    lambda f, x: f(x, power=2, scale=3.0),
])
def test_static_argnames_parity(call):
    x = farange(8)
    ours_f = pmapkit.pjit(scaled, P("x"), P("x"), static_argnames=("power", "scale"))
    # jax.jit refuses keyword arguments with in_shardings: its input is placed.
    ref_f = jax.jit(scaled, out_shardings=ns(P("x")), static_argnames=("power", "scale"))
    with MESH:
        ours = call(ours_f, x)
    ref = call(ref_f, jax.device_put(x, ns(P("x"))))
    same(ours, ref)


def test_static_argnames_one_trace_per_value(monkeypatch):
    traces = count_traces(monkeypatch)
    f = pmapkit.pjit(scaled, P("x"), P("x"), static_argnames="power")
    x = farange(8)
    with MESH:
        outs = [f(x, power=p) for p in (2, 3, 2, 3, 2)]
        positional = f(x, 2)
    assert len(traces) == 3  # power=2, power=3 by keyword; power=2 by position
    for p, o in zip((2, 3, 2, 3, 2), outs):
        np.testing.assert_array_equal(np.asarray(o), x ** p)
    np.testing.assert_array_equal(np.asarray(positional), x ** 2)


def test_static_argnums_also_static_by_keyword():
    f = pmapkit.pjit(scaled, P("x"), P("x"), static_argnums=1)
    with MESH:
        out = f(farange(8), power=3)
    np.testing.assert_array_equal(np.asarray(out), farange(8) ** 3)


def test_static_argnames_errors():
    with pytest.raises(ValueError, match=r"invalid argnames \['nope'\]"):
        pmapkit.pjit(scaled, static_argnames="nope")
    with pytest.raises(TypeError, match="static_argnames must be a string"):
        pmapkit.pjit(scaled, static_argnames=(1,))
    f = pmapkit.pjit(scaled, static_argnames="scale")
    with MESH, pytest.raises(ValueError, match="Non-hashable static arguments"):
        f(farange(8), 2, scale=[1.0])


# ---------------------------------------------------- device / backend --

def test_device_parity():
    device = jax.devices()[3]
    x = jax.device_put(farange(8), jax.devices()[1])   # moved, as jit(device=)
    ours = pmapkit.pjit(lambda a: a * 2 + 1, device=device)(x)
    ref = jax.jit(lambda a: a * 2 + 1, device=device)(x)
    same(ours, ref)
    assert ours.sharding == SingleDeviceSharding(device)


def test_backend_parity():
    ours = pmapkit.pjit(lambda a: a - 1, backend="cpu")(farange(4))
    ref = jax.jit(lambda a: a - 1, backend="cpu")(farange(4))
    same(ours, ref)


def test_device_and_backend_errors():
    d = jax.devices()[0]
    with pytest.raises(ValueError, match="can't specify both a device and a backend"):
        pmapkit.pjit(jnp.sin, device=d, backend="cpu")
    # 0.4 pjit's text, "on jit" included (pjit was jit by then).
    with pytest.raises(ValueError, match="If backend or device is specified on jit, "
                                         "then in_axis_resources should not be specified."):
        pmapkit.pjit(jnp.sin, P(), device=d)
    with pytest.raises(ValueError, match="If backend or device is specified on jit, "
                                         "then in_shardings should not be specified."):
        pmapkit.pjit(jnp.sin, in_shardings=P(), backend="cpu")
    with pytest.raises(ValueError, match="then out_shardings should not be specified"):
        pmapkit.pjit(jnp.sin, out_shardings=P(), backend="cpu")
    with pytest.raises(TypeError, match="pjit device must be a jax.Device"):
        pmapkit.pjit(jnp.sin, device="cpu:0")
    with MESH, pytest.raises(ValueError, match="Mesh context manager should not be used "
                             "with jit when backend or device is also specified as an "
                             "argument to jit.*must not be called under a mesh context"):
        pmapkit.pjit(jnp.sin, device=d)(farange(4))


# ------------------------------------------------ keep_unused / inline --

@pytest.mark.parametrize("keep_unused", [False, True])
def test_keep_unused_parity_on_donation(keep_unused):
    def run(make):
        a = jax.device_put(farange(8), ns(P("x")))
        b = jax.device_put(farange(8), ns(P("x")))
        out = make(lambda u, v: u + 1)(a, b)
        return out, b.is_deleted()

    with MESH:
        ours, ours_deleted = run(lambda f: pmapkit.pjit(
            f, donate_argnums=1, keep_unused=keep_unused))
    ref, ref_deleted = run(lambda f: jax.jit(f, donate_argnums=1, keep_unused=keep_unused))
    same(ours, ref)
    assert ours_deleted == ref_deleted == keep_unused


def _primitive_names(jaxpr):
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names += _primitive_names(sub)
    return names


@pytest.mark.parametrize("inline", [False, True])
def test_inline(inline):
    f = pmapkit.pjit(lambda a: a * 2, P("x"), P("x"), inline=inline)
    x = farange(8)
    with MESH:
        jaxpr = jax.make_jaxpr(lambda a: f(a) + 1)(x)
        out = jax.jit(lambda a: f(a) + 1)(x)
    assert ("pmapkit_pjit" in _primitive_names(jaxpr.jaxpr)) is not inline
    np.testing.assert_array_equal(np.asarray(out), x * 2 + 1)
    with MESH:
        top = f(x)  # at top level inline changes nothing
    assert top.sharding == ns(P("x"))


# ---------------------------------------------------------- pickling --

def test_pickle_keeps_the_new_options():
    f = pmapkit.pjit(scaled, static_argnames="power", keep_unused=True)
    g = pickle.loads(pickle.dumps(f))
    a = jax.device_put(farange(8), ns(P("x")))
    with MESH:
        same(g(a, power=2), f(a, power=2))
    d = pickle.loads(pickle.dumps(pmapkit.pjit(cosine, device=jax.devices()[2])))
    assert d(farange(4)).sharding == SingleDeviceSharding(jax.devices()[2])
