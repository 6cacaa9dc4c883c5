"""Export calls as classic JAX made them: a numpy input read at the call on
every vintage's spelling (pmapkit's own, ``test_inputs_at_call.py``; JAX's
``jax.export`` under ``pmapkit run`` here), an exported pjit equal to the
pjit bit for bit, and no JAX config option appearing at a call."""
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pmapkit
from pmapkit import export as pe

HERE = os.path.dirname(os.path.abspath(__file__))

_ATTACK = """
    import json, sys
    sys.path.insert(0, {here!r})
    import jax, jax.numpy as jnp, numpy as np
    from jax import export as jax_export
    from jax.experimental import export as jee
    from jax.experimental.jax2tf import jax_export as je
    from jax.experimental.pjit import pjit
    from jax.sharding import Mesh, PartitionSpec as P
    from test_inputs_at_call import aligned, wrong_results, SMALL, LARGE

    def double(x):
        return x * 2.0

    rows = {{}}
    for ndev in (1, 8):
        devices = jax.devices()[:ndev]
        mesh = Mesh(np.array(devices), ("x",))
        fun = double if ndev == 1 else pjit(double, in_shardings=P("x"),
                                             out_shardings=P("x"))
        for cols in (SMALL, LARGE):
            spec = jax.ShapeDtypeStruct((ndev, cols), jnp.float32)
            with mesh:
                seed = je.export(fun)(spec)
                experimental = jee.export(fun)(spec)
            jitted = jax_export.export(jax.jit(double))(spec)
            calls = {{"jax_export.call_exported": je.call_exported(seed),
                     "jax.experimental.export.call_exported": jee.call_exported(experimental),
                     "jax.experimental.export Exported.call": experimental.call,
                     "jax.export Exported.call": jitted.call,
                     "jax.export deserialized call": jax_export.deserialize(jitted.serialize()).call}}

            def on_mesh(call):
                def run(x):
                    with mesh:
                        return call(x)
                return run
            x = aligned(ndev, cols)
            rows[f"{{ndev}} devices, {{cols * 4}} B rows"] = {{
                name: wrong_results(on_mesh(call), x, devices, calls=40)
                for name, call in calls.items()}}
    print(json.dumps(rows))
"""


def test_every_classic_export_spelling_reads_inputs_at_the_call_under_run(tmp_path):
    # Under pmapkit run: jax_export and jax.experimental.export are pmapkit's;
    # jax.export is JAX's own, whose call run makes read its input at the call.
    script = tmp_path / "attack.py"
    script.write_text(textwrap.dedent(_ATTACK.format(here=HERE)))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "pmapkit", "run", str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])
    assert len(rows) == 4 and all(len(r) == 5 for r in rows.values())
    assert rows == {k: dict.fromkeys(r, 0) for k, r in rows.items()}


def test_jax_exports_call_is_jaxs_outside_run():
    # Outside pmapkit run, JAX's class is left as JAX made it.
    from pmapkit.legacy import classic_export_call
    assert not getattr(jax.export.Exported.call, classic_export_call._MARK, False)


_PROGRAMS = {
    "tanh_matmul_mean": (lambda a, w: jnp.tanh(a @ w).mean(), (P("x"), None), None),
    "contracted_matmul": (lambda a, w: a @ w, (P(None, "x"), P("x")), None),
    "softmax": (lambda a, w: jax.nn.softmax(a @ w, axis=-1), (P("x"), None), P("x")),
    "variance": (lambda a, w: jnp.var(a, axis=0) @ w, (P("x"), None), None),
    "loss_grad": (lambda a, w: jax.grad(lambda w: jnp.mean((a @ w) ** 2))(w),
                  (P("x"), None), None),
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_an_exported_pjit_called_eagerly_equals_the_pjit_bit_for_bit(name):
    fun, ins, out = _PROGRAMS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    f = pmapkit.pjit(fun, in_axis_resources=ins, out_axis_resources=out)
    mesh = pmapkit.Mesh(np.array(jax.devices()), ("x",))
    specs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in (x, w)]
    with mesh:
        want = np.asarray(f(x, w))
        for spelling in (pe.export(f), pe.export(f, lowering_platforms=("cpu",)),
                         pe.export(f, platforms=("cpu",))):
            exported = spelling(*specs)
            assert exported.nr_devices == 8
            loaded = pe.deserialize(pe.serialize(exported))
            for call in (exported.call, pe.call_exported(exported), loaded.call):
                np.testing.assert_array_equal(np.asarray(call(x, w)), want)


_CONFIG_PROBE = """
    import json, os
    import jax, numpy as np
    from jax._src import config
    from jax.sharding import NamedSharding, Mesh, PartitionSpec as P
    from pmapkit import export
    def options():
        return sorted(set(config.config_states) | set(jax.config.values))
    blob = open({path!r}, "rb").read()
    before = options()
    loaded = export.deserialize(blob)
    mesh = Mesh(np.array(jax.devices()), ("i",))
    x = jax.device_put(np.ones((8, 3), np.float32), NamedSharding(mesh, P("i")))
    jax.block_until_ready(loaded.call(x))
    print(json.dumps([name for name in options() if name not in before]))
"""


def test_no_config_option_appears_at_a_multi_device_call(tmp_path):
    # JAX's own test base fails a test during which a global config value
    # changed: pmapkit's options exist once pmapkit.export is imported.
    path = tmp_path / "f.pmkx"
    f = pmapkit.pjit(lambda v: v * 2, in_axis_resources=P("i"), out_axis_resources=P("i"))
    with pmapkit.Mesh(np.array(jax.devices()), ("i",)):
        path.write_bytes(pe.serialize(pe.export(f)(jax.ShapeDtypeStruct((8, 3), jnp.float32))))
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(_CONFIG_PROBE.format(path=str(path))))
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    proc = subprocess.run([sys.executable, "-P", str(script)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == []
