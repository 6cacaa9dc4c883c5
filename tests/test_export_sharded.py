"""Exporting pmapkit.pmap / pmapkit.pjit functions (N-device programs with
their shardings recorded) and calling multi-device artifacts; donation.

Expected values, shapes, dtypes and shardings come from JAX itself
(``jax.pmap``, ``jax.jit`` with shardings, ``jax.shard_map``) or numpy, never
from pmapkit.pmap/pjit: a fault shared by pmapkit's direct call and its
export must not pass as agreement."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export
from jax.sharding import NamedSharding

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit import export as pe

from _export_helpers import N, assert_tree_close, pmapkit_checks, sds, values


def _normalize(x):
    return x / jax.lax.psum(x, "i")


def _all_devices():
    """A mesh over every device: host values run there (jax.export's call
    runs where its inputs are; alone, a host value is on one device)."""
    return pmapkit.Mesh(np.array(jax.devices()), ("i",))


def _pmap_export(fun=_normalize, specs=(sds((N, 3)),), **pmap_kwargs):
    pmapped = pmapkit.pmap(fun, axis_name="i", **pmap_kwargs)
    with pmapkit_checks():
        return pmapped, pe.export(pmapped)(*specs)


def _jax_mesh():
    return jax.sharding.Mesh(np.array(jax.devices()), ("i",))


def _shard_map_normalize():
    """jax's own program for ``_normalize`` over every device, its shardings
    stated: what exporting the pmap must record and compute."""
    mesh = _jax_mesh()
    sharded = NamedSharding(mesh, P("i"))
    return jax.jit(jax.shard_map(_normalize, mesh=mesh, in_specs=P("i"), out_specs=P("i")),
                   in_shardings=sharded, out_shardings=sharded)


def assert_same_placement(got, want):
    """Leaf by leaf: ``got`` is laid out over the devices as JAX's ``want``."""
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert g.sharding.is_equivalent_to(w.sharding, g.ndim), (g.sharding, w.sharding)
        assert [s.device for s in g.addressable_shards] == \
            [s.device for s in w.addressable_shards]


def test_pmap_export_records_the_device_mesh():
    _, exported = _pmap_export()
    assert exported.nr_devices == N
    (s,) = exported.in_shardings
    # As jax.pmap spells its result's sharding: one mesh axis named after the map.
    by_jax = jax.pmap(_normalize, axis_name="i")(values((N, 3)) + 2).sharding
    assert s.mesh.axis_names == by_jax.mesh.axis_names == ("i",)
    assert s.mesh.axis_sizes == tuple(by_jax.mesh.shape.values()) == (N,)
    assert s.spec == exported.out_shardings[0].spec == by_jax.spec == P("i")
    # And as jax.export records the equivalent shard_map program.
    theirs = jax_export.export(_shard_map_normalize())(sds((N, 3)))
    mesh = _jax_mesh()
    assert exported.in_shardings_jax(mesh) == theirs.in_shardings_jax(mesh)
    assert exported.out_shardings_jax(mesh) == theirs.out_shardings_jax(mesh)


@pytest.mark.parametrize("loaded", [False, True])
def test_pmap_export_runs_on_n_devices_at_top_level(loaded):
    _, exported = _pmap_export()
    if loaded:
        exported = pe.deserialize(pe.serialize(exported))
    x = values((N, 3)) + 2
    want = jax.pmap(_normalize, axis_name="i")(x)
    with _all_devices():
        got = exported.call(x)
    assert_tree_close(got, want, tol=1e-6)
    assert len(got.sharding.device_set) == N
    assert_same_placement(got, want)


def test_pmap_export_matches_jax_export_of_the_shard_map_program():
    _, exported = _pmap_export()
    theirs = jax_export.deserialize(jax_export.export(_shard_map_normalize())(
        sds((N, 3))).serialize())
    x = jax.device_put(values((N, 3)) + 2, NamedSharding(_jax_mesh(), P("i")))
    got = pe.deserialize(pe.serialize(exported)).call(x)
    want = theirs.call(x)
    assert_tree_close(got, want, tol=1e-6)
    assert_tree_close(got, np.asarray(x) / np.asarray(x).sum(0), tol=1e-6)
    assert_same_placement(got, want)


