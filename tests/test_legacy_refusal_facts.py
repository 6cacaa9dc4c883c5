"""Issues 56 and 59: every refusal's replacement held as facts, not words.
Each dotted name a refusal gives as what to use instead must be an object
this JAX has (resolved before ``pmapkit.legacy.install()``: JAX's, not
pmapkit's), must not be the removed name itself, and where it can be run,
running it does the removed name's job (values checked). The rule's own
checker (``pmapkit.legacy.replacements``) fails the planted bad refusals."""
import json
import subprocess
import sys
import textwrap

import pytest

from pmapkit.legacy import names, replacements

from _subprocess_env import subprocess_env

TIMEOUT_S = 300


def _env():
    return subprocess_env()


def _run(code, tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, "probe.py"], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _refusals():
    census = [r for r in names.census_records().values() if r.make is None and not r.served_by]
    return census + list(names.REFUSED_NAMES) + list(names.REFUSED_REAL_USE) + list(
        names.REFUSED_MODULES)


def test_every_refusal_names_a_replacement_this_jax_has(tmp_path):
    """Resolved in a fresh interpreter that never installs pmapkit.legacy."""
    found = _run('''
        import json
        from pmapkit.legacy import names, replacements
        records = [r for r in names.census_records().values()
                   if r.make is None and not r.served_by]
        records += list(names.REFUSED_NAMES) + list(names.REFUSED_REAL_USE) + list(
            names.REFUSED_MODULES)
        wrong = {r.name: replacements.problems(r) for r in records}
        named = sorted({n for r in records for n in replacements.named(r.modern)})
        import sys
        print(json.dumps({"wrong": {k: v for k, v in wrong.items() if v},
                          "named": named, "records": len(records),
                          "legacy": "pmapkit.legacy._installer" in sys.modules
                                    and __import__("pmapkit.legacy").legacy.installed()}))
        ''', tmp_path)
    assert found["wrong"] == {}
    assert not found["legacy"]
    assert found["records"] > 1000 and len(found["named"]) > 40
    assert "jax.numpy.trunc" in found["named"] and "jax.lax.fori_loop" in found["named"]


@pytest.mark.parametrize("modern, example, fault", [
    ("jax.lax.pdot", "jax.lax.pdot(x, y, 'i')", "as its own replacement"),
    ("lax.pdot under jax.shard_map", "", "as its own replacement"),
    ("jax.lax.not_a_function", "", "AttributeError"),
    ("jax.numpy.fixx", "", "AttributeError"),
    ("use something else", "", "names no object"),
])
def test_the_rule_fails_a_bad_refusal(modern, example, fault):
    """A refusal naming the removed name as its own replacement, an object
    this JAX lacks, or nothing at all: each reported."""
    planted = names.Removed("jax.lax.pdot", modern, example)
    found = replacements.problems(planted)
    assert any(fault in problem for problem in found), found
    # and the real record passes
    assert replacements.problems(names.by_name("jax.numpy.fix")) == []


def test_the_unservable_call_names_the_property_this_jax_has():
    """``x.device()`` is refused for the property ``x.device``: the same dotted
    name, so the rule's self-check does not apply; the fact is that JAX 0.10's
    ``jax.Array.device`` is a property giving the Device."""
    import jax
    import jax.numpy as jnp
    record = names.by_name("jax.Array.device")
    assert record in names.UNSERVABLE
    assert isinstance(jax.Array.__dict__.get("device") or
                      type(jnp.ones(1)).__dict__.get("device"), property)
    assert jnp.ones(1).device in jax.devices()


#: For refusals whose replacement can be run: the object the job uses (it
#: must be among those the record names) and the job, whose value is held
#: against numpy or the classic semantics in ``_JOBS``.
_USES = {
    "jax.numpy.fix": "jax.numpy.trunc",
    "jax.numpy.issubsctype": "jax.numpy.issubdtype",
    "jax.dlpack.SUPPORTED_DTYPES": "jax.dlpack.is_supported_dtype",
    "jax.lax.xeinsum": "jax.numpy.einsum",
    "jax.lax.all_gather_start": "jax.lax.all_gather",
    "jax.lax.all_gather_invariant": "jax.lax.all_gather",
    "jax.soft_pmap": "jax.vmap",
    "jax.experimental.loops": "jax.lax.fori_loop",
    "jax._src.lax.control_flow.for_loop.for_loop": "jax.lax.fori_loop",
    "jax.experimental.maps.serial_loop": "jax.lax.map",
    "jax.experimental.array_api.fft": "jax.numpy.fft",
    "jax.experimental.array_api.linalg": "jax.numpy.linalg",
    "jax.scipy.special.sph_harm": "jax.scipy.special.sph_harm_y",
    "jax.custom_transforms": "jax.custom_jvp",
    "jax.tree_util.register_keypaths": "jax.tree_util.register_pytree_with_keys",
    "jax.stages.OutInfo": "jax.ShapeDtypeStruct",
    "jax.experimental.mutable_array": "jax.new_ref",
    "jax.interpreters.partial_eval.trace_to_jaxpr": "jax.make_jaxpr",
    "jax.defvjp_all": "jax.custom_vjp",
    "jax.util.extend_name_stack": "jax.named_scope",
    "jax.xla_computation": "jax.jit",
    "jax.interpreters.pxla.make_sharded_device_array":
        "jax.make_array_from_single_device_arrays",
    "jax.sharding.GSPMDSharding": "jax.sharding.NamedSharding",
    "jax.lax.pvary": "jax.lax.pcast",
}

