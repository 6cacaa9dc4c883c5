"""The classic ``PmapSharding`` name (removed in JAX 0.10), as pmapkit.legacy
installs it: pmap layouts are its instances, its constructor and
``default`` give the equivalent NamedSharding, and ``.devices`` of a pmap
layout is the pmap's device order (classic pmap_test's
testDefaultDeviceOrdering / testArrays / test_device_put_sharded, adapted
where they read ``sharding_spec``, which is not given)."""
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.core.sharding import sharding_specs as ss
from pmapkit.core.lowering import pmap_layouts
from pmapkit.legacy import names as legacy_names
from pmapkit.legacy.pmap_sharding import PmapSharding, pmap_devices

N = len(jax.devices())


def test_pmap_layouts_are_instances_and_others_are_not():
    out = pmapkit.pmap(lambda x: x * 2, axis_name="i")(jnp.arange(N * 2.0).reshape(N, 2))
    assert isinstance(out.sharding, PmapSharding)
    put = pmapkit.device_put_sharded([np.arange(i, i + 3) for i in range(N)], jax.devices())
    assert isinstance(put.sharding, PmapSharding)
    assert isinstance(pmapkit.device_put_replicated(np.ones(3), jax.devices()).sharding,
                      PmapSharding)
    mesh = Mesh(np.array(jax.devices()), ("x",))
    # A pmap over axis "x" lays its results out with a sharding equal to the
    # jit's below: only the pmap's own objects are pmap layouts.
    pmapkit.pmap(lambda v: v, axis_name="x")(jnp.arange(N))
    jitted = jax.jit(lambda v: v + 1, out_shardings=NamedSharding(mesh, P("x")))(jnp.arange(N))
    assert not isinstance(jitted.sharding, PmapSharding)
    assert not isinstance(jax.devices()[0], PmapSharding)
    assert not issubclass(NamedSharding, PmapSharding)
    assert list(pmap_devices(out.sharding)) == jax.devices()
    with pytest.raises(AttributeError, match="no attribute 'devices'"):
        pmap_devices(jitted.sharding)


def test_constructor_gives_the_equivalent_named_sharding_and_reorders():
    f = pmapkit.pmap(lambda x: 2 * x, axis_name="i")
    x = np.arange(N * 4, dtype=np.float32).reshape(N, 4)
    y = f(x)
    bufs = [s.data for s in y.addressable_shards][::-1]
    spec = ss.ShardingSpec((ss.Unstacked(N), ss.NoSharding()), (ss.ShardedAxis(0),))
    sharding = PmapSharding([list(b.devices())[0] for b in bufs], spec)
    assert isinstance(sharding, NamedSharding) and pmap_layouts.is_pmap_output(sharding)
    assert list(sharding.mesh.devices) == jax.devices()[::-1]
    moved = jax.make_array_from_single_device_arrays(y.shape, sharding, bufs)
    # Device k's buffer is now row k of the array: the rows come reversed.
    np.testing.assert_array_equal(np.asarray(moved), 2 * x[::-1])
    np.testing.assert_array_equal(np.asarray(f(moved)), 2 * 2 * x[::-1])


def test_default_and_bad_specs():
    assert PmapSharding.default((N, 2)) == NamedSharding(
        Mesh(np.array(jax.devices()), ("_internal_pmap_axis_name",)),
        P("_internal_pmap_axis_name"))
    two = PmapSharding.default((2, 5, 3), sharded_dim=1, devices=jax.devices()[:5]) \
        if N >= 5 else PmapSharding.default((5, 2), sharded_dim=1, devices=jax.devices()[:2])
    assert two.spec == P(None, "_internal_pmap_axis_name")
    replicated = PmapSharding.default((3,), None, jax.devices()[:2])
    assert replicated.spec == P() and replicated.mesh.size == 2
    with pytest.raises(ValueError, match="needs 4 devices, got 2"):
        PmapSharding(jax.devices()[:2],
                     ss.ShardingSpec((ss.Unstacked(4),), (ss.ShardedAxis(0),)))
    with pytest.raises(ValueError, match="2 mesh axes"):
        PmapSharding(jax.devices()[:4], ss.ShardingSpec(
            (ss.Chunked([2]), ss.Chunked([2])), (ss.ShardedAxis(0), ss.ShardedAxis(1))))
    with pytest.raises(TypeError, match="must be a ShardingSpec"):
        PmapSharding(jax.devices()[:2], P("x"))
    with pytest.raises(ValueError, match="devices must be given"):
        PmapSharding.default((3,), None)


_UNDER_LEGACY = """
    import numpy as np
    import jax, pmapkit.legacy
    pmapkit.legacy.install(route_pmap=True)
    again = pmapkit.legacy.install(route_pmap=True)
    out = jax.pmap(lambda x: x)(np.arange(jax.device_count())).sharding
    print("order", jax.devices() == out.devices.tolist(),
          isinstance(out, jax.sharding.PmapSharding), again == ())
    put = jax.device_put_sharded([np.arange(i, i + 4) for i in range(8)], jax.local_devices())
    print("put", isinstance(put.sharding, jax.sharding.PmapSharding),
          all(np.array_equal(s.data, put[s.index]) for s in put.addressable_shards))
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    other = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
    print("other", isinstance(other, jax.sharding.PmapSharding), hasattr(other, "devices"))
    print("installed", "jax.sharding.PmapSharding" in pmapkit.legacy.installed(),
          "jax.sharding.PmapSharding.devices" in pmapkit.legacy.installed())
"""


