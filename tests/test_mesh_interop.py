"""pmapkit.Mesh is a jax.sharding.Mesh, and ``with mesh:`` is JAX's mesh too.

Every case runs the same thing through JAX's own mesh and through pmapkit's
and compares values and shardings with ``==``: a sharding built on either
mesh object is the same sharding, so arrays move between pmapkit.pjit and
jax.jit without copies.
"""
import copy
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.pjit import maps
from pmapkit.core.sharding.mesh import current_mesh

AXES = ("x", "y")
DEVICES = np.array(jax.devices()).reshape(2, 4)
JOIN_TIMEOUT = 60


def farange(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


@pytest.fixture
def meshes():
    """``(pmapkit mesh, jax mesh)`` over the same devices and axes."""
    return pmapkit.Mesh(DEVICES, AXES), jax.sharding.Mesh(DEVICES, AXES)


# ------------------------------------------------------------ the type --

def test_is_a_jax_mesh_equal_to_the_plain_one(meshes):
    mine, theirs = meshes
    assert isinstance(mine, jax.sharding.Mesh)
    assert mine == theirs and theirs == mine
    assert hash(mine) == hash(theirs)
    assert not (mine != theirs)
    other = jax.sharding.Mesh(DEVICES.reshape(4, 2), AXES)
    assert mine != other and other != mine
    assert mine.shape == theirs.shape and mine.axis_names == AXES
    assert mine.size == 8 and not mine.empty
    assert mine.devices.tolist() == DEVICES.tolist()
    assert mine.abstract_mesh == theirs.abstract_mesh


def test_interned_like_jax_meshes():
    assert pmapkit.Mesh(DEVICES, AXES) is pmapkit.Mesh(DEVICES, AXES)
    assert pmapkit.Mesh(DEVICES, "x y".split()) is pmapkit.Mesh(DEVICES, AXES)
    mine = pmapkit.Mesh(DEVICES, AXES)
    assert copy.deepcopy(mine) is mine and copy.copy(mine) is mine


def test_adopts_a_jax_mesh_and_jax_mesh_attribute(meshes):
    mine, theirs = meshes
    assert pmapkit.Mesh(theirs) is mine
    assert pmapkit.Mesh(theirs, AXES) is mine
    assert pmapkit.Mesh(mine) is mine
    assert mine.jax_mesh is mine  # kept for code written for the wrapper
    with pytest.raises(ValueError, match="omit axis_names"):
        pmapkit.Mesh(theirs, ("a", "b"))


def test_is_immutable(meshes):
    mine, _ = meshes
    with pytest.raises(AttributeError):
        mine.axis_names = ("p", "q")


@pytest.mark.parametrize("spec", [P(), P("x"), P("y"), P("x", "y"), P(("x", "y"))])
def test_named_sharding_equal_across_mesh_objects(meshes, spec):
    mine, theirs = meshes
    a, b = NamedSharding(mine, spec), NamedSharding(theirs, spec)
    assert a == b and b == a and hash(a) == hash(b)
    assert {a: 1}[b] == 1


@pytest.mark.parametrize("spec", [P("x"), P("x", "y"), P(None, "y")])
def test_device_put_parity(meshes, spec):
    mine, theirs = meshes
    x = farange(8, 8)
    ours = jax.device_put(x, NamedSharding(mine, spec))
    ref = jax.device_put(x, NamedSharding(theirs, spec))
    assert ours.sharding == ref.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    assert [s.index for s in ours.addressable_shards] == \
        [s.index for s in ref.addressable_shards]


def test_jax_jit_with_pmapkit_mesh_shardings(meshes):
    mine, theirs = meshes
    x = farange(8, 8)
    f = lambda a: jnp.sin(a) @ a  # noqa: E731
    ours = jax.jit(f, in_shardings=NamedSharding(mine, P("x")),
                   out_shardings=NamedSharding(mine, P(None, "y")))(x)
    ref = jax.jit(f, in_shardings=NamedSharding(theirs, P("x")),
                  out_shardings=NamedSharding(theirs, P(None, "y")))(x)
    assert ours.sharding == ref.sharding == NamedSharding(theirs, P(None, "y"))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5)


def test_shard_map_with_pmapkit_mesh(meshes):
    mine, theirs = meshes
    x = farange(8, 8)

    def run(m):
        return jax.shard_map(lambda b: jax.lax.psum(b, "x"), mesh=m,
                             in_specs=P("x", "y"), out_specs=P(None, "y"))(x)

    ours, ref = run(mine), run(theirs)
    assert ours.sharding == ref.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


