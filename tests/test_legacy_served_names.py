"""Issue 32: each name pmapkit.legacy serves, held against its modern
equivalent on JAX 0.10 (one probe subprocess, the installed build, outside
the checkout). Golden values marked "0.4.x" were printed by that classic JAX
release itself (scratch venv, ``jax==0.4.13`` / ``jax==0.4.38``)."""
import os
import subprocess
import sys
import textwrap

TIMEOUT_S = 300
HERE = os.path.dirname(os.path.abspath(__file__))

_PROBE = r'''
import os, sys, warnings
import numpy as np
import jax, jax.numpy as jnp
import pmapkit.legacy
pmapkit.legacy.install()
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
warnings.simplefilter("ignore")

# jax.api as an attribute (never imported); a census submodule JAX no longer
# imports at startup, read as an attribute
print("api", jax.api.jit is jax.jit, jax.api.device_put_sharded is jax.device_put_sharded)
mu = jax.experimental.multihost_utils
import jax.experimental.multihost_utils
print("submodule", mu is sys.modules["jax.experimental.multihost_utils"])

# jax.lib.xla_bridge / xla_client
import jax.extend.backend as eb, jaxlib.xla_client
xb = jax.lib.xla_bridge
print("xla_bridge", xb.get_backend() is eb.get_backend(), xb.default_backend() == jax.default_backend(),
      xb.get_compile_options is eb.get_compile_options, jax.lib.xla_client is jaxlib.xla_client)

# x64 context managers
from jax.experimental import enable_x64, disable_x64
from jax.experimental.x64_context import enable_x64 as e2, disable_x64 as d2
with enable_x64():
    a = jnp.arange(3.0).dtype
    with disable_x64():
        b = jnp.arange(3.0).dtype
with e2(True):
    c = jnp.ones(2).dtype
with d2():
    d = jnp.ones(2).dtype
print("x64", a, b, c, d, jnp.arange(3.0).dtype)

# PositionalSharding: classic layout (golden from jax 0.4.38) and the NamedSharding it is
from jax.experimental import mesh_utils
from jax.sharding import PositionalSharding
s = PositionalSharding(mesh_utils.create_device_mesh((8,)))
x = np.arange(32.0).reshape(8, 4)
cases = {"8x1": s.reshape(8, 1), "4x2": s.reshape(4, 2), "2x4": s.reshape(2, 4),
         "4x2 rep1": s.reshape(4, 2).replicate(1), "4x2 rep0": s.reshape(4, 2).replicate(0),
         "rep all": s.reshape(4, 2).replicate(), "T": s.reshape(4, 2).T,
         "rep nokeep": s.reshape(4, 2, 1).replicate(1, keepdims=False),
         "transpose": s.reshape(2, 4).transpose(1, 0)}
layouts = []
for name, sh in cases.items():
    y = jax.device_put(x, sh)
    layouts.append(f"{name} {sh.shape} " + str(sorted((z.device.id, str(z.index)) for z in y.addressable_shards)))
open(os.environ["LAYOUTS"], "w").write("\n".join(layouts) + "\n")
ps = s.reshape(4, 2)
named = NamedSharding(Mesh(np.array(jax.devices()).reshape(4, 2, 1), ("a", "b", "c")), P("a", "b"))
y = jax.device_put(x, ps)
z = jax.jit(lambda v: v * 2, out_shardings=ps)(y)
print("positional", ps.is_equivalent_to(named, 2), y.sharding.is_equivalent_to(named, 2),
      z.sharding.is_equivalent_to(named, 2), bool((z == 2 * x).all()), isinstance(ps, jax.sharding.Sharding))

# use_mesh == jax.set_mesh in a block
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
with jax.sharding.use_mesh(mesh):
    inside = jax.sharding.get_abstract_mesh().axis_names
print("use_mesh", inside, jax.sharding.get_abstract_mesh().empty)

# compilation cache
from jax.experimental.compilation_cache import compilation_cache as cc
cc.initialize_cache("/tmp/pmapkit-census-cache")
print("cache", jax.config.jax_compilation_cache_dir, cc.is_initialized() == bool(jax.config.jax_enable_compilation_cache))
jax.config.update("jax_compilation_cache_dir", None)

# numpy 1.x names
a2, b2 = jnp.arange(6.0).reshape(2, 3), jnp.ones((1, 3))
print("jnp", bool((jnp.row_stack([a2, b2]) == jnp.vstack([a2, b2])).all()),
      jnp.in1d(jnp.arange(6).reshape(2, 3), jnp.array([1, 4])).tolist(),
      float(jnp.trapz(jnp.arange(4.0))) == float(jnp.trapezoid(jnp.arange(4.0))),
      bool((jnp.round_(a2 / 7, 2) == jnp.round(a2 / 7, 2)).all()), jnp.NINF, jnp.PZERO, str(jnp.NZERO))

# jax.random
import jax.extend.random as er
counts = np.arange(6, dtype=np.uint32)
print("threefry", jax.random.threefry_2x32 is er.threefry_2x32,
      jax.random.threefry_2x32((np.uint32(7), np.uint32(11)), counts).tolist())
print("keys", jax.random.threefry2x32_key(5).tolist(), jax.random.default_prng_impl() is er.threefry_prng_impl,
      jax.random.threefry2x32_p is er.threefry2x32_p)
try:
    jax.random.rbg_key(0)
except RuntimeError as e:
    print("rbg", "jax_enable_custom_prng must be enabled" in str(e))
with jax.default_prng_impl("rbg"):
    print("rbg default", bool((jax.random.rbg_key(3) == jax.random.key_data(jax.random.key(3, impl="rbg"))).all()))
with jax.default_prng_impl("unsafe_rbg"):
    print("unsafe_rbg", jax.random.unsafe_rbg_key(3).shape)

# nn / scipy.linalg / tree_util
v = jnp.arange(12.0).reshape(3, 4)
print("nn", bool(jnp.allclose(jax.nn.normalize(v), jax.nn.standardize(v))),
      bool((jax.scipy.linalg.tril(v, 1) == jnp.tril(v, 1)).all()),
      bool((jax.scipy.linalg.triu(v) == jnp.triu(v)).all()))
tree = {"a": (1, 2), "b": [3]}
td = jax.tree_util.tree_structure(tree)
print("tree", jax.tree_util.build_tree(td, [(4, 5), [6]]) == td.from_iterable_tree([(4, 5), [6]]),
      jax.tree_util.build_tree(td, [(4, 5), [6]]),
      str(jax.tree_util.AttributeKeyPathEntry("w")), str(jax.tree_util.GetitemKeyPathEntry(0)),
      jax.tree_util.GetitemKeyPathEntry(0).key, jax.tree_util.AttributeKeyPathEntry("w") == ("w",))

# jax.util helpers: JAX's own
import jax.util as ju
from jax._src import util as src_util
print("util", all(getattr(ju, n) is getattr(src_util, n) for n in ("safe_map", "safe_zip", "unzip2", "split_list")),
      ju.unzip2([(1, "a"), (2, "b")]), list(ju.safe_zip([1], [2])))
try:
    ju.safe_zip([1], [2, 3])
except ValueError:
    print("safe_zip checks lengths")

# jax.core from jax.extend.core: the same objects; a classic custom primitive
import jax.extend.core as ec
from jax.interpreters import mlir, ad, batching
print("core", all(getattr(jax.core, n) is getattr(ec, n) for n in ("Primitive", "ClosedJaxpr", "Jaxpr", "Literal", "Var", "JaxprEqn")))
double_p = jax.core.Primitive("classic_double")
double_p.def_impl(lambda x: 2 * x)
double_p.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(double_p, mlir.lower_fun(lambda x: 2 * x, multiple_results=False))
ad.defjvp(double_p, lambda g, x: 2 * g)
batching.primitive_batchers[double_p] = lambda args, dims: (double_p.bind(*args), dims[0])
def double(x):
    return double_p.bind(x)
xs = jnp.arange(4.0)
print("primitive", double(xs).tolist(), jax.jit(double)(xs).tolist(),
      jax.grad(lambda v: double(v).sum())(xs).tolist(), jax.vmap(double)(xs.reshape(2, 2)).tolist())
print("clear_backends", jax.clear_backends is eb.clear_backends)

# every census name served as the same object as its jax.extend home
import importlib
from pmapkit.legacy import names, classic_values
same = [r for r in names.census_records().values() if r.make is not None]
print("same objects", len(same) >= 15,
      all(getattr(importlib.import_module(r.owner), r.attr) is r.make() for r in same))
print("util helpers", all(getattr(ju, n) is getattr(src_util, n) for n in classic_values.UTIL_HELPERS))
import jax.ffi
print("extend.ffi", all(getattr(jax.extend.ffi, n) is getattr(jax.ffi, n) for n in
                        ("ffi_call", "ffi_lowering", "include_dir", "pycapsule", "register_ffi_target")))
'''


