"""Fresh wrappers share what they can (issue 24, items 1 and 3).

``pmapkit.pmap(f, ...)`` / ``pmapkit.pjit(f, ...)`` built anew for the same
``f`` and parameters trace nothing and compile nothing new (a counter in the
traced body counts traces; JAX's backend-compile event counts compiles);
the function dies with its last wrapper; wrappers whose parameters differ
never share; a new function object lowering to the same program shares its
compile, and one that does not gets its own.
"""
import gc
import os
import pickle
import subprocess
import sys
import textwrap
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit.core.keys import wrapper_cache

N = 8
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


class Counts:
    """Traces of the bodies made by ``body`` and backend compiles."""

    def __init__(self):
        self.traces = 0
        self.compiles = 0

    def __call__(self, event, duration, **kwargs):
        if event == _BACKEND_COMPILE:
            self.compiles += 1

    def body(self, fn):
        def traced(*args, **kwargs):
            self.traces += 1
            return fn(*args, **kwargs)
        return traced


@pytest.fixture
def counts():
    c = Counts()
    jax.monitoring.register_event_duration_secs_listener(c)
    yield c
    jax.monitoring.unregister_event_duration_listener(c)


def _x(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 10


def _mesh(devices=None):
    devices = jax.devices()[:N] if devices is None else devices
    return pmapkit.Mesh(np.array(devices), ("x",))


def test_fresh_pmap_wrappers_trace_and_compile_once(counts):
    f = counts.body(lambda v: jnp.sin(v) * lax.psum(v, "i"))
    x = _x(N, 3)
    want = jax.pmap(f, axis_name="i")(x)
    counts.traces = 0
    first = pmapkit.pmap(f, axis_name="i")(x)
    compiles = counts.compiles
    for _ in range(4):
        out = pmapkit.pmap(f, axis_name="i")(x)
        np.testing.assert_allclose(out, want, rtol=1e-6)
        assert out.sharding == first.sharding
    assert counts.traces == 1
    assert counts.compiles == compiles
    # The fresh wrapper's first call is a cached call: no Python miss.
    fresh = pmapkit.pmap(f, axis_name="i")
    fresh(x)
    assert fresh._debug_dispatch_stats()["misses"] == 0
    assert fresh._cache_size == 1


def test_fresh_pjit_wrappers_trace_and_compile_once(counts):
    f = counts.body(lambda v: v * 2 + 1)
    x = _x(N, 4)
    with _mesh():
        first = pmapkit.pjit(f, in_axis_resources=P("x"), out_axis_resources=P("x"))(x)
        compiles = counts.compiles
        for _ in range(4):
            out = pmapkit.pjit(f, in_axis_resources=P("x"), out_axis_resources=P("x"))(x)
            np.testing.assert_array_equal(out, first)
            assert out.sharding == first.sharding
    assert counts.traces == 1
    assert counts.compiles == compiles
    np.testing.assert_array_equal(first, x * 2 + 1)


def _per_device_loss(w, b):
    return jnp.sum(jnp.tanh(b @ w) ** 2)


def test_grad_of_a_pmap_built_inside_traces_and_compiles_once(counts):
    loss = counts.body(_per_device_loss)
    w, b = jnp.asarray(_x(4, 2)), jnp.asarray(_x(N, 3, 4))

    def total(pm):
        return lambda w, b: pm(loss, in_axes=(None, 0))(w, b).sum()

    want = jax.grad(total(jax.pmap))(w, b)
    counts.traces = 0
    grad = jax.grad(total(pmapkit.pmap))
    np.testing.assert_allclose(grad(w, b), want, rtol=1e-5)
    traces, compiles = counts.traces, counts.compiles
    for _ in range(3):
        np.testing.assert_allclose(grad(w, b), want, rtol=1e-5)
    assert traces == 1  # the body, once, for the primal and its derivative
    assert (counts.traces, counts.compiles) == (traces, compiles)


def test_fresh_wrappers_under_jit_trace_the_body_once(counts):
    f = counts.body(lambda v: v + 1)

    @jax.jit
    def outer(x, k):
        return pmapkit.pmap(f)(x) * k

    x = _x(N, 2)
    with pytest.warns(UserWarning, match="includes a pmap"):
        outer(x, 1.0)
    outer(x, 2.0)
    with pytest.warns(UserWarning, match="includes a pmap"):
        jax.jit(lambda x: pmapkit.pmap(f)(x))(x)
    assert counts.traces == 1


def test_a_function_dies_with_its_wrappers():
    def f(v):
        return v + 1

    def g(v):
        return v * 2

    x = _x(N, 2)
    dead_f, dead_g = weakref.ref(f), weakref.ref(g)
    pmapkit.pmap(f)(x)
    pmapkit.pmap(f, axis_name="i")(x)
    with _mesh():
        pmapkit.pjit(g, in_axis_resources=P("x"), out_axis_resources=P("x"))(x)
    jax.grad(lambda v: pmapkit.pmap(f)(v).sum())(x)
    del f, g
    gc.collect()
    assert dead_f() is None
    assert dead_g() is None


def test_bound_methods_share_per_instance_and_die_with_it(counts):
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @counts.body
        def apply(self, v):
            return v * self.scale

    model, other = Model(2.0), Model(3.0)
    x = _x(N, 2)
    for _ in range(3):  # model.apply is a new method object each time
        np.testing.assert_allclose(pmapkit.pmap(model.apply)(x), x * 2)
    np.testing.assert_allclose(pmapkit.pmap(other.apply)(x), x * 3)
    assert counts.traces == 2  # once per instance
    dead = weakref.ref(model)
    del model
    gc.collect()
    assert dead() is None


def test_unweakrefable_and_unhashable_still_work(counts):
    class NoWeak:
        __slots__ = ()

        def __call__(self, v):
            counts.traces += 1
            return v - 1

    f = NoWeak()
    x = _x(N, 2)
    for _ in range(2):
        np.testing.assert_allclose(pmapkit.pmap(f)(x), x - 1)
    assert counts.traces == 2  # nothing shared, nothing wrong
    g = counts.body(lambda v, w: v + w["a"])
    in_axes = [0, {"a": None}]  # lists and dicts: keyed by value and type
    for _ in range(2):
        out = pmapkit.pmap(g, in_axes=in_axes)(x, {"a": np.float32(1)})
        np.testing.assert_allclose(out, x + 1)
    assert counts.traces == 3


# -- different parameters never share an entry ---------------------------------
def _twice_pmap(counts, a, b, args, **common):
    """Trace counts after calling a wrapper with options ``a`` twice (fresh)
    and then one with options ``b`` twice: 1 then 2 when ``a`` and ``b``
    do not share."""
    f = counts.body(common.pop("fun", lambda v: v * 2))
    outs = []
    for options in (a, a, b, b):
        outs.append(pmapkit.pmap(f, **common, **options)(*args))
    return outs


PMAP_OPTIONS = {
    "axis_name": ({"axis_name": "i"}, {"axis_name": "j"}),
    "in_axes": ({"in_axes": 0}, {"in_axes": 1}),
    "out_axes": ({"out_axes": 0}, {"out_axes": 1}),
    "devices": ({"devices": jax.devices()[:N]}, {"devices": jax.devices()[N - 1::-1]}),
    "backend": ({}, {"backend": "cpu"}),
    "axis_size": ({}, {"axis_size": N}),
}


@pytest.mark.parametrize("name", list(PMAP_OPTIONS))
def test_pmap_options_that_differ_do_not_share(counts, name):
    a, b = PMAP_OPTIONS[name]
    x = _x(N, N)
    outs = _twice_pmap(counts, a, b, (x,))
    assert counts.traces == 2
    for out, options in zip(outs, (a, a, b, b)):
        want = jax.pmap(lambda v: v * 2, **options)(x)
        np.testing.assert_allclose(out, want)
        assert out.sharding.device_set == want.sharding.device_set
        assert [s.device for s in out.addressable_shards] == \
               [s.device for s in want.addressable_shards]


def test_static_broadcasted_argnums_differ_do_not_share(counts):
    f = counts.body(lambda v, k: v * k)
    x = _x(N, 2)
    static = pmapkit.pmap(f, static_broadcasted_argnums=1)
    dynamic = pmapkit.pmap(f, in_axes=(0, None))
    np.testing.assert_allclose(static(x, 3), x * 3)
    np.testing.assert_allclose(dynamic(x, 3), x * 3)
    np.testing.assert_allclose(pmapkit.pmap(f, static_broadcasted_argnums=1)(x, 4), x * 4)
    assert counts.traces == 3  # static 3, dynamic, static 4
    with pytest.raises(ValueError, match="static_broadcasted_argnums"):
        pmapkit.pmap(f, static_broadcasted_argnums=1)(x)


def test_donate_argnums_differ_do_not_share(counts):
    f = counts.body(lambda v: v + 1)
    kept, donated = jnp.asarray(_x(N, 4)), jnp.asarray(_x(N, 4))
    kept = jax.device_put(kept, pmapkit.pmap(f)(kept).sharding)
    donated = jax.device_put(donated, kept.sharding)
    pmapkit.pmap(f)(kept)
    pmapkit.pmap(f, donate_argnums=0)(donated)
    pmapkit.pmap(f)(kept)
    assert counts.traces == 2
    assert not kept.is_deleted()
    assert donated.is_deleted()


def test_an_invalid_option_equal_to_a_valid_one_still_raises():
    f = lambda v: v  # noqa: E731
    pmapkit.pmap(f, in_axes=(1,))
    with pytest.raises(TypeError, match="in_axes must be an int"):
        pmapkit.pmap(f, in_axes=(True,))  # True == 1, but not an axis
    pmapkit.pmap(f, axis_size=1)
    with pytest.raises(TypeError, match="axis_size"):
        pmapkit.pmap(f, axis_size=1.0)


PJIT_OPTIONS = {
    "in_axis_resources": ({"in_axis_resources": P("x")}, {"in_axis_resources": None}),
    "out_axis_resources": ({"out_axis_resources": P("x")}, {"out_axis_resources": None}),
    "in_shardings": ({"in_shardings": P("x")}, {"in_shardings": P()}),
    "donate_argnums": ({}, {"donate_argnums": 0}),
}


@pytest.mark.parametrize("name", list(PJIT_OPTIONS))
def test_pjit_options_that_differ_do_not_share(counts, name):
    a, b = PJIT_OPTIONS[name]
    f = counts.body(lambda v: v * 2)
    with _mesh() as mesh:
        outs = []
        for options in (a, a, b, b):
            x = jax.device_put(_x(N, 4), jax.sharding.NamedSharding(mesh, P("x")))
            outs.append((options, pmapkit.pjit(f, **options)(x)))
    assert counts.traces == 2
    for options, out in outs:
        np.testing.assert_allclose(out, _x(N, 4) * 2)
    if name == "out_axis_resources":
        assert [o.sharding.spec for _, o in outs] == [P("x"), P("x"), P(), P()]
    if name == "donate_argnums":
        assert [o.sharding.spec for _, o in outs] == [P("x")] * 4


def test_pjit_meshes_never_share(counts):
    f = counts.body(lambda v: v + 1)
    x = _x(N, 4)
    outs = []
    for devices in (jax.devices()[:4], jax.devices()[4:], jax.devices()[:4]):
        with _mesh(devices):
            outs.append(pmapkit.pjit(f, P("x"), P("x"))(x))
    assert counts.traces == 2
    assert outs[0].sharding.device_set == set(jax.devices()[:4])
    assert outs[1].sharding.device_set == set(jax.devices()[4:])
    for out in outs:
        np.testing.assert_allclose(out, x + 1)


def test_pjit_static_argnums_and_argnames_differ_do_not_share(counts):
    f = counts.body(lambda v, n: v * n)
    x = _x(N, 2)
    with _mesh():
        by_num = pmapkit.pjit(f, static_argnums=1)
        by_name = pmapkit.pjit(f, static_argnames="n")
        np.testing.assert_allclose(by_num(x, 2), x * 2)
        np.testing.assert_allclose(by_name(x, n=2), x * 2)
        np.testing.assert_allclose(pmapkit.pjit(f, static_argnums=1)(x, 2), x * 2)
        np.testing.assert_allclose(pmapkit.pjit(f, static_argnames="n")(x, n=3), x * 3)
        np.testing.assert_allclose(pmapkit.pjit(f)(x, np.float32(2)), x * 2)
    assert counts.traces == 4  # by number, by name 2, by name 3, dynamic


# -- one program, many functions -----------------------------------------------
def test_a_new_function_with_the_same_program_shares_its_compile(counts):
    x = _x(N, 16)
    outs = [pmapkit.pmap(lambda v: lax.psum(v, "i"), "i")(x) for _ in range(3)]
    compiles = counts.compiles
    outs.append(pmapkit.pmap(lambda v: lax.psum(v, "i"), "i")(x))
    assert counts.compiles == compiles
    want = jax.pmap(lambda v: lax.psum(v, "i"), "i")(x)
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("size", [4, 4096])
def test_closures_over_different_constants_never_share(size):
    rng = np.random.default_rng(size)
    x = _x(N, size)
    for _ in range(3):
        c = rng.normal(size=(size,)).astype(np.float32)
        out = pmapkit.pmap(lambda v: v + c)(x)
        np.testing.assert_allclose(out, x + c, rtol=1e-6)
        out = pmapkit.pmap(lambda v: v * jnp.asarray(c))(x)
        np.testing.assert_allclose(out, x * c, rtol=1e-6)


def test_clearing_reaches_every_sharer(counts):
    f = counts.body(lambda v: v - 1)
    x = _x(N, 2)
    a, b = pmapkit.pmap(f), pmapkit.pmap(f)
    a(x)
    assert b._cache_size == 1
    b.clear_cache()
    assert a._cache_size == 0
    np.testing.assert_allclose(a(x), x - 1)
    assert counts.traces == 2
    pmapkit.clear_caches()
    assert a._cache_size == 0 and wrapper_cache.size() == 0
    np.testing.assert_allclose(pmapkit.pmap(f)(x), x - 1)
    jax.clear_caches()
    np.testing.assert_allclose(pmapkit.pmap(f)(x), x - 1)
    assert counts.traces == 4


def test_the_registry_of_functions_stays_bounded_and_reaches_the_live_ones():
    # Wrappers are tracked by weak references without callbacks (cheap to
    # build and to drop per call); dead ones are swept as the list grows.
    from pmapkit.core.keys import caches
    x = _x(N, 2)
    kept = pmapkit.pmap(_scaled)
    np.testing.assert_allclose(kept(x), x * 3)
    for _ in range(1000):
        np.testing.assert_allclose(pmapkit.pmap(_scaled)(x), x * 3)
    gc.collect()
    live = caches._live_functions()
    assert kept in live
    assert len(caches._functions) <= max(64, 2 * len(live)) + 1
    before = caches.per_function_size()
    try:
        pmapkit.set_cache_size(per_function=3)
        assert kept._debug_dispatch_stats()["cache_size_limit"] == 3
    finally:
        pmapkit.set_cache_size(per_function=before)
    assert kept._cache_size == 1
    pmapkit.clear_caches()
    assert kept._cache_size == 0


def _scaled(v):
    return v * 3


class _Holder:
    double = pmapkit.pmap(lambda self, v: v * 2, static_broadcasted_argnums=0)


def test_each_fresh_wrapper_keeps_its_introspection():
    x = _x(N, 2)
    a, b = pmapkit.pmap(_scaled, axis_name="i"), pmapkit.pmap(_scaled, axis_name="i")
    a(x)
    assert a is not b
    assert b.__wrapped__ is _scaled and b.__name__ == "_scaled"
    assert "The cache contains 1 elements" in b._debug_cache_keys()
    clone = pickle.loads(pickle.dumps(b))
    np.testing.assert_allclose(clone(x), x * 3)
    assert clone._cache_size == 1  # shares with a and b
    weakref.ref(b)
    b.note = "own attribute"
    assert not hasattr(a, "note")
    np.testing.assert_allclose(_Holder().double(x), x * 2)
    with _mesh():
        p = pmapkit.pjit(_scaled, P("x"), P("x"))
        np.testing.assert_allclose(pickle.loads(pickle.dumps(p))(x), x * 3)
        assert p.lower(x).compile()(x).shape == x.shape


def test_route_pmap_script_traces_each_function_once(tmp_path):
    script = tmp_path / "inline.py"
    script.write_text(textwrap.dedent("""
        import jax, numpy as np
        from jax import lax
        traces, compiles = [0], [0]
        jax.monitoring.register_event_duration_secs_listener(
            lambda e, d, **k: compiles.__setitem__(0, compiles[0] + (
                e == "/jax/core/compile/backend_compile_duration")))
        def step(x):
            traces[0] += 1
            return x * 0.5 + 1.0
        x = np.ones((8, 4), np.float32)
        for i in range(4):
            x = jax.pmap(step)(x)
            y = jax.pmap(lambda v: lax.psum(v, "i"), "i")(x)
            if i == 0:
                first = compiles[0]
        print(type(jax.pmap(step)).__name__, traces[0], compiles[0] - first,
              float(y.sum()))
    """))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "pmapkit", "run", "--route-pmap",
                           str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kind, traces, compiles, total = proc.stdout.split()
    assert kind == "DispatchFunction"
    assert (traces, compiles) == ("1", "0")
    x = np.ones((8, 4), np.float32)
    for _ in range(4):
        x = x * 0.5 + 1.0
    assert float(total) == pytest.approx(float(x.sum()) * 8)


def test_programs_differing_only_in_pruned_inputs_never_share():
    # Unused inputs are pruned from the module: its text alone is the same.
    x = jnp.asarray(_x(N))
    with _mesh():
        one = pmapkit.pjit(lambda v: v + 1)
        np.testing.assert_allclose(one(x), _x(N) + 1)
        two = pmapkit.pjit(lambda v, unused: v + 1, donate_argnums=1)
        np.testing.assert_allclose(two(x, jnp.zeros(3)), _x(N) + 1)
        again = pmapkit.pjit(lambda v: v + 1)
        np.testing.assert_allclose(again(x), _x(N) + 1)
        dropped = pmapkit.pmap(lambda v, unused: v * 2, in_axes=(0, None))
        np.testing.assert_allclose(dropped(_x(N, 2), np.float32(3)), _x(N, 2) * 2)
        np.testing.assert_allclose(pmapkit.pmap(lambda v: v * 2)(_x(N, 2)), _x(N, 2) * 2)
