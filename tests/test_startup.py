"""Start-up: ``import pmapkit`` loads only the package; each public name
loads its system on first use, with what a user sees unchanged.

Each check runs in a new process (what is loaded depends on what ran
before). Time is measured by the bench case
``startup_import_pmapkit_new_process_ms``, not here.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import pmapkit


def run(code):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_pmapkit_loads_only_the_package():
    got = run("""
        import json, sys
        import jax
        before = set(sys.modules)
        import pmapkit
        print(json.dumps(sorted(set(sys.modules) - before)))
    """)
    assert got == ["pmapkit"]


@pytest.mark.parametrize("first", ["nothing", "import pmapkit.pjit", "from pmapkit import export",
                                   "from pmapkit import host_callback"])
def test_every_public_name_is_what_it_was(first):
    # pmapkit.pjit / pmap / mesh are the functions, though modules of those
    # names exist and may be loaded first by another system.
    got = run(f"""
        import json, types
        import pmapkit
        {'' if first == 'nothing' else first}
        kinds = {{n: type(getattr(pmapkit, n)).__name__ for n in pmapkit.__all__}}
        missing = sorted(set(pmapkit.__all__) - set(dir(pmapkit)))
        print(json.dumps([kinds, missing, pmapkit.__version__]))
    """)
    kinds, missing, version = got
    assert missing == [] and version == pmapkit.__version__
    assert set(kinds) == set(pmapkit.__all__)
    for name in ("pjit", "pmap", "mesh", "with_sharding_constraint",
                 "device_put_replicated", "device_put_sharded", "clear_caches",
                 "set_cache_size", "set_cpu_collectives_in_flight", "parse_op_sharding"):
        assert kinds[name] == "function", (name, kinds[name])
    assert kinds["maps"] == "module"
    assert kinds["COMPILED"] == "bool"
    assert kinds["Mesh"] == kinds["ShardingSpec"] == "type"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        pmapkit.not_a_name  # noqa: B018


def test_a_submodule_read_as_an_attribute_loads(tmp_path):
    # What a bare ``import pmapkit`` once loaded eagerly still answers.
    code = ("import pmapkit, sys; assert 'pmapkit.host_callback' not in sys.modules; "
            "print(pmapkit.inflight.cpu_collectives_in_flight() >= 0, "
            "callable(pmapkit.host_callback.id_tap), callable(pmapkit.pmap))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize("order", ["checkify first", "pmapkit first"])
def test_checkify_rules_are_in_place_whichever_loads_first(order):
    # pmapkit registers its checkify rules when a program imports checkify
    # (before then it does not load it): either order checks a pmap.
    got = run(f"""
        import json, sys
        import jax, jax.numpy as jnp
        {'from jax.experimental import checkify' if order == 'checkify first' else ''}
        import pmapkit
        f = pmapkit.pmap(lambda x: x + 1.0)
        f(jnp.arange(8.0))
        loaded_before = "jax._src.checkify" in sys.modules
        from jax.experimental import checkify

        def body(x):
            checkify.check(x < 5, "too big: {{}}", x)
            return x * 2
        err, out = checkify.checkify(pmapkit.pmap(body))(jnp.arange(8.0))
        print(json.dumps([loaded_before, err.get(), out.tolist()]))
    """)
    loaded_before, message, out = got
    assert loaded_before == (order == "checkify first")
    assert "too big: 5" in message
    assert out == [2.0 * i for i in range(8)]


def test_the_export_loader_does_not_load_the_exporter(tmp_path):
    import jax
    import jax.numpy as jnp

    from pmapkit import export
    path = tmp_path / "artifact.bin"
    path.write_bytes(export.serialize(export.export(lambda x: x * 2 + 1)(
        jax.ShapeDtypeStruct((4,), jnp.float32))))
    got = run(f"""
        import json, sys
        import numpy as np
        from pmapkit import export
        with open({str(path)!r}, "rb") as f:
            loaded = export.deserialize(f.read())
        out = loaded.call(np.arange(4, dtype=np.float32))
        exporter = "pmapkit.export._export" in sys.modules
        print(json.dumps([np.asarray(out).tolist(), exporter,
                          export.export.__module__, "export" in dir(export)]))
    """)
    out, exporter_loaded, export_module, listed = got
    assert out == [1.0, 3.0, 5.0, 7.0]
    assert not exporter_loaded
    assert export_module == "pmapkit.export._export" and listed