def test_pmap_export_with_pytrees_kwargs_and_static():
    def fun(tree, n, *, bias):
        return {"y": tree["a"] * n + bias, "s": jax.lax.psum(tree["b"], "i")}

    pmapped = pmapkit.pmap(fun, axis_name="i", static_broadcasted_argnums=1)
    tree = {"a": values((N, 2)), "b": values((N,), np.int32)}
    bias = values((N, 2), seed=3)
    with pmapkit_checks():
        exported = pe.export(pmapped)({"a": sds((N, 2)), "b": sds((N,), jnp.int32)}, 3,
                                      bias=sds((N, 2)))
    want = jax.pmap(fun, axis_name="i", static_broadcasted_argnums=1)(tree, 3, bias=bias)
    assert exported.in_tree == jax.tree_util.tree_structure((({"a": 0, "b": 0},), {"bias": 0}))
    with _all_devices():
        got = pe.deserialize(pe.serialize(exported)).call(tree, bias=bias)
    assert_tree_close(got, want, tol=1e-6)
    assert_same_placement(got, want)


def test_pmap_export_on_fewer_devices():
    pmapped = pmapkit.pmap(lambda x: x * 2, axis_name="i")
    with pmapkit_checks():
        exported = pe.export(pmapped)(sds((2, 3)))
    assert exported.nr_devices == 2
    x = values((2, 3))
    two = pmapkit.Mesh(np.array(jax.devices()[:2]), ("i",))
    with two:
        got = exported.call(x)
    want = jax.pmap(lambda x: x * 2, axis_name="i", devices=jax.devices()[:2])(x)
    assert_tree_close(got, want)
    assert got.sharding.device_set == set(jax.devices()[:2])
    assert_same_placement(got, want)
    # As jax.export: a host value alone is on one device, not two.
    with pytest.raises(ValueError, match="exported for 2 devices and is called in a "
                                         "context with 1 devices"):
        exported.call(x)


def test_single_device_export_still_one_device():
    exported = pe.deserialize(pe.serialize(pe.export(lambda x: x + 1)(sds((N,)))))
    assert exported.nr_devices == 1
    out = exported.call(np.zeros(N, np.float32))
    assert len(out.sharding.device_set) == 1


def test_pmap_export_grad_through_vjp():
    def loss_body(x):
        return jnp.sum(_normalize(x) ** 2, axis=-1)

    pmapped, exported = _pmap_export(loss_body, (sds((N, 3)),))
    with pmapkit_checks():   # exporting the VJP traces the pmap again
        loaded = pe.deserialize(pe.serialize(exported, vjp_order=1))
    x = values((N, 3)) + 2
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("i",))
    x_sharded = jax.device_put(x, NamedSharding(mesh, P("i")))
    got = jax.jit(jax.grad(lambda x: jnp.sum(loaded.call(x))))(x_sharded)
    want = jax.grad(lambda x: jnp.sum(jax.pmap(loss_body, axis_name="i")(x)))(x)
    assert_tree_close(got, want, tol=1e-4)


def _tanh_matmul(x, w):
    return jnp.tanh(x @ w)


def _pjit_fun():
    return pmapkit.pjit(_tanh_matmul,
                        in_axis_resources=(P("x", None), None),
                        out_axis_resources=P("x", "y"))


def _jitted_tanh_matmul(jax_mesh):
    """``_pjit_fun`` as jax.jit spells it on ``jax_mesh``."""
    return jax.jit(_tanh_matmul,
                   in_shardings=(NamedSharding(jax_mesh, P("x", None)),
                                 NamedSharding(jax_mesh, P())),
                   out_shardings=NamedSharding(jax_mesh, P("x", "y")))


@pytest.mark.parametrize("shape", [(2, 4), (4, 2), (1, 8)])
def test_pjit_export_records_shardings_and_runs(shape):
    f = _pjit_fun()
    mesh = pmapkit.Mesh(np.array(jax.devices()).reshape(shape), ("x", "y"))
    x, w = values((8, 4)), values((4, 8), seed=1)
    with mesh, pmapkit_checks():
        exported = pe.export(f)(sds((8, 4)), sds((4, 8)))
    jitted = _jitted_tanh_matmul(mesh.jax_mesh)
    want = jitted(x, w)
    theirs = jax_export.export(jitted)(sds((8, 4)), sds((4, 8)))
    assert exported.nr_devices == theirs.nr_devices == N
    assert [s.spec for s in exported.in_shardings] == [P("x", None), P()]
    assert exported.out_shardings[0].spec == P("x", "y")
    assert exported.out_shardings[0].mesh.axis_sizes == shape
    assert exported.in_shardings_jax(mesh.jax_mesh) == theirs.in_shardings_jax(mesh.jax_mesh)
    assert exported.out_shardings_jax(mesh.jax_mesh) == theirs.out_shardings_jax(mesh.jax_mesh)
    loaded = pe.deserialize(pe.serialize(exported))
    with mesh:
        got = loaded.call(x, w)
    assert_tree_close(got, want, tol=1e-5)
    assert_same_placement(got, want)
    assert got.sharding.mesh.shape == dict(zip(("x", "y"), shape))