_JOBS = r'''
import json, math
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("i",))
x = np.array([-1.5, -0.5, 0.5, 2.7], np.float32)
xs = np.arange(8.0, dtype=np.float32)
def smap(f, spec=P("i"), out=P("i")):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=out))
out = {}
out["jax.numpy.fix"] = np.asarray(jnp.trunc(x)).tolist() == np.fix(x).tolist()
out["jax.numpy.issubsctype"] = [bool(jnp.issubdtype(jnp.float32, jnp.floating)),
                                bool(jnp.issubdtype(jnp.int32, jnp.floating))] == [True, False]
out["jax.dlpack.SUPPORTED_DTYPES"] = bool(jax.dlpack.is_supported_dtype(np.float32))
a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6); b = np.ones((6, 3), np.float32)
got = smap(lambda p: lax.psum(jnp.einsum("ij,jk->ik", p, b[:, :]), "i"), P("i"), P())(a)
out["jax.lax.xeinsum"] = np.allclose(got, (a @ b).reshape(8, 1, 3).sum(0))
gathered = np.asarray(smap(lambda p: lax.all_gather(p, "i", tiled=True), P("i"), P("i"))(xs))
out["jax.lax.all_gather_start"] = gathered.reshape(8, 8).tolist() == [xs.tolist()] * 8
out["jax.lax.all_gather_invariant"] = out["jax.lax.all_gather_start"]
centred = jax.vmap(lambda v: v - lax.pmean(v, "i"), axis_name="i")(xs)
out["jax.soft_pmap"] = np.allclose(centred, xs - xs.mean())
total = lax.fori_loop(0, 5, lambda i, c: c + i, 0)
out["jax.experimental.loops"] = int(total) == 10
out["jax._src.lax.control_flow.for_loop.for_loop"] = int(total) == 10
out["jax.experimental.maps.serial_loop"] = np.allclose(
    lax.map(lambda v: v * 2, xs, batch_size=4), xs * 2)
out["jax.experimental.array_api.fft"] = np.allclose(jnp.fft.fft(x), np.fft.fft(x), atol=1e-5)
m = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
out["jax.experimental.array_api.linalg"] = np.allclose(jnp.linalg.inv(m), np.linalg.inv(m),
                                                       atol=1e-5)
theta, phi = np.float32(0.3), np.float32(0.7)
y10 = jax.scipy.special.sph_harm_y(jnp.array([1]), jnp.array([0]), theta, phi)
out["jax.scipy.special.sph_harm"] = np.allclose(
    np.asarray(y10).real, math.sqrt(3 / (4 * math.pi)) * math.cos(0.3), atol=1e-5)
f = jax.custom_jvp(lambda v: jnp.sin(v))
f.defjvp(lambda p, t: (jnp.sin(p[0]), 2.0 * t[0]))
out["jax.custom_transforms"] = float(jax.jvp(f, (1.0,), (1.0,))[1]) == 2.0
class Pair:
    def __init__(self, a, b): self.a, self.b = a, b
jax.tree_util.register_pytree_with_keys(
    Pair, lambda p: (((jax.tree_util.GetAttrKey("a"), p.a), (jax.tree_util.GetAttrKey("b"), p.b)), None),
    lambda _, c: Pair(*c))
paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(Pair(1, 2))[0]]
out["jax.tree_util.register_keypaths"] = paths == [".a", ".b"]
s = jax.ShapeDtypeStruct((2, 3), jnp.float32)
out["jax.stages.OutInfo"] = (s.shape, str(s.dtype)) == ((2, 3), "float32")
ref = jax.new_ref(jnp.zeros(3))
out["jax.experimental.mutable_array"] = np.asarray(ref[...]).tolist() == [0.0, 0.0, 0.0]
out["jax.interpreters.partial_eval.trace_to_jaxpr"] = "sin" in str(jax.make_jaxpr(jnp.sin)(1.0))
g = jax.custom_vjp(lambda v: v * 3)
g.defvjp(lambda v: (v * 3, None), lambda _, ct: (ct * 5,))
out["jax.defvjp_all"] = float(jax.grad(g)(1.0)) == 5.0
def scoped(v):
    with jax.named_scope("outer"):
        return v + 1
out["jax.util.extend_name_stack"] = "/outer/add" in jax.jit(scoped).lower(1.0).as_text(
    debug_info=True)
out["jax.xla_computation"] = "func.func" in jax.jit(jnp.sin).lower(x).as_text()
sharding = NamedSharding(mesh, P("i"))
arrays = [jax.device_put(xs[k:k + 1], d) for k, d in enumerate(mesh.devices.flat)]
made = jax.make_array_from_single_device_arrays((8,), sharding, arrays)
out["jax.interpreters.pxla.make_sharded_device_array"] = np.asarray(made).tolist() == xs.tolist()
out["jax.sharding.GSPMDSharding"] = np.asarray(jax.device_put(xs, sharding)).tolist() == xs.tolist()
varying = smap(lambda p: p + lax.pcast(jnp.ones((1,), jnp.float32), "i", to="varying"),
               P("i"), P("i"))(xs)
out["jax.lax.pvary"] = np.asarray(varying).tolist() == (xs + 1).tolist()
print(json.dumps(out))
'''


def test_the_runnable_replacements_do_the_job(tmp_path):
    for name, uses in _USES.items():
        record = names.by_name(name)
        assert record.make is None, name
        assert uses in replacements.named(record.modern), (name, record.modern)
    done = _run(_JOBS, tmp_path)
    assert set(done) == set(_USES)
    assert {n for n, ok in done.items() if not ok} == set()