def test_installed_by_legacy(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(_UNDER_LEGACY)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:4] == [
        "order True True True", "put True True", "other False False",
        "installed True True"], proc.stdout
    assert proc.stderr.count("pmapkit.legacy: ") == 1   # one short line


_BEFORE_LEGACY = """
    import numpy as np
    import jax, pmapkit
    f = pmapkit.pmap(lambda x: x * 2, axis_name="i")
    early = f(np.ones((8, 2), np.float32))  # before pmapkit.legacy is loaded
    jax_f = jax.pmap(lambda x: x * 3, axis_name="k")
    jax_early = jax_f(np.ones((8, 2), np.float32))  # JAX's own pmap, before too
    from pmapkit.legacy import pmap_sharding
    from pmapkit.core.lowering import pmap_layouts
    print("early", pmap_layouts.is_pmap_output(early.sharding),
          pmap_layouts.is_pmap_output(jax_early.sharding))
    # jax.pmap's noted programs past the bound: noted again at their next call.
    pmap_layouts._jax_pmap_trees.update(
        (k, k) for k in range(pmap_layouts._PMAP_RESULTS_BOUND + 1))
    jax.pmap(lambda x: x - 1, axis_name="m")(np.ones((8, 1), np.float32))
    print("jax after", pmap_layouts.is_pmap_output(jax_f(np.ones((8, 2), np.float32)).sharding),
          len(pmap_layouts._jax_pmap_trees) < 100)
    # Past the bound the set starts again from the programs lowering holds:
    # a cached program's results still read as a pmap's.
    pmap_layouts._pmap_results.update(
        (k, k) for k in range(pmap_layouts._PMAP_RESULTS_BOUND + 1))
    g = pmapkit.pmap(lambda x: x + 1, axis_name="j")
    later = g(np.ones((8, 3), np.float32))
    print("after", pmap_layouts.is_pmap_output(later.sharding),
          pmap_layouts.is_pmap_output(f(np.ones((8, 2), np.float32)).sharding),
          len(pmap_layouts._pmap_results) < 100)
"""


def test_pmap_results_made_before_legacy_loads_and_past_the_bound():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(_BEFORE_LEGACY)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:3] == ["early True True", "jax after True True",
                                           "after True True True"], proc.stdout


def _buffer_shapes(x):
    return {tuple(b.shape) for b in legacy_names._device_buffers(x)}


def test_jax_s_own_pmap_results_are_pmap_results_by_identity():
    """JAX 0.10's own ``jax.pmap`` with an ``axis_name`` lays its results out
    with a sharding equal to one a caller builds over a one-axis mesh of that
    name: its results are told apart by the object (classic: a
    ``PmapSharding``, its ``device_buffers`` without the mapped axis; a
    caller's ``NamedSharding``, buffers of the shard's shape)."""
    x = np.arange(N * 4, dtype=np.float32).reshape(N, 4)
    out = jax.pmap(lambda v: v * 2, axis_name="batch")(x)
    moved = jax.pmap(lambda v: v[None], axis_name="batch", out_axes=1)(x)
    summed = jax.pmap(lambda v: jax.lax.psum(v, "batch"), axis_name="batch",
                      out_axes=None)(x)
    own = jax.device_put(x, NamedSharding(Mesh(np.array(jax.devices()), ("batch",)),
                                          P("batch")))
    assert own.sharding == out.sharding and own.sharding is not out.sharding
    assert pmap_layouts.is_pmap_output(out.sharding)
    assert isinstance(out.sharding, PmapSharding)
    assert not pmap_layouts.is_pmap_output(own.sharding)
    assert _buffer_shapes(out) == {(4,)}
    assert _buffer_shapes(moved) == {(1, 4)} and moved.shape == (1, N, 4)
    assert _buffer_shapes(summed) == {(4,)}
    assert _buffer_shapes(own) == {(1, 4)}
    buffers = [float(b[0]) for b in legacy_names._device_buffers(out)]
    assert buffers == (2 * x[:, 0]).tolist()
    # Given to pjit it is classic pjit's pmap output: refused as one of its
    # shardings, and moved as an uncommitted value (jax 0.4.30's golden).
    with pytest.raises(ValueError, match="leaf specifications got sharding .* not allowed"):
        pmapkit.pjit(lambda v: v, in_shardings=out.sharding)
    placed = pmapkit.pjit(lambda v: v + 1)(out)
    assert placed.sharding.device_set == {jax.devices()[0]} and not placed._committed
    np.testing.assert_array_equal(np.asarray(placed), 2 * x + 1)