def test_pjit_export_runs_on_the_active_mesh():
    f = _pjit_fun()
    exported_on = pmapkit.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    with exported_on, pmapkit_checks():
        exported = pe.export(f)(sds((8, 4)), sds((4, 8)))
    reversed_mesh = pmapkit.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"))
    x, w = values((8, 4)), values((4, 8), seed=1)
    with reversed_mesh:
        got = exported.call(x, w)
    assert got.sharding.mesh == reversed_mesh.jax_mesh
    assert_tree_close(got, np.tanh(x @ w), tol=1e-5)
    small = pmapkit.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    with small, pytest.raises(ValueError, match="exported for 8 devices and is called "
                                                "in a context with 4 devices"):
        exported.call(x, w)


def test_multi_device_artifact_reshards_committed_inputs():
    _, exported = _pmap_export()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("j",))
    # On the right devices but laid out otherwise: resharded inside the program.
    x = jax.device_put(values((N, 3)) + 2, NamedSharding(mesh, P()))   # replicated
    got = exported.call(x)
    assert_tree_close(got, np.asarray(x) / np.asarray(x).sum(0), tol=1e-6)
    assert len(got.sharding.device_set) == N
    # Committed to one device: the artifact's 8 do not fit there (jax.export).
    one = jax.device_put(values((N, 3)) + 2, jax.devices()[3])
    for error in (ValueError, NotImplementedError):   # both vintages' types
        with pytest.raises(error, match="exported for 8 devices and is called in a "
                                        "context with 1 devices"):
            exported.call(one)


def test_multi_device_artifact_runs_in_the_inputs_device_order():
    # As jax.export: the run mesh's device order is kept (here reversed).
    f = jax.jit(lambda x: jnp.sin(x) * 2,
                in_shardings=NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:2]),
                                                             ("x",)), P("x")))
    exported = pe.deserialize(pe.serialize(pe.export(f)(sds((4, 3)))))
    run_mesh = jax.sharding.Mesh(np.array(jax.devices()[1::-1]), ("x",))
    x = jax.device_put(values((4, 3)), exported.in_shardings_jax(run_mesh)[0])
    got = exported.call(x)
    theirs = jax_export.deserialize(jax_export.export(f)(sds((4, 3))).serialize())
    want = theirs.call(x)
    assert [s.device for s in got.addressable_shards] == \
        [s.device for s in want.addressable_shards] == list(run_mesh.devices)
    assert got.sharding.is_equivalent_to(want.sharding, 2)
    assert_tree_close(got, want, tol=1e-6)


def test_pjit_export_matches_jax_jit_export():
    mesh = pmapkit.Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))
    f = _pjit_fun()
    jm = mesh.jax_mesh
    jitted = _jitted_tanh_matmul(jm)
    with mesh, pmapkit_checks():
        ours = pe.export(f)(sds((8, 4)), sds((4, 8)))
    theirs = jax_export.export(jitted)(sds((8, 4)), sds((4, 8)))
    assert ours.in_shardings_jax(jm) == theirs.in_shardings_jax(jm)
    assert ours.out_shardings_jax(jm) == theirs.out_shardings_jax(jm)
    x, w = values((8, 4)), values((4, 8), seed=1)
    args = [jax.device_put(a, s) for a, s in zip((x, w), theirs.in_shardings_jax(jm))]
    assert_tree_close(ours.call(*args), jax.jit(theirs.call)(*args), tol=1e-6)


def test_foreign_multi_device_artifact_without_shardings():
    # A jax.jit of a pmapkit.pmap, exported by jax.export itself: 8 devices,
    # no recorded shardings; it still runs at top level (replicated inputs).
    pmapped = pmapkit.pmap(lambda x: x + jax.lax.axis_index("i").astype(jnp.float32),
                           axis_name="i")
    with pmapkit_checks():
        jexp = jax_export.export(jax.jit(pmapped))(sds((N, 2)))
    assert jexp.nr_devices == N and jexp.in_shardings_jax(None) == (None,)
    loaded = pe.from_jax(jax_export.deserialize(jexp.serialize()))
    with _all_devices():
        got = loaded.call(np.zeros((N, 2), np.float32))
    assert_tree_close(got, np.repeat(np.arange(N, dtype=np.float32)[:, None], 2, 1))


