"""Behaviour-parity tests: ``pmapkit.pjit`` must act like classic pjit, which
on jax 0.10 means like ``jax.jit`` with the equivalent ``NamedSharding``s.

Every shared test body runs once per implementation (the ``api`` fixture:
``pjit`` = pmapkit.pjit with PartitionSpecs under ``with mesh:``, ``jit`` =
jax.jit with ``NamedSharding(mesh.jax_mesh, spec)`` trees built from the very
same specs) and once per mesh shape (1x8, 2x4, 4x2 over axes ('x', 'y')).
``check`` pins values, dtypes, shapes, pytree structure, the result type
(``jax.Array``) and the *exact* output sharding ``NamedSharding(jax_mesh,
spec)``; since both implementations must meet the same expected sharding,
pmapkit's output shardings equal jax.jit's.

Tests marked ``pjit_only`` cover classic behaviour jax.jit does not share
(the mesh is read at the call site, resharding committed inputs, thread-local
mesh contexts); they compare against jax.jit references directly.

Arrays are tiny (8x8): compilation dominates the runtime.
"""
import importlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P

# ``pmapkit.mesh`` is the context-manager function (re-exported by the
# package), which shadows the submodule of the same name.
mesh_module = importlib.import_module("pmapkit.core.sharding.mesh")

AXES = ("x", "y")
MESH_SHAPES = [(1, 8), (2, 4), (4, 2)]
JOIN_TIMEOUT = 120

_TOL = {
    np.dtype(np.float32): 1e-5,
    np.dtype(jnp.bfloat16): 2e-2,
}


def make_mesh(shape, devices=None):
    devices = jax.devices() if devices is None else devices
    return pmapkit.Mesh(np.array(devices).reshape(shape), AXES)


def farange(*shape, dtype=np.float32, start=0):
    return (np.arange(np.prod(shape)) + start).reshape(shape).astype(dtype)


def _is_spec(s):
    return s is None or isinstance(s, P)


class Api:
    """One implementation of the classic pjit surface on one mesh."""

    def __init__(self, name, mesh):
        self.name = name
        self.mesh = mesh
        self.jax_mesh = mesh.jax_mesh

    def ns(self, spec):
        return NamedSharding(self.jax_mesh, P() if spec is None else spec)

    def shardings(self, tree):
        # None means "replicated" to pjit but "unspecified" to jax.jit, so
        # every spec leaf becomes an explicit NamedSharding. Containers
        # (lists included) are kept as they are.
        return jax.tree_util.tree_map(self.ns, tree, is_leaf=_is_spec)

    def pjit(self, fun, in_specs, out_specs, static_argnums=(), donate_argnums=()):
        if self.name == "pjit":
            return pmapkit.pjit(fun, in_specs, out_specs, static_argnums,
                                donate_argnums)
        return jax.jit(fun, in_shardings=self.shardings(in_specs),
                       out_shardings=self.shardings(out_specs),
                       static_argnums=static_argnums,
                       donate_argnums=donate_argnums)

    def wsc(self, x, specs):
        if self.name == "pjit":
            return pmapkit.with_sharding_constraint(x, specs)
        return jax.lax.with_sharding_constraint(x, self.shardings(specs))

    def cache_size(self, f):
        return f._cache_size if self.name == "pjit" else f._cache_size()


