"""The mechanical rewrites of issue 57 item 3, each checked by behaviour: the
migrated program, run here on plain JAX (8 CPU devices), computes what the
classic API computed (its values written out, or pmapkit's classic module)."""
import textwrap

import numpy as np

from pmapkit.tools.migrate import migrate_source


def _run(source):
    new, report = migrate_source(textwrap.dedent(source))
    namespace = {"__name__": "migrated"}
    exec(compile(new, "migrated.py", "exec"), namespace)
    return namespace, new, report


def test_from_jax_api_import_is_from_jax_import():
    ns, new, report = _run('''\
        from jax.api import (jit,
                             grad)
        from jax.api import vmap as vm
        import jax.numpy as jnp
        out = (int(jit(lambda x: x + 1)(1)), float(grad(lambda x: x * x)(3.0)),
               vm(lambda x: x * 2)(jnp.arange(3)).tolist())
        ''')
    assert report.left == [] and "jax.api" not in new
    assert new.startswith("from jax import (jit,\n                     grad)\n"
                          "from jax import vmap as vm\n")
    assert ns["out"] == (2, 6.0, [0, 2, 4])


def test_nested_pmaps_written_as_calls_are_one_shard_map_over_a_2d_mesh():
    ns, new, report = _run('''\
        import jax
        import numpy as np
        from jax import lax
        def body(x):
            return lax.psum(x, 'i') * 10 + lax.convert_element_type(lax.axis_index('j'), x.dtype)
        f = jax.pmap(jax.pmap(body, 'i'), 'j')
        out = f(np.arange(8.).reshape(2, 4))
        ''')
    assert report.left == report.kept == [] and "jax.pmap(" not in new
    x = np.arange(8.).reshape(2, 4)
    expected = x.sum(axis=1, keepdims=True) * 10 + np.arange(2)[:, None] + 0 * x
    assert ns["out"].tolist() == expected.tolist()
    # classic pmap ran a 2 x 4 nest on the first 8 devices, row by row
    assert ns["out"].sharding.mesh.devices.shape == (2, 4)


def test_gda_from_callback_is_make_array_from_callback_with_a_named_sharding():
    from jax.sharding import Mesh, PartitionSpec
    import jax
    from pmapkit.legacy.global_device_array import GlobalDeviceArray
    ns, new, report = _run('''\
        import numpy as np
        import jax
        from jax.experimental import maps
        from jax.experimental.global_device_array import GlobalDeviceArray
        from jax.experimental import PartitionSpec as P

        mesh = maps.Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
        data = np.arange(32.0).reshape(8, 4)
        split = GlobalDeviceArray.from_callback((8, 4), mesh, ["x", "y"], lambda i: data[i])
        whole = GlobalDeviceArray.from_callback((8, 4), mesh, None, lambda i: data[i])
        axes = P("x", None)
        rows = GlobalDeviceArray.from_callback(global_shape=(8, 4), global_mesh=mesh,
                                               mesh_axes=axes, data_callback=lambda i: data[i])
        ''')
    assert report.left == [] and "GlobalDeviceArray" not in new
    assert "jax.make_array_from_callback(" in new
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    data = np.arange(32.0).reshape(8, 4)
    for name, axes in (("split", ["x", "y"]), ("whole", None), ("rows", PartitionSpec("x"))):
        classic = GlobalDeviceArray.from_callback((8, 4), mesh, axes, lambda i: data[i])
        got = ns[name]
        assert got.sharding.is_equivalent_to(classic.sharding, 2), name
        assert [(s.device, s.index) for s in got.addressable_shards] == \
            [(s.device, s.index) for s in classic.addressable_shards], name
        assert np.asarray(got).tolist() == data.tolist()