def test_served_names_match_their_modern_equivalents(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(_PROBE))
    layouts = tmp_path / "layouts.txt"
    env = dict(os.environ, JAX_PLATFORMS="cpu", LAYOUTS=str(layouts),
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "probe.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.splitlines() == [
        "api True True",
        "submodule True",
        "xla_bridge True True True True",
        "x64 float64 float32 float64 float32 float32",
        "positional True True True True True",
        "use_mesh ('x',) True",
        "cache /tmp/pmapkit-census-cache True",
        "jnp True [False, True, False, False, True, False] True True -inf 0.0 -0.0",
        # jax 0.4.13: threefry_2x32((7, 11), arange(6)), threefry2x32_key(5)
        "threefry True [68674790, 3421767566, 2504742504, 2657721590, 206014262, 1626445541]",
        "keys [0, 5] True True",
        "rbg True",
        "rbg default True",
        "unsafe_rbg (4,)",
        "nn True True True",
        "tree True {'a': (4, 5), 'b': [6]} .w [0] 0 True",
        "util True ((1, 2), ('a', 'b')) [(1, 2)]",
        "safe_zip checks lengths",
        "core True",
        "primitive [0.0, 2.0, 4.0, 6.0] [0.0, 2.0, 4.0, 6.0] [2.0, 2.0, 2.0, 2.0] "
        "[[0.0, 2.0], [4.0, 6.0]]",
        "clear_backends True",
        "same objects True True",
        "util helpers True",
        "extend.ffi True",
    ]
    with open(os.path.join(HERE, "golden", "positional_sharding_jax_0.4.38.txt")) as f:
        assert layouts.read_text() == f.read()   # the layouts jax 0.4.38 gave