@pytest.mark.parametrize("kind", ["jit", "pmap"])
def test_donation_round_trip(kind):
    body = lambda x, y: (x * 2 + y, y)  # noqa: E731
    if kind == "jit":
        fun = jax.jit(body, donate_argnums=0)
        specs = (sds((8, 4)), sds((8, 4)))
    else:
        fun = pmapkit.pmap(body, axis_name="i", donate_argnums=0)
        specs = (sds((N, 4)), sds((N, 4)))
    with pmapkit_checks():
        exported = pe.export(fun)(*specs)
    assert "tf.aliasing_output" in exported.mlir_module()
    loaded = pe.deserialize(pe.serialize(exported))
    x_host, y = values((8, 4)), values((8, 4), seed=1)
    place = jnp.asarray
    if kind == "pmap":   # donate inputs already laid out as the program wants
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("i",))
        sharding = exported.in_shardings_jax(mesh)[0]
        place = lambda a: jax.device_put(a, sharding)  # noqa: E731
    x = place(x_host)
    got = loaded.call(x, y)
    assert_tree_close(got, (x_host * 2 + y, y), tol=1e-6)
    assert x.is_deleted()                      # donated at top level, as exported
    # Inside a jit, the enclosing jit decides: no donation.
    x2 = place(x_host)
    jax.block_until_ready(jax.jit(loaded.call)(x2, place(y)))
    assert not x2.is_deleted()


def test_donation_is_found_in_the_module_string_section_as_in_its_whole_bytes():
    # The loader asks only the bytecode's string section whether an input is
    # donated (a module's bulk, its constants, lies elsewhere): its answer is
    # the whole module's, for modules with and without donation and with a
    # large constant; bytes it cannot walk fall back to searching them all.
    from pmapkit.export import _call
    big = np.arange(64 * 1024, dtype=np.float32).reshape(256, 256)
    bodies = [(jax.jit(lambda x, y: (x * 2 + y, y), donate_argnums=0), 2, (0,)),
              (jax.jit(lambda x, y: (x * 2 + y, y), donate_argnums=1), 2, (1,)),
              (jax.jit(lambda x: x @ big), 1, ()),
              (pmapkit.pmap(lambda x: x * 2, axis_name="i", donate_argnums=0), 1, (0,))]
    for fun, n, donated in bodies:
        with pmapkit_checks():
            exported = pe.export(fun)(*[sds((N, 256)) for _ in range(n)])
        module = exported._jax.mlir_module_serialized
        names = _call._string_section(module)
        assert names is not None and len(names) < len(module)
        for attr in _call._DONOR_ATTRS:
            assert (attr in names) == (attr in module)
        assert _call._donated_inputs(exported._jax) == donated
    assert _call._string_section(b"not bytecode") is None
    assert _call._string_section(b"ML\xefR\x0d") is None  # cut short


def test_pjit_export_needs_a_mesh():
    with pytest.raises(RuntimeError, match="pjit requires a non-empty mesh"):
        pe.export(_pjit_fun())(sds((8, 4)), sds((4, 8)))


def test_abstract_mesh_and_several_meshes_run_with_their_shardings_after_a_round_trip():
    # As jax.export: shardings over an AbstractMesh, or over two meshes of one
    # device set, apply at the call (not a mesh mismatch), and a loaded
    # artifact's results keep their recorded sharding (not replicated).
    abstract = jax.sharding.AbstractMesh((2,), ("x",))

    @jax.jit
    def f(a):
        return jax.lax.with_sharding_constraint(a @ a.T, NamedSharding(abstract, P(None, "x")))

    spec = jax.ShapeDtypeStruct((16, 16), np.float32,
                                sharding=NamedSharding(abstract, P("x", None)))
    run = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    a = jax.device_put(values((16, 16)), NamedSharding(run, P("x", None)))
    ours = pe.deserialize(pe.serialize(pe.export(f)(spec)))
    theirs = jax_export.deserialize(jax_export.export(f)(spec).serialize())
    got, want = ours.call(a), theirs.call(a)
    assert_tree_close(got, want, tol=1e-4)
    assert [s.index for s in got.addressable_shards] == \
        [s.index for s in want.addressable_shards] == [(slice(None), slice(0, 8)),
                                                        (slice(None), slice(8, 16))]

    m1 = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(2, 1), ("a", "b"))
    m2 = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2), ("c", "d"))
    g = jax.jit(lambda x, w: x @ w, in_shardings=(NamedSharding(m1, P("a")),
                                                 NamedSharding(m2, P(None, "d"))),
                out_shardings=NamedSharding(m1, P("a")))
    ours = pe.deserialize(pe.serialize(pe.export(g)(sds((4, 6)), sds((6, 4)))))
    x = jax.device_put(values((4, 6)), NamedSharding(m1, P("a")))
    w = jax.device_put(values((6, 4), seed=1), NamedSharding(m2, P(None, "d")))
    got = ours.call(x, w)
    assert_tree_close(got, np.asarray(x) @ np.asarray(w), tol=1e-5)
    assert got.sharding.is_equivalent_to(NamedSharding(m1, P("a")), 2)