def test_pjit_output_feeds_jax_jit_without_a_copy(meshes, monkeypatch):
    mine, theirs = meshes
    x = farange(8, 8)
    with mine:
        out = pmapkit.pjit(lambda a: a + 1, P("x"), P("x", "y"))(x)
    g = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(theirs, P("x", "y")),
                out_shardings=NamedSharding(theirs, P("x", "y")))
    puts = []
    real_put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.append(a) or real_put(*a, **k))
    res = g(out)
    assert puts == []
    assert out.sharding == NamedSharding(theirs, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(res), (x + 1) * 2)


# ------------------------------------------------------ with mesh: ----

def test_with_mesh_sets_jax_current_mesh(meshes):
    mine, theirs = meshes
    assert jax.sharding.get_abstract_mesh().empty
    with mine as entered:
        assert entered is mine
        assert jax.sharding.get_mesh() == theirs
        assert jax.sharding.get_abstract_mesh() == theirs.abstract_mesh
        assert current_mesh() is mine
    assert jax.sharding.get_abstract_mesh().empty
    assert jax.sharding.get_mesh().empty
    assert current_mesh() is None


@pytest.mark.parametrize("spec", [P("x"), P("x", "y"), P(None, "y")])
def test_jax_with_sharding_constraint_sees_the_mesh(meshes, spec):
    mine, theirs = meshes
    x = farange(8, 8)
    body = lambda a: jax.lax.with_sharding_constraint(a * 2, spec) + 1  # noqa: E731
    with mine:
        ours = jax.jit(body)(x)
    with jax.set_mesh(theirs):
        ref = jax.jit(body)(x)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    assert ours.sharding == ref.sharding


def test_jax_jit_partition_spec_shardings_see_the_mesh(meshes):
    mine, theirs = meshes
    x = farange(8, 8)
    f = lambda a: a.T + 1  # noqa: E731
    with mine:
        ours = jax.jit(f, in_shardings=P("x"), out_shardings=P("y"))(x)
    with jax.set_mesh(theirs):
        ref = jax.jit(f, in_shardings=P("x"), out_shardings=P("y"))(x)
    assert ours.sharding == ref.sharding == NamedSharding(theirs, P("y"))
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


def test_shard_map_without_a_mesh_argument_sees_the_mesh(meshes):
    mine, theirs = meshes
    x = farange(8, 8)
    body = jax.shard_map(lambda b: jax.lax.psum(b, "y"), in_specs=P("x", "y"),
                         out_specs=P("x"))
    with mine:
        ours = jax.jit(body)(x)
    with jax.set_mesh(theirs):
        ref = jax.jit(body)(x)
    assert ours.sharding == ref.sharding
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))


def test_jax_with_sharding_constraint_inside_pjit(meshes):
    mine, theirs = meshes
    x = farange(8, 8)
    body = lambda a: jax.lax.with_sharding_constraint(jnp.cos(a), P("y")) * 3  # noqa: E731
    with mine:
        ours = pmapkit.pjit(body, P("x"), P("x", "y"))(x)
    ref = jax.jit(body, in_shardings=NamedSharding(theirs, P("x")),
                  out_shardings=NamedSharding(theirs, P("x", "y")))
    with jax.set_mesh(theirs):
        ref = ref(x)
    assert ours.sharding == ref.sharding
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-6)


def test_nesting_restores_both_contexts(meshes):
    mine, theirs = meshes
    inner = pmapkit.Mesh(DEVICES.reshape(8, 1), AXES)
    f = pmapkit.pjit(lambda a: a - 1, P("x"), P("x"))
    x = farange(8, 8)
    with mine:
        with inner:
            assert jax.sharding.get_mesh() == inner
            o_in = f(x)
        assert jax.sharding.get_mesh() == theirs
        assert current_mesh() is mine
        o_out = f(x)
    assert o_in.sharding == NamedSharding(inner, P("x"))
    assert o_out.sharding == NamedSharding(theirs, P("x"))


def test_mesh_context_is_thread_local(meshes):
    mine, _ = meshes
    seen = {}

    def worker():
        seen["abstract_empty"] = jax.sharding.get_abstract_mesh().empty
        seen["current"] = current_mesh()
        seen["env_empty"] = maps.thread_resources.env.physical_mesh.empty

    with mine:
        t = threading.Thread(target=worker)
        t.start()
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive()
    assert seen == {"abstract_empty": True, "current": None, "env_empty": True}


def test_exception_inside_restores_the_context(meshes):
    mine, _ = meshes
    with pytest.raises(ZeroDivisionError):
        with mine:
            1 / 0  # noqa: B018
    assert current_mesh() is None
    assert jax.sharding.get_abstract_mesh().empty


# ------------------------------------------ pjit reads JAX's own mesh --

def test_pjit_under_jax_set_mesh(meshes):
    mine, theirs = meshes
    x = farange(8, 8)
    f = pmapkit.pjit(lambda a: a * a, P("x"), P("y"))
    with jax.set_mesh(theirs):
        out = f(x)
    with mine:
        again = f(x)
    assert out.sharding == again.sharding == NamedSharding(theirs, P("y"))
    np.testing.assert_array_equal(np.asarray(out), x * x)


def test_pjit_under_jax_deprecated_with_mesh(meshes):
    _, theirs = meshes
    x = farange(8, 8)
    f = pmapkit.pjit(lambda a: a + 2, P("x"), P("x", "y"))
    with pytest.warns(DeprecationWarning):
        with theirs:
            out = f(x)
            assert maps.thread_resources.env.physical_mesh == theirs
    assert out.sharding == NamedSharding(theirs, P("x", "y"))
    np.testing.assert_array_equal(np.asarray(out), x + 2)


def test_pjit_cache_keys_on_jax_set_mesh_devices():
    # Two meshes with equal abstract meshes (same shape and names) but other
    # devices: each call must run on its own mesh's devices.
    a = jax.sharding.Mesh(DEVICES, AXES)
    b = jax.sharding.Mesh(DEVICES[::-1, ::-1], AXES)
    assert a.abstract_mesh == b.abstract_mesh
    f = pmapkit.pjit(lambda v: v + 1, P("x"), P("x", "y"))
    x = farange(8, 8)
    with jax.set_mesh(a):
        oa = f(x)
    with jax.set_mesh(b):
        ob = f(x)
    with jax.set_mesh(a):
        oa2 = f(x)
    assert oa.sharding == oa2.sharding == NamedSharding(a, P("x", "y"))
    assert ob.sharding == NamedSharding(b, P("x", "y"))
    for o in (oa, ob, oa2):
        np.testing.assert_array_equal(np.asarray(o), x + 1)


def test_grad_of_pjit_under_with_mesh(meshes):
    # Under jax.set_mesh JAX commits the arrays it makes; grad of a pjit'd
    # function there must still move its operands (classic semantics).
    mine, theirs = meshes
    x = farange(8, 8) / 64
    loss = lambda f: (lambda w: f(x * w).sum())  # noqa: E731
    with mine:
        ours = jax.grad(loss(pmapkit.pjit(jnp.sin, P("x"), P("x", "y"))))(np.float32(1.5))
    ref = jax.grad(loss(jax.jit(jnp.sin, in_shardings=NamedSharding(theirs, P("x")),
                                out_shardings=NamedSharding(theirs, P("x", "y")))))(
        np.float32(1.5))
    np.testing.assert_allclose(float(ours), float(ref), rtol=1e-5)


# ------------------------------------------------------------- maps ----

def test_maps_module_classic_surface():
    assert maps.Mesh is pmapkit.Mesh
    assert maps.thread_resources.env.physical_mesh.empty
    with maps.mesh(DEVICES, AXES) as m:
        env = maps.thread_resources.env
        assert env.physical_mesh is m
        assert env.shape == {"x": 2, "y": 4}
        assert env.physical_resource_axes == {"x", "y"}
        out = pmapkit.pjit(lambda a: a * 4, P("x"), P("y"))(farange(8))
    assert maps.thread_resources.env.physical_mesh.empty
    assert out.sharding == NamedSharding(jax.sharding.Mesh(DEVICES, AXES), P("y"))
    np.testing.assert_array_equal(np.asarray(out), farange(8) * 4)


def test_maps_env_follows_jax_set_mesh(meshes):
    _, theirs = meshes
    with jax.set_mesh(theirs):
        assert maps.thread_resources.env.physical_mesh == theirs
        assert "'x': 2" in repr(maps.thread_resources.env)