def test_positional_sharding_refuses_bad_devices_and_pickles():
    import pickle

    import jax
    import pytest

    from pmapkit.legacy.positional_sharding import PositionalSharding
    with pytest.raises(ValueError, match="requires at least one device"):
        PositionalSharding([])
    with pytest.raises(TypeError, match="devices must be JAX devices"):
        PositionalSharding([1, 2])
    with pytest.raises(ValueError, match="must not repeat a device"):
        PositionalSharding([jax.devices()[0]] * 2)
    s = PositionalSharding(jax.devices()).reshape(4, 2).replicate(1)
    back = pickle.loads(pickle.dumps(s))
    assert type(back) is PositionalSharding and back == s and back.shape == (4, 1)
    assert repr(back) == ("PositionalSharding([['{0, 1}'], ['{2, 3}'], ['{4, 5}'], "
                          "['{6, 7}']], shape=(4, 1))")


def test_positional_replicas_of_one_layout_go_to_one_jit_together():
    # Distributed_arrays_and_automatic_parallelization (2023): x laid out by
    # s.replicate(1) and by s.replicate(0), then jnp.dot of the two. JAX 0.4
    # kept one device list for every layout made from s, so jit took both.
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pmapkit.legacy.positional_sharding import PositionalSharding
    s = PositionalSharding(jax.devices()).reshape(4, 2)
    x = np.arange(64.0, dtype=np.float32).reshape(8, 8)
    y, z = jax.device_put(x, s.replicate(1)), jax.device_put(x, s.replicate(0))
    np.testing.assert_array_equal(np.asarray(jnp.dot(y, z)), x @ x)
    assert [d.id for d in y.sharding.mesh.devices.flat] == list(range(8))
    assert [d.id for d in z.sharding.mesh.devices.flat] == list(range(8))
    # each part where JAX 0.4 put it: rows by pairs for rep 1, columns alternating for rep 0
    assert {d.device.id: d.index[0] for d in y.addressable_shards}[3] == slice(2, 4)
    assert {d.device.id: d.index[1] for d in z.addressable_shards}[3] == slice(4, 8)
    # a layout all on every device takes a value of any rank (a bias beside its weights)
    for everywhere in (s.replicate(), s.reshape(8, 1).replicate(0).replicate(1)):
        b = jax.device_put(np.arange(3.0), everywhere)
        assert b.sharding.is_fully_replicated and len(b.addressable_shards) == 8
    back = s.replicate(0).with_memory_kind(None)
    assert back.mesh == s.replicate(0).mesh and back.spec == s.replicate(0).spec