@pytest.fixture(params=MESH_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def mesh(request):
    return make_mesh(request.param)


@pytest.fixture(params=["pjit", "jit"])
def api(request, mesh):
    return Api(request.param, mesh)


# For classic behaviour jax.jit does not share: pmapkit only.
pjit_only = pytest.mark.parametrize("api", ["pjit"], indirect=True)


def _assert_values(got, want, dtype):
    if jnp.issubdtype(dtype, jnp.inexact):
        tol = _TOL[np.dtype(dtype)]
        np.testing.assert_allclose(np.asarray(got).astype(np.float64),
                                   np.asarray(want).astype(np.float64),
                                   rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def check(api, out, want, specs, dtype=None):
    """``out`` matches ``want`` leaf by leaf (type, shape, dtype, values) and
    leaf k has exactly the sharding ``NamedSharding(jax_mesh, specs[k])``;
    a single spec (or None) applies to every leaf. ``dtype`` overrides the
    expected dtype of every leaf."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert out_tree == want_tree, f"tree mismatch: {out_tree} vs {want_tree}"
    if _is_spec(specs):
        specs = [specs] * len(want_leaves)
    assert len(specs) == len(want_leaves)
    for o, w, s in zip(out_leaves, want_leaves, specs):
        w = np.asarray(w)
        want_dtype = np.dtype(dtype) if dtype is not None else w.dtype
        assert isinstance(o, jax.Array), type(o)
        assert o.shape == w.shape, (o.shape, w.shape)
        assert o.dtype == want_dtype, (o.dtype, want_dtype)
        assert isinstance(o.sharding, NamedSharding), o.sharding
        assert o.sharding == api.ns(s), (o.sharding, api.ns(s))
        _assert_values(o, w, want_dtype)


def jit_ref(jax_mesh, fun, in_specs, out_specs, *args):
    """jax.jit with NamedShardings of ``jax_mesh`` built from the specs."""
    return Api("jit", pmapkit.Mesh(jax_mesh, AXES)).pjit(fun, in_specs, out_specs)(*args)


# ---------------------------------------------------------------- specs --

def test_replicated_spec(api):
    x = farange(8, 8)
    f = api.pjit(lambda a: jnp.sin(a) * 2 + 1, None, None)
    with api.mesh:
        check(api, f(x), np.sin(x) * 2 + 1, None)


@pytest.mark.parametrize("in_spec,out_spec", [
    (P("x"), P("x")),
    (P("x", "y"), P("y", "x")),
    (P(None, "y"), P("x", None)),
    (P(("x", "y")), P(("x", "y"))),
    (P(("y", "x")), None),
    (None, P(None, ("x", "y"))),
], ids=["x-x", "xy-yx", "Ny-xN", "(xy)-(xy)", "(yx)-None", "None-N(xy)"])
def test_partitioned_specs(api, in_spec, out_spec):
    x = farange(8, 8)
    f = api.pjit(lambda a: a @ a.T + a.sum(0)[None], in_spec, out_spec)
    with api.mesh:
        check(api, f(x), x @ x.T + x.sum(0), out_spec)


def test_one_spec_applies_to_every_argument(api):
    a, b, c = farange(8, 8), farange(8, 8, start=3), farange(8, 8, start=-9)
    f = api.pjit(lambda u, v, w: u * v - w, P("x", "y"), P("x", "y"))
    with api.mesh:
        check(api, f(a, b, c), a * b - c, P("x", "y"))


def test_tuple_and_dict_arguments(api):
    a, w, b = farange(8, 8), farange(8, 8, start=1), farange(8, start=2)
    f = api.pjit(lambda u, p: (u @ p["w"] + p["b"][None], {"s": p["b"] * 2}),
                 (P("x"), {"w": P(None, "y"), "b": None}),
                 (P("x", "y"), {"s": None}))
    with api.mesh:
        out = f(a, {"w": w, "b": b})
    check(api, out, (a @ w + b, {"s": b * 2}), [P("x", "y"), None])


def test_list_in_axis_resources_accepted_as_tuple(api):
    a, b = farange(8, 8), farange(8, 8, start=5)
    f = api.pjit(lambda u, v: u - v, [P("x"), None], P("y"))
    with api.mesh:
        check(api, f(a, b), a - b, P("y"))


def test_spec_prefix_covers_a_nested_argument(api):
    # One spec in place of a whole (tuple) argument applies to each leaf.
    a, b, c = farange(8, 8), farange(8, 8, start=1), farange(8, 8, start=2)
    f = api.pjit(lambda u, vw: (u + vw[0], vw[1] * 3),
                 (None, P("x", "y")), (P("y"), None))
    with api.mesh:
        check(api, f(a, (b, c)), (a + b, c * 3), [P("y"), None])


def test_one_out_spec_for_many_outputs(api):
    a = farange(8, 8)
    f = api.pjit(lambda u: {"p": u + 1, "q": (u * 2, u.T)}, P("x"), P(None, "y"))
    with api.mesh:
        check(api, f(a), {"p": a + 1, "q": (a * 2, a.T)}, P(None, "y"))


def test_scalars(api):
    # Python and numpy scalars in, a 0-d reduction and a scaled array out.
    a = farange(8, 8)
    f = api.pjit(lambda u, s, t: ((u * s).sum() + t, u * t), (P("x"), None, None),
                 (None, P("x", "y")))
    with api.mesh:
        out = f(a, 2.5, np.float32(3))
    check(api, out, (np.float32((a * 2.5).sum() + 3), a * 3), [None, P("x", "y")],
          dtype=np.float32)
    assert out[0].ndim == 0
    # A Python scalar stays weakly typed, as under jax.jit.
    g = api.pjit(lambda s, t: (s * 2, t + 1), None, None)
    with api.mesh:
        ws, wt = g(3.0, np.float32(1))
    assert ws.aval.weak_type and not wt.aval.weak_type
    check(api, (ws, wt), (np.float32(6), np.float32(2)), None)


_DTYPE_CASES = {
    "f32": (np.float32, lambda u: jnp.sin(u) * u, lambda u: np.sin(u) * u),
    "bf16": (jnp.bfloat16, lambda u: u * 2 + 1, lambda u: u.astype(np.float32) * 2 + 1),
    "i32": (np.int32, lambda u: u * 3 - (u // 2), lambda u: u * 3 - (u // 2)),
    "bool": (np.bool_, lambda u: jnp.logical_not(u) | u.T, lambda u: np.logical_not(u) | u.T),
}


@pytest.mark.parametrize("case", list(_DTYPE_CASES))
def test_dtypes(api, case):
    dtype, fun, ref = _DTYPE_CASES[case]
    base = farange(8, 8)
    x = (base % 3 == 0) if dtype is np.bool_ else (base / 4).astype(dtype)
    if dtype is np.int32:
        x = base.astype(np.int32)
    f = api.pjit(fun, P("x", "y"), P("y", "x"))
    with api.mesh:
        out = f(x)
    check(api, out, ref(x), P("y", "x"), dtype=dtype)


# ---------------------------------------------------- static / donation --

def test_static_argnums(api):
    x = farange(8, 8)
    f = api.pjit(lambda a, k: a * k + k, P("x"), P("x"), static_argnums=1)
    with api.mesh:
        r2 = f(x, 2)
        r3 = f(x, 3)
        assert api.cache_size(f) == 2  # one entry per static value
        again = f(x, 2)
    check(api, r2, x * 2 + 2, P("x"))
    check(api, r3, x * 3 + 3, P("x"))
    check(api, again, x * 2 + 2, P("x"))
    assert not np.array_equal(np.asarray(r2), np.asarray(r3))
    assert api.cache_size(f) == 2


def test_donate_argnums(api):
    x = farange(8, 8)
    f = api.pjit(lambda a, b: (a + b, b * 2), P("x", "y"), P("x", "y"),
                 donate_argnums=0)
    a = jax.device_put(x, api.ns(P("x", "y")))   # already placed as required
    b = jax.device_put(x, api.ns(P("x", "y")))
    with api.mesh:
        out = f(a, b)
    assert a.is_deleted()
    assert not b.is_deleted()
    check(api, out, (x + x, x * 2), P("x", "y"))


# --------------------------------------------------------------- inputs --

def test_numpy_and_device_inputs_mixed(api):
    x, y = farange(8, 8), farange(8, 8, start=7)
    f = api.pjit(lambda a, b: a * b, (P("x"), P("y")), P("x", "y"))
    # Made outside the mesh: under `with mesh:` (which sets jax.set_mesh)
    # JAX commits new arrays to the mesh, and jax.jit would refuse to move it.
    uncommitted = jnp.asarray(x)
    with api.mesh:
        r1 = f(x, y)                                      # both numpy
        r2 = f(uncommitted, y)                            # uncommitted device array
        r3 = f(x, jax.device_put(y, api.ns(P("y"))))      # already placed
    for r in (r1, r2, r3):
        check(api, r, x * y, P("x", "y"))


def test_output_fed_back_keeps_one_entry(api, monkeypatch):
    # Outputs already sharded as the input spec wants: taken as they are.
    x = farange(8, 8)
    f = api.pjit(lambda a: a + 1, P("x", "y"), P("x", "y"))
    with api.mesh:
        o1 = f(jax.device_put(x, api.ns(P("x", "y"))))
        assert o1.sharding == api.ns(P("x", "y"))
        copies = _spy_on_copies(monkeypatch) if api.name == "pjit" else []
        o2 = f(o1)
        o3 = f(o2)
    assert copies == []  # no resharding / device_put of the fed-back arrays
    assert api.cache_size(f) == 1
    check(api, o3, x + 3, P("x", "y"))
    # the input was not consumed
    check(api, o1, x + 1, P("x", "y"))


def _spy_on_copies(monkeypatch):
    """Record every Python-side placement of an argument: ``jax.device_put``
    (how pmapkit's per-leaf fallback reshards) and the fallback itself,
    ``CompiledProgram.shard_fallback`` (seen only by entries created after
    the spy is installed: a cache entry keeps the bound method)."""
    from pmapkit.core.programs import compiled_program
    seen = []
    real_fallback = compiled_program.CompiledProgram.shard_fallback
    real_put = jax.device_put

    def fallback(self, *a, **k):
        seen.append("shard_fallback")
        return real_fallback(self, *a, **k)

    def put(*a, **k):
        seen.append("device_put")
        return real_put(*a, **k)

    monkeypatch.setattr(compiled_program.CompiledProgram, "shard_fallback", fallback)
    monkeypatch.setattr(jax, "device_put", put)
    return seen


def test_zero_argument_function(api):
    c = farange(8, 8)
    f = api.pjit(lambda: (jnp.asarray(c) * 2, jnp.ones(8)), (), (P("x", "y"), P("y")))
    with api.mesh:
        check(api, f(), (c * 2, np.ones(8, np.float32)), [P("x", "y"), P("y")])


# ----------------------------------------------- with_sharding_constraint --

def test_with_sharding_constraint(api):
    x, y = farange(8, 8), farange(8, 8, start=2)

    def body(a, b):
        h = api.wsc(a @ b, P("y", "x"))
        h2, h3 = api.wsc((h + 1, h * b), (None, P(("x", "y"))))
        return h2 - h3

    f = api.pjit(body, P("x"), P("x"))
    with api.mesh:
        out = f(x, y)
        text = f.lower(x, y).as_text()
    check(api, out, (x @ y + 1) - (x @ y) * y, P("x"))
    assert text.count("sharding_constraint") >= 3, text


# ----------------------------------------------------------------- lower --

def test_lower_as_text_and_compile(api):
    x = farange(8, 8)
    f = api.pjit(lambda a, k: a * k, P("x", "y"), P("y"), static_argnums=1)
    with api.mesh:
        lowered = f.lower(x, 4)
        text = lowered.as_text()
        compiled = lowered.compile()
        direct = f(x, 4)
    assert "sharding" in text
    # Both are jax.stages.Compiled taking the dynamic arguments only.
    assert isinstance(compiled, jax.stages.Compiled)
    out = compiled(x)
    check(api, out, x * 4, P("y"))
    check(api, direct, x * 4, P("y"))


# ----------------------------------------------------- modern spellings --

def test_in_shardings_out_shardings_spelling(api):
    x = farange(8, 8)
    fun = lambda a, b: (a + b, a * b)
    in_sh = (api.ns(P("x")), api.ns(P("y")))
    if api.name == "pjit":
        # Leaves may be NamedShardings or PartitionSpecs in the modern spelling.
        f = pmapkit.pjit(fun, in_shardings=in_sh, out_shardings=(P("x", "y"), None))
    else:
        f = jax.jit(fun, in_shardings=in_sh,
                    out_shardings=api.shardings((P("x", "y"), None)))
    with api.mesh:
        check(api, f(x, x), (x + x, x * x), [P("x", "y"), None])


@pytest.mark.parametrize("api", [
    "jit",
    "pjit",  # regression: out specs once turned a top-level list into a tuple
], indirect=True)
def test_list_output_with_list_out_spec(api):
    x = farange(8, 8)
    f = api.pjit(lambda a, b: [a + b, a - b], (P("x"), None), [P("y"), None])
    with api.mesh:
        check(api, f(x, x), [x + x, x - x], [P("y"), None])


@pytest.mark.parametrize("api", [
    "jit",
    "pjit",  # regression: a list of specs for a list value was once refused
], indirect=True)
def test_with_sharding_constraint_on_a_list(api):
    x = farange(8, 8)
    f = api.pjit(lambda a: sum(api.wsc([a, a * 2], [P("y"), None])), P("x"), P("x"))
    with api.mesh:
        check(api, f(x), x * 3, P("x"))


# ---------------------------------------------- classic pjit, pmapkit only --

@pjit_only
def test_input_sharded_differently_is_resharded(api, monkeypatch):
    # jax.jit raises on a committed input of another sharding; classic pjit
    # repartitioned it silently.
    x = farange(8, 8)
    f = api.pjit(lambda a: a * 2, P("x", "y"), P("x", "y"))
    other = jax.device_put(x, api.ns(P("y", "x")))
    replicated = jax.device_put(x, api.ns(None))
    with api.mesh:
        f(x)  # compile; later calls take the cached entry
        copies = _spy_on_copies(monkeypatch)
        out = f(other)
        again = f(replicated)
    assert "device_put" in copies  # resharded (the spy does see copies)
    ref = jit_ref(api.jax_mesh, lambda a: a * 2, P("x", "y"), P("x", "y"),
                  jax.device_put(x, api.ns(P("x", "y"))))
    assert out.sharding == ref.sharding
    check(api, out, np.asarray(ref), P("x", "y"))
    check(api, again, x * 2, P("x", "y"))
    assert not other.is_deleted()
    assert f._cache_size == 1


@pjit_only
def test_mesh_is_read_at_call_site(api):
    # Decorated outside any mesh; each call places on the mesh around it.
    x = farange(8, 8)
    f = pmapkit.pjit(lambda a: a + 1, P("x"), P("x", "y"))
    other = make_mesh(tuple(reversed(api.mesh.shape.values())),
                      devices=jax.devices()[::-1])
    with api.mesh:
        o1 = f(x)
    with other:
        o2 = f(x)
    with api.mesh:
        o3 = f(x)
    assert o1.sharding == NamedSharding(api.jax_mesh, P("x", "y"))
    assert o2.sharding == NamedSharding(other.jax_mesh, P("x", "y"))
    assert o3.sharding == o1.sharding
    assert f._cache_size == 2
    for o in (o1, o2, o3):
        np.testing.assert_array_equal(np.asarray(o), x + 1)
    ref = jit_ref(other.jax_mesh, lambda a: a + 1, P("x"), P("x", "y"), x)
    assert o2.sharding == ref.sharding


@pjit_only
def test_nested_meshes_restore_the_outer_one(api):
    x = farange(8, 8)
    f = pmapkit.pjit(lambda a: a * 3, P("x"), P("y"))
    inner = make_mesh((8, 1))
    with api.mesh as outer:
        assert mesh_module.current_mesh() is outer
        with pmapkit.mesh(np.array(jax.devices()).reshape(8, 1), AXES):
            o_in = f(x)
            assert mesh_module.current_mesh().jax_mesh == inner.jax_mesh
        assert mesh_module.current_mesh() is outer
        o_out = f(x)
    assert mesh_module.current_mesh() is None
    assert o_in.sharding == NamedSharding(inner.jax_mesh, P("y"))
    assert o_out.sharding == NamedSharding(api.jax_mesh, P("y"))
    np.testing.assert_array_equal(np.asarray(o_in), x * 3)
    np.testing.assert_array_equal(np.asarray(o_out), x * 3)
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh"):
        f(x)


@pjit_only
def test_mesh_context_is_thread_local(api):
    x = farange(8, 8)
    f = pmapkit.pjit(lambda a: a - 1, P("x"), P("x"))
    theirs = make_mesh((8, 1))
    seen = {}

    def no_mesh_worker():
        try:
            f(x)
        except Exception as e:  # noqa: BLE001 (recorded, asserted below)
            seen["error"] = e

    def own_mesh_worker():
        with theirs:
            seen["out"] = f(x)

    with api.mesh:
        for target in (no_mesh_worker, own_mesh_worker):
            t = threading.Thread(target=target)
            t.start()
            t.join(JOIN_TIMEOUT)
            assert not t.is_alive()
        mine = f(x)
    assert isinstance(seen["error"], RuntimeError), seen
    assert "pjit requires a non-empty mesh" in str(seen["error"])
    assert seen["out"].sharding == NamedSharding(theirs.jax_mesh, P("x"))
    assert mine.sharding == NamedSharding(api.jax_mesh, P("x"))
    np.testing.assert_array_equal(np.asarray(seen["out"]), x - 1)
    np.testing.assert_array_equal(np.asarray(mine), x - 1)
