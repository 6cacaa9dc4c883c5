"""Issue 56: names one repository (or JAX's own 0.4.30 tests) used, served
and held against classic behaviour -- golden values printed by JAX 0.4.30
itself (``golden/one_repository_jax_0.4.30.json``, written by
``golden/one_repository_classic.py``) where it ran them, else the classic
semantics stated here -- and the refusals issue 56 found wrong or vague."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np

from _subprocess_env import subprocess_env

TIMEOUT_S = 300
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "golden", "one_repository_jax_0.4.30.json")) as f:
    GOLDEN = json.load(f)


def _env():
    return subprocess_env()


def _run(code, tmp_path, *args):
    (tmp_path / "probe.py").write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, *args, "probe.py"], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_SERVED = r'''
import json, math
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
import pmapkit.legacy
pmapkit.legacy.install()
from jax.ad_checkpoint import checkpoint, remat
from jax.interpreters.pxla import axis_index
from jax.util import prod
from jax._src.util import prod as src_prod, safe_map, safe_zip, unzip2
from jax.experimental.global_device_array import Device, GlobalDeviceArray
out = {}
x = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
def f(v):
    return jnp.sum(jnp.sin(v) * jnp.cos(v) ** 2)
out["checkpoint_is"] = [checkpoint is jax.checkpoint, remat is jax.checkpoint]
out["checkpoint_grad"] = np.asarray(jax.grad(checkpoint(f))(x)).tolist()
out["checkpoint_policy_grad"] = np.asarray(jax.grad(checkpoint(
    f, policy=jax.checkpoint_policies.nothing_saveable))(x)).tolist()
out["axis_index_is"] = axis_index is lax.axis_index
out["axis_index"] = np.asarray(jax.pmap(lambda v: axis_index("i") + 0 * v,
                                        axis_name="i")(x)).tolist()
a = np.arange(8 * 2 * 3, dtype=np.float32).reshape(8, 2, 3) / 10
b = np.arange(8 * 3 * 4, dtype=np.float32).reshape(8, 3, 4) / 10
pdot = jax.pmap(lambda p, q: lax.pdot(p, q, "i", pos_contract=((1,), (0,))), axis_name="i")
out["pdot"] = np.asarray(pdot(a, b)).tolist()
out["pdot_grad"] = np.asarray(jax.pmap(jax.grad(
    lambda p, q: jnp.sum(lax.pdot(p, q, "i", pos_contract=((1,), (0,))) ** 2)),
    axis_name="i")(a, b)).tolist()
batched = jax.pmap(lambda p, q: lax.pdot(p, q, "i", pos_contract=((2,), (1,)),
                                         pos_batch=((0,), (0,))), axis_name="i")
out["pdot_batch"] = np.asarray(batched(a.reshape(8, 1, 2, 3), b.reshape(8, 1, 3, 4))).tolist()
out["prod"] = [prod is math.prod, src_prod is math.prod, prod([2, 3, 4]), prod([]),
               prod(np.zeros((3, 5)).shape), float(prod(np.array([1.5, 2.0])))]
out["safe_map"] = safe_map(lambda p, q: p * q, [1, 2, 3], [4, 5, 6])
out["safe_zip"] = [list(t) for t in safe_zip([1, 2], ["a", "b"])]
out["unzip2"] = [list(t) for t in unzip2([(1, "a"), (2, "b"), (3, "c")])]
out["unzip2_empty"] = [list(t) for t in unzip2([])]
for name, call in (("safe_map_error", lambda: safe_map(lambda p, q: p, [1, 2], [1])),
                   ("safe_zip_error", lambda: safe_zip([1, 2], [1]))):
    try:
        call()
        out[name] = None
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
out["Device"] = Device is jax.Device
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
gda = GlobalDeviceArray.from_callback((8, 2), mesh, ["x"],
                                      lambda idx: np.arange(16.0).reshape(8, 2)[idx])
out["local_data"] = [np.asarray(gda.local_data(i)).tolist() for i in (0, 3)]
out["local_data_unbound"] = np.asarray(GlobalDeviceArray.local_data(gda, 7)).tolist()
y = jax.pmap(lambda v: v * 2)(np.arange(8.0))
out["replication_factor"] = y.sharding_spec.replication_factor
from pmapkit.sharding_specs import ShardingSpec, Chunked, NoSharding, Replicated, ShardedAxis
out["replication_factor_2d"] = ShardingSpec(
    (NoSharding(), Chunked((2,))),
    (Replicated(3), ShardedAxis(0), Replicated(2))).replication_factor
try:
    y.device_buffers = []
    out["assign"] = None
except AttributeError as e:
    out["assign"] = [type(e).__name__, str(e)]
print(json.dumps(out))
'''


def test_served_names_behave_as_classic(tmp_path):
    got = _run(_SERVED, tmp_path)
    # the same objects JAX 0.10 holds
    assert got["checkpoint_is"] == [True, True]
    assert got["axis_index_is"] is True
    assert got["Device"] is True
    # values as jax 0.4.30 computed them
    for key in ("checkpoint_grad", "checkpoint_policy_grad", "axis_index", "pdot",
                "pdot_batch", "pdot_grad"):
        np.testing.assert_allclose(got[key], GOLDEN[key], rtol=1e-6, err_msg=key)
    for key in ("safe_map", "safe_zip", "unzip2", "unzip2_empty", "safe_map_error"):
        assert got[key] == GOLDEN[key], key
    # jax._src.util's safe_zip is native on JAX 0.10 (JAX's own object, kept):
    # the same ValueError on unequal lengths, in JAX 0.10's words
    assert got["safe_zip_error"][0] == GOLDEN["safe_zip_error"][0] == "ValueError"
    assert "safe_zip() argument 1 has length 1" in got["safe_zip_error"][1]
    # prod: classic jax.util.prod / jax._src.util.prod (gone by 0.4.5) was the
    # product of an iterable starting at 1 -- math.prod, served as itself
    assert got["prod"] == [True, True, 24, 1, 15, 3.0]
    # GlobalDeviceArray.local_data(i): the i-th local shard's data
    rows = np.arange(16.0).reshape(8, 2)
    assert got["local_data"] == [rows[0:1].tolist(), rows[3:4].tolist()]
    assert got["local_data_unbound"] == rows[7:8].tolist()
    # JAX 0.1's ShardingSpec.replication_factor: copies of the whole array
    assert got["replication_factor"] == 1 and got["replication_factor_2d"] == 6
    kind, text = got["assign"]
    assert kind == "RemovedAttributeError" and "property" not in text
    assert "jax.Array.device_buffers cannot be assigned" in text
    assert "jax.make_array_from_single_device_arrays" in text


def test_pmapkit_run_serves_the_0_4_module_jax_ad_checkpoint(tmp_path):
    """``from jax.ad_checkpoint import checkpoint`` stopped JAX's own v0.4.30
    pmap_test.py under ``pmapkit run``; an unused import of the GDA's
    ``Device`` no longer stops a program."""
    (tmp_path / "old.py").write_text(textwrap.dedent('''\
        import jax, jax.numpy as jnp
        from jax.ad_checkpoint import checkpoint
        from jax.experimental.global_device_array import Device, GlobalDeviceArray
        print(float(jax.grad(checkpoint(lambda x: jnp.sin(x) ** 2))(0.5)))
        '''))
    proc = subprocess.run([sys.executable, "-m", "pmapkit", "run", "old.py"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(),
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert abs(float(proc.stdout.split()[-1]) - math.sin(1.0)) < 1e-6


def test_the_records_name_math_prod_and_the_real_release():
    """One text for ``jax.util.prod`` whoever reads it: ``pmapkit run``
    serves math.prod (in the served jax.util module, and on jax._src.util),
    ``pmapkit migrate`` renames ``jax._src.util.prod`` to it and says it for
    ``jax.util``'s names, each with its own release."""
    from pmapkit.legacy import names
    record = names.by_name("jax._src.util.prod")
    assert record.modern == "math.prod" and record.served_by.startswith("math.prod")
    assert record.make()([2, 3]) == 6 and record.removed_in == "0.4.5"
    classic = names.by_name("jax.util.prod")
    assert "math.prod" in classic.modern and classic.removed_in == "0.2.1..0.2.10"
    from pmapkit.tools.migrate import rules_trees_ops
    moves, reasons = rules_trees_ops.census_tables()
    assert moves["jax._src.util.prod"] == "math.prod"
    assert "use math.prod for prod" in reasons["jax.util"]
    assert "JAX internal; no public replacement, e.g." not in reasons["jax.util"]
