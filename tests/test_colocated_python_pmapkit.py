"""colocated_python: pmapkit's checks of the seed semantics that JAX's CPU
fallback does not make (it runs whatever comes back), its argument checks,
lifetimes, and the IFRT path's host-side pieces run in-process."""
import gc
import threading
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import _colocated_helpers as h
from _colocated_helpers import count_specializations
from pmapkit.colocated_python import (
    colocated_cpu_devices, colocated_python, colocated_python_class)
from pmapkit.colocated_python import execution, function, objects, serialization


def on(i, value):
    return jax.device_put(value, jax.devices()[i])


def spec_of(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)


def test_later_result_must_match_discovered_specs():
    h.CALLS.clear()
    f = colocated_python(h.shape_changes)
    x = on(0, jnp.arange(4.0))
    assert f(x).shape == (4,)
    with pytest.raises(ValueError, match=r"returned output 0 as .*\(1,\).*output spec is"):
        f(x)


def test_result_must_match_out_specs_fn():
    x = on(0, jnp.arange(4.0))
    f = colocated_python(h.add_one).specialize(
        out_specs_fn=lambda s: jax.ShapeDtypeStruct((5,), s.dtype, sharding=s.sharding))
    with pytest.raises(ValueError, match="output spec is"):
        f(x)
    g = colocated_python(h.add_one).specialize(
        out_specs_fn=lambda s: (s, s))
    with pytest.raises(ValueError, match="structured as"):
        g(x)


def test_equivalent_output_sharding_is_reported_as_declared():
    x = on(2, jnp.arange(4.0))
    declared = NamedSharding(Mesh(np.array([jax.devices()[2]]), ("x",)), P())
    f = colocated_python(h.identity).specialize(
        out_specs_fn=lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=declared))
    y = f(x)
    assert y.sharding == declared
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


def test_call_must_match_in_specs():
    x = on(0, jnp.arange(4.0))
    f = colocated_python(h.add_one).specialize(in_specs=((spec_of(x),), {}))
    with pytest.raises(ValueError, match="was specialized with in_specs"):
        f(on(0, jnp.arange(5.0)))


def test_arguments_must_be_on_the_specialized_devices():
    # (jax's CPU fallback runs such a call anyway, on the arguments' devices)
    f = colocated_python(h.add_one).specialize(devices=[jax.devices()[1]])
    with pytest.raises(ValueError, match=r"specialized with devices \[CpuDevice\(id=1\)\], "
                                         r"but its arguments are on \[CpuDevice\(id=0\)\]"):
        f(on(0, jnp.ones(2)))
    # some arguments on them, one partly elsewhere: that one is named
    g = colocated_python(h.swap_pair).specialize(devices=jax.devices()[:2])
    mesh = jax.sharding.Mesh(np.array(jax.devices()[1:3]), ("x",))
    elsewhere = jax.device_put(jnp.ones(2), jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("x")))
    with pytest.raises(ValueError, match=r"but its arguments are on "
                                         r"\[CpuDevice\(id=1\), CpuDevice\(id=2\)\]"):
        g(on(0, jnp.ones(2)), elsewhere)


def test_first_result_must_live_on_the_function_devices():
    f = colocated_python(h.ones_on_device1).specialize(devices=[jax.devices()[0]])
    with pytest.raises(ValueError, match="outside its devices"):
        f()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"devices": jax.devices()[0]}, TypeError, "devices must be a sequence of jax.Device"),
    ({"devices": []}, ValueError, "devices must not be empty"),
    ({"devices": [0, 1]}, TypeError, "holds int"),
    ({"in_specs": ((np.ones(3),), {})}, TypeError, "in_specs must be a pytree of jax.ShapeDtypeStruct"),
    ({"out_specs_fn": 3}, TypeError, "out_specs_fn must be callable"),
])
def test_specialize_argument_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        colocated_python(h.identity).specialize(**kwargs)


def test_constructor_argument_errors():
    with pytest.raises(TypeError, match="expects a callable"):
        colocated_python(3)
    with pytest.raises(TypeError, match="expects a class"):
        colocated_python_class(h.identity)
    with pytest.raises(TypeError, match="sequence of jax.Device or a jax.sharding.Mesh"):
        colocated_cpu_devices(jax.devices()[0])
    with pytest.raises(TypeError, match="holds str"):
        colocated_cpu_devices(["cpu:0"])


def test_traced_arguments_are_refused():
    f = colocated_python(h.identity)
    with pytest.raises(TypeError, match="outside JAX transformations"):
        jax.jit(f)(on(0, jnp.ones(2)))


