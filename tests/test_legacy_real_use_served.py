"""Issue 48 item 2: each name real code reached (two or more repositories of
``census.real_use()``) that pmapkit.legacy now serves, held against classic
behaviour: golden values printed by JAX 0.4.30 itself where it still had the
name (``golden/real_use_jax_0.4.30.json``, written by
``golden/real_use_jax_0.4.30.py``), else the classic semantics stated here.
One probe subprocess per concern, each installing pmapkit.legacy first."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT_S = 300
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "golden", "real_use_jax_0.4.30.json")) as f:
    GOLDEN = json.load(f)


def _run(code, tmp_path, env_extra=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8", **(env_extra or {}))
    env.pop("PYTHONPATH", None)
    env.pop("PMAPKIT_REPORT", None)
    (tmp_path / "probe.py").write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, "probe.py"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_NAMES = r'''
import collections, json, warnings
import numpy as np
import jax, jax.numpy as jnp
import pmapkit.legacy
pmapkit.legacy.install()
from pmapkit import _jax_private as jp
out = {}

from jax import ShapedArray
out["ShapedArray"] = ShapedArray is jax.core.ShapedArray
import jax.interpreters.xla, jax.interpreters.pxla
out["xla"] = [jax.xla is jax.interpreters.xla, jax.pxla is jax.interpreters.pxla,
              isinstance(jnp.ones(2), jax.xla.DeviceArray),
              isinstance(jnp.ones(2), jax.pxla.ShardedDeviceArray),
              isinstance(jnp.ones(2), jax.interpreters.xla._DeviceArray),
              jax.xla.Device is jax.Device, jax.lib.xla_client.Device is jax.Device,
              jax.xla.xb is jax.lib.xla_bridge,
              str(jax.xla.abstractify(jnp.ones((2, 3)))) == str(jax.typeof(jnp.ones((2, 3))))]
out["ad_deflinear"] = jax.ad.deflinear is jp.private_attr("jax._src.interpreters.ad", "deflinear")
x = jnp.array([[1.0, 2.0], [0.0, 3.0]])
out["numpy_aliases"] = [bool(jnp.alltrue(x)) == bool(np.all(np.asarray(x))),
                        jnp.alltrue(x, axis=1).tolist() == np.all(np.asarray(x), axis=1).tolist(),
                        float(jnp.product(x + 1)) == float(np.prod(np.asarray(x) + 1))]

from jax.core import get_aval, ConcretizationTypeError, Shape, symbolic_equal_dim
from jax._src.core import get_aval as src_get_aval
def aval(a):
    a = get_aval(a)
    return [list(a.shape), str(a.dtype), bool(a.weak_type)]
out["get_aval"] = {"array": aval(jnp.ones((2, 3))), "float": aval(1.0), "int": aval(3),
                   "numpy": aval(np.zeros(4, np.int16))}
out["get_aval_tracer"] = jax.jit(lambda t: jnp.asarray(aval(t)[0]))(jnp.ones((5, 2))).tolist()
out["src_get_aval"] = src_get_aval is get_aval
from jax._src.numpy.lax_numpy import isin       # flax 0.3.6's import
out["lax_numpy_isin"] = [isin is jnp.isin, isin(jnp.arange(4), jnp.array([1, 3])).tolist()]
try:
    jax.jit(lambda t: int(t))(1.0)
except ConcretizationTypeError:
    out["ConcretizationTypeError"] = ConcretizationTypeError is jax.errors.ConcretizationTypeError
out["Shape"] = Shape is jp.private_attr("jax._src.core", "Shape")
out["definitely_equal"] = [symbolic_equal_dim(2, 2), symbolic_equal_dim(2, 3)]

from jax.interpreters import batching, ad, pxla
from jax.interpreters.batching import BatchTracer, BatchTrace, not_mapped
out["batching"] = [BatchTracer is jp.private_attr("jax._src.interpreters.batching", "BatchTracer"),
                   BatchTrace is jp.private_attr("jax._src.interpreters.batching", "BatchTrace"),
                   bool(jax.vmap(lambda t: jnp.asarray(isinstance(t, BatchTracer)))(jnp.ones(3)).all()),
                   ad.call_transpose is jp.private_attr("jax._src.interpreters.ad", "call_transpose")]
out["not_mapped"] = repr(not_mapped)
from pmapkit import sharding_specs as ss
spec = ss.ShardingSpec(sharding=(ss.Unstacked(4), ss.NoSharding()), mesh_mapping=(ss.ShardedAxis(0),))
out["spec_to_indices_unstacked"] = repr(pxla.spec_to_indices((4, 3), spec))
spec = ss.ShardingSpec(sharding=(ss.Chunked((2,)), ss.NoSharding()), mesh_mapping=(ss.ShardedAxis(0),))
out["spec_to_indices_chunked"] = repr(pxla.spec_to_indices((4, 3), spec))
from jax.experimental import pjit
from jax.sharding import PartitionSpec as P
parsed = pjit.ParsedPartitionSpec.from_user_input(P("x", None, "y"), "in_axis_resources")
out["pjit_internals"] = [list(pjit.get_array_mapping(parsed).items()),
                         isinstance(parsed, ss.ParsedPartitionSpec)]

from jax._src.tree_util import _replace_nones
Pair = collections.namedtuple("Pair", "a b")
trees = {"none": None, "list": [1, None, [None, 2]], "dict": {"a": None, "b": (None, 3)},
         "namedtuple": Pair(None, [None])}
out["_replace_nones"] = {k: repr(_replace_nones("<s>", t)) for k, t in trees.items()}
from jax._src.lib import xla_bridge
out["src_xla_bridge"] = [xla_bridge is jp.private_module("jax._src.xla_bridge"),
                         xla_bridge.get_backend().platform]
import jax.prng
key = jax.prng.seed_with_impl(jax.extend.random.threefry_prng_impl, 42)
out["seed_with_impl"] = [str(key.dtype), np.asarray(jax.random.key_data(key)).tolist()]
import jax.numpy.lax_numpy
out["lax_numpy"] = [jax.numpy.lax_numpy is jp.private_module("jax._src.numpy.lax_numpy"),
                    jax.numpy.lax_numpy.__name__ == "jax._src.numpy.lax_numpy"]
from jax.experimental.global_device_array import _hashed_index
idx = (slice(0, 2), slice(None))
out["_hashed_index"] = [_hashed_index(idx) == _hashed_index((slice(0, 2, 1), slice(None))),
                        _hashed_index(idx) != _hashed_index((slice(2, 4), slice(None))),
                        # the same start, another stop: another shard
                        _hashed_index(idx) != _hashed_index((slice(0, 4), slice(None))),
                        _hashed_index((slice(None), slice(0, 1)))
                        != _hashed_index((slice(None), slice(0, 2)))]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def names(tmp_path_factory):
    return _run(_NAMES, tmp_path_factory.mktemp("names"))


def test_public_objects_under_their_classic_names(names):
    assert names["ShapedArray"] is True                      # "from jax import ShapedArray"
    assert names["xla"] == [True] * 9
    assert names["ad_deflinear"] is True
    assert names["numpy_aliases"] == [True, True, True]
    assert names["ConcretizationTypeError"] is True


def test_get_aval_gives_what_0_4_30_gave(names):
    assert names["get_aval"] == GOLDEN["get_aval"]
    assert names["get_aval_tracer"] == GOLDEN["get_aval_tracer"]
    assert names["src_get_aval"] is True
    assert names["lax_numpy_isin"] == [True, [False, True, False, True]]


def test_internals_are_the_objects_jax_still_holds(names):
    assert names["Shape"] is True
    assert names["batching"] == [True, True, True, True]
    assert names["definitely_equal"] == GOLDEN["definitely_equal"]
    assert names["not_mapped"] == GOLDEN["not_mapped"]
    assert names["src_xla_bridge"] == [True, "cpu"]
    assert names["lax_numpy"] == [True, True]


def test_classic_sharding_internals_as_0_4_30_had_them(names):
    assert names["spec_to_indices_unstacked"] == GOLDEN["spec_to_indices_unstacked"]
    assert names["spec_to_indices_chunked"] == GOLDEN["spec_to_indices_chunked"]
    assert names["pjit_internals"] == [[["x", 0], ["y", 2]], True]


def test_private_helpers_keep_their_classic_results(names):
    assert names["_replace_nones"] == GOLDEN["_replace_nones"]
    assert names["seed_with_impl"] == GOLDEN["seed_with_impl"]
    assert names["_hashed_index"] == [True, True, True, True]


_CONFIG_AND_ARRAYS = r'''
import json, warnings
import numpy as np
import jax, jax.numpy as jnp
import pmapkit, pmapkit.legacy
pmapkit.legacy.install()
out = {}
from jax.config import config, FLAGS
out["FLAGS"] = [jax.config.FLAGS.jax_enable_x64, FLAGS.jax_enable_x64]
jax.config.FLAGS.jax_enable_x64 = True
out["FLAGS_set"] = [bool(jax.config.jax_enable_x64), str(jnp.arange(2.0).dtype)]
jax.config.update("jax_enable_x64", False)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = jax.config.enable_omnistaging()
out["omnistaging"] = [result, [str(w.message)[:31] for w in caught],
                      jax.config.omnistaging_enabled, config.omnistaging_enabled]
out["coordination_service"] = jax.config.jax_coordination_service
jax.config.update("jax_coordination_service", True)
try:
    jax.config.update("jax_coordination_service", False)
except ValueError as e:
    out["coordination_service_off"] = [type(e).__name__, "jax_coordination_service" in str(e)]
out["removed_options"] = [jax.config.jax_dynamic_shapes,
                          jax.config.experimental_xmap_spmd_lowering]
jax.config.update("jax_dynamic_shapes", False)
for option in ("jax_dynamic_shapes", "experimental_xmap_spmd_lowering"):
    try:
        jax.config.update(option, True)
    except ValueError as e:
        out["removed_options"].append([type(e).__name__, option in str(e)])
# classic config took a lax.Precision member for the matmul precision
jax.config.update("jax_default_matmul_precision", jax.lax.Precision.HIGHEST)
out["matmul_precision"] = [jax.config.jax_default_matmul_precision,
                           float(jnp.dot(jnp.ones(3), jnp.ones(3)))]
jax.config.update("jax_default_matmul_precision", None)
x = jnp.arange(6.0).reshape(2, 3)
y = x.to_py()
out["to_py"] = [type(y).__name__, y.tolist(), str(y.dtype)]
p = pmapkit.pmap(lambda v: v * 2)(jnp.arange(8.0).reshape(8, 1))
out["sharding_spec"] = repr(p.sharding_spec)
try:
    x.sharding_spec
except AttributeError as e:
    out["sharding_spec_single"] = [type(e).__name__, "x.sharding" in str(e)]
print(json.dumps(out))
'''


def test_config_attributes_and_array_members(tmp_path):
    out = _run(_CONFIG_AND_ARRAYS, tmp_path)
    # classic FLAGS: a namespace reading (and updating) the config values
    assert out["FLAGS"] == [False, False]
    assert out["FLAGS_set"] == [True, "float64"]
    # classic enable_omnistaging(): a no-op that warned; omnistaging_enabled True
    assert out["omnistaging"][0] is None
    assert out["omnistaging"][1] == ["enable_omnistaging() is a no-op"]
    assert out["omnistaging"][2:] == [True, True]
    # a removed option reads its classic final default; turning it off is refused
    assert out["coordination_service"] is True
    assert out["coordination_service_off"] == ["RemovedConfigValueError", True]
    assert out["removed_options"] == [False, False, ["RemovedConfigValueError", True],
                                      ["RemovedConfigValueError", True]]
    # classic update("jax_default_matmul_precision", Precision.HIGHEST): its name
    assert out["matmul_precision"] == ["highest", 3.0]
    # classic DeviceArray.to_py(): the value as a NumPy array
    assert out["to_py"] == ["ndarray", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], "float32"]
    # a pmap result's classic ShardingSpec: its mapped axis unstacked
    assert out["sharding_spec"] == ("ShardingSpec((Unstacked(8), NoSharding()), "
                                    "(ShardedAxis(axis=0),))")
    assert out["sharding_spec_single"] == ["RemovedAttributeError", True]


_DEVICES = r'''
import json
import jax, jax.numpy as jnp
import pmapkit.legacy
pmapkit.legacy.install()
import jaxlib.xla_extension as xe
import jax._src.lib
from jax.lib import xla_extension as jxe
d = jax.devices()[0]
print(json.dumps({
    "cpu": [isinstance(d, xe.CpuDevice), isinstance(d, xe.GpuDevice),
            isinstance(d, xe.TpuDevice), isinstance(d, jxe.CpuDevice),
            isinstance("cpu", xe.CpuDevice)],
    "classes": [issubclass(xe.CpuDevice, xe.GpuDevice), issubclass(xe.CpuDevice, xe.CpuDevice),
                xe.Device is jax.Device, isinstance(jnp.ones(2), xe.DeviceArray),
                xe.DeviceList is jax._src.lib._jax.DeviceList],
    # classic jax.jit returned a jax_jit.CompiledFunction (chex's
    # is_traceable asks that); jaxlib's own names stay reachable there
    "jit": [isinstance(jax.jit(lambda x: x), jxe.jax_jit.CompiledFunction),
            isinstance(lambda x: x, xe.jax_jit.CompiledFunction),
            jxe.jax_jit.PyArgSignature is jax._src.lib._jax.jax_jit.PyArgSignature],
}))
'''


def test_jaxlib_device_classes_answer_isinstance_by_platform(tmp_path):
    out = _run(_DEVICES, tmp_path)
    assert out["cpu"] == [True, False, False, True, False]
    assert out["classes"] == [False, True, True, True, True]
    assert out["jit"] == [True, False, True]


_TEST_CASE = r'''
import json, unittest
import numpy as np
import jax, jax.numpy as jnp
import pmapkit.legacy
pmapkit.legacy.install()
from jax import test_util as jtu
seen = {}

class Classic(jtu.JaxTestCase):
    def test_raw_keys_and_promotions(self):
        key = jax.random.PRNGKey(0)                          # raw uint32 key data
        seen["split"] = np.asarray(jax.random.split(key)).shape
        seen["promote"] = str((jnp.ones(2, jnp.int32) + jnp.ones(2, jnp.float32)).dtype)
        seen["rank"] = (jnp.ones((2, 3)) + jnp.ones(3)).shape
        seen["checks"] = bool(jax.config.jax_enable_checks)
        seen["rng"] = self.rng().randint(1000)
        self.assertAllClose(jnp.ones(2), np.ones(2))

    def test_leaves_a_global_option_set(self):
        jax.config.update("jax_debug_nans", True)            # classic: not checked
        self.addCleanup(jax.config.update, "jax_debug_nans", False)

result = unittest.TextTestRunner(verbosity=0).run(
    unittest.defaultTestLoader.loadTestsFromTestCase(Classic))
seen["ok"] = result.wasSuccessful()
seen["errors"] = [str(e[1])[-300:] for e in result.errors + result.failures]
seen["split"] = list(seen.get("split", ()))
seen["rank"] = list(seen.get("rank", ()))
seen["cases"] = jtu.cases_from_list(range(20))
seen["cases_order"] = [int(i) for i in np.random.RandomState(42).permutation(20)[:10]]
seen["check_eq"] = []
for a, b in (({"a": np.float32(1.0)}, {"a": np.float32(1.0)}), ([np.ones(2)], [np.zeros(2)])):
    try:
        jtu.check_eq(a, b)
        seen["check_eq"].append("ok")
    except AssertionError:
        seen["check_eq"].append("AssertionError")
seen["tol"] = {str(np.dtype(k)): v for k, v in jtu._default_tolerance.items()}
seen["default_tolerance_is_default"] = jtu.default_tolerance() == jtu._default_tolerance
seen["device_under_test"] = jtu.device_under_test()
print(json.dumps(seen))
'''


def test_jax_test_case_runs_classic_tests_with_classic_defaults(tmp_path):
    pytest.importorskip("absl")
    out = _run(_TEST_CASE, tmp_path, {"JAX_NUM_GENERATED_CASES": "10"})
    assert out["ok"] is True, out["errors"]
    assert out["split"] == [2, 2]                  # raw keys allowed (0.10's base refuses)
    assert out["promote"] == "float32"             # standard promotion, not strict
    assert out["rank"] == [2, 3]                   # implicit rank promotion allowed
    assert out["checks"] is True                   # the one thing classic set
    assert 0 <= out["rng"] < 1000
    # classic cases_from_list: JAX_NUM_GENERATED_CASES of them, seed 42's order
    assert out["cases"] == out["cases_order"]
    assert out["check_eq"] == [GOLDEN["check_eq_same"], GOLDEN["check_eq_differs"]]
    assert {k: out["tol"][k] for k in GOLDEN["_default_tolerance"]} == GOLDEN["_default_tolerance"]
    assert out["default_tolerance_is_default"] is GOLDEN["default_tolerance_is_default"]
    assert out["device_under_test"] == GOLDEN["device_under_test"]


_OPTIX = r'''
import json, sys
if "--no-optax" in sys.argv:
    sys.modules["optax"] = None                     # as if optax were not installed
import jax, jax.numpy as jnp
import pmapkit.legacy
pmapkit.legacy.install()
try:
    from jax.experimental import optix
except ImportError as e:
    print(json.dumps({"error": [type(e).__name__, str(e)]}))
    raise SystemExit
import optax
params = {"w": jnp.ones(3)}
grads = {"w": jnp.array([1.0, -2.0, 0.5])}
opt = optix.chain(optix.clip_by_global_norm(1.0), optix.adam(1e-2))
state = opt.init(params)
updates, state = opt.update(grads, state, params)
ours = optix.apply_updates(params, updates)["w"].tolist()
ref = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
u, _ = ref.update(grads, ref.init(params), params)
print(json.dumps({"same": [optix.adam is optax.adam, ours == optax.apply_updates(params, u)["w"].tolist()]}))
'''


def test_optix_serves_optax_under_optix_names(tmp_path):
    pytest.importorskip("optax")
    out = _run(_OPTIX, tmp_path)
    assert out == {"same": [True, True]}


def test_optix_without_optax_says_to_install_it(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(_OPTIX))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "probe.py", "--no-optax"], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kind, text = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert kind == "RemovedModuleError"
    assert "pip install optax" in text and "jax.experimental.optix was removed in JAX 0.2.7" in text