def test_fast_map_keeps_one_key_per_specialization():
    f = colocated_python(h.identity)
    mesh_a = Mesh(np.array(jax.devices()[:8]), ("x",))
    mesh_b = Mesh(np.array(jax.devices()[:8]), ("x",))
    xs = [jax.device_put(jnp.arange(8.0), NamedSharding(m, P("x")))
          for m in (mesh_a, mesh_b, mesh_a)]
    for x in xs:
        f(x)
    assert f._cache_size == 1 and len(f._cache.fast) == 1
    entry, = f._cache.fast.values()
    assert entry.fast_key[3] == id(xs[2].sharding)
    jax.clear_caches()
    assert f._cache_size == 0 and f._cache.fast == {}


def test_dropped_function_frees_its_specializations():
    f = colocated_python(h.add_one)
    f(on(0, jnp.ones(2)))
    cache = weakref.ref(f._cache)
    del f
    gc.collect()
    assert cache() is None


def test_usable_as_a_method():
    class Holder:
        add = colocated_python(h.pytree_fun)

    x = on(0, jnp.ones(2))
    with pytest.raises(ValueError, match="Holder"):  # self is bound, like a function
        Holder().add((x, x), scale=x)
    assert Holder.add.__name__ == "pytree_fun"


def test_constructor_calling_its_own_method_does_not_hang():
    objects.OBJECTS.release(12345)
    calls = []

    def make():
        calls.append(1)
        return objects.OBJECTS.get_or_create(12345, make)

    with pytest.raises(RuntimeError, match="its own constructor"):
        objects.OBJECTS.get_or_create(12345, make)
    with pytest.raises(RuntimeError, match="its own constructor"):
        objects.OBJECTS.get_or_create(12345, make)   # the failure is kept
    assert calls == [1]
    objects.OBJECTS.release(12345)


def test_object_is_built_once_under_concurrent_first_calls():
    h.CREATED.clear()
    acc = colocated_python_class(h.Accumulator)(0)
    x = on(0, jnp.float32(1))
    barrier = threading.Barrier(8)
    errors = []

    def work():
        try:
            barrier.wait(60)
            acc.add(x)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a first call hung"
    assert errors == []
    assert h.CREATED == ["accumulator"]
    assert float(acc.current.specialize(devices=[jax.devices()[0]])()) == 8.0


def test_object_released_from_the_store():
    acc = colocated_python_class(h.Accumulator)(0)
    uid = acc._colocated_python_uid
    acc.add(on(0, jnp.float32(1)))
    assert uid in objects.OBJECTS
    del acc
    gc.collect()
    assert uid not in objects.OBJECTS


def test_cpu_backend_runs_in_process():
    f = colocated_python(h.add_one)
    f(on(0, jnp.ones(2)))
    entry, = f._cache.fast.values()
    assert isinstance(entry.executor, execution.InProcessExecutor)
    assert execution._CLIENT_RUNS_PROGRAMS[jax.devices()[0].client] is False


def test_specialization_count_event_matches_cache():
    f = colocated_python(h.identity)
    with count_specializations() as seen:
        for n in range(1, 4):
            f(on(0, jnp.ones(n)))
            f(on(0, jnp.ones(n)))
    assert len(seen) == f._cache_size == 3


def test_serialization_of_devices_meshes_and_shardings():
    devices = jax.devices()
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("a", "b"))
    things = (devices[3], jax.sharding.SingleDeviceSharding(devices[2]),
              NamedSharding(mesh, P("a", None)), mesh,
              function.jp.DeviceList(tuple(devices[:3])))
    back = serialization.deserialize(serialization.serialize(things))
    assert back[0] is devices[3]
    assert back[1] == things[1] and back[2] == things[2] and back[3] == mesh
    assert back[4] == things[4]


def test_ifrt_host_side_discovery_and_hand_over():
    # The two host-side halves of a first call under IFRT, run here directly.
    x = on(0, jnp.arange(3.0))
    devices = x.sharding._internal_device_list
    discover = execution.DiscoverAndStash(h.add_one, 99, devices, "add_one")
    encoded = discover(x)
    assert encoded.dtype == np.dtypes.StringDType() and encoded.shape == ()
    treedef, specs = execution.decode_specs(encoded)
    assert specs == (spec_of(x),)
    out = execution.PopStash(99, treedef)()
    np.testing.assert_array_equal(np.asarray(out), np.arange(3.0) + 1)
    assert 99 not in execution._STASH


def test_ifrt_key_boundary_and_physical_specs():
    keys = jax.random.split(on(0, jax.random.key(1)), 4)
    spec = spec_of(keys)
    physical = execution._physical(spec)
    data = jax.random.key_data(keys)
    assert (physical.shape, physical.dtype) == (data.shape, data.dtype)
    impls = execution._key_impls([spec])
    boundary = execution._KeyBoundary(h.split_key, impls, {})
    out = boundary(data[0])
    assert out.dtype == keys.dtype and out.shape == (3,)
