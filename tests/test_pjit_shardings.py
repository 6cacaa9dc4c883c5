"""0.4-era pjit: ``Sharding`` objects as in/out_axis_resources, no mesh
context needed, and that release's messages.

In jax 0.4.x a ``Sharding`` (NamedSharding, SingleDeviceSharding, ...)
carries its devices, so ``pjit(f, in_axis_resources=NamedSharding(mesh,
P('x')))`` ran outside any ``with mesh:``, and so did pjit with omitted
specs on committed ``jax.Array``s. Results are checked against ``jax.jit``
given the same shardings (values and shardings); messages against the texts
0.3/0.4 releases raised, with the regexes their own tests used.
"""
import operator
import pickle
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit._jax_private import _sharding_impls

DEVICES = jax.devices()
# pmapkit.Mesh is a jax.sharding.Mesh; it is also pjit's (undeprecated) context.
MESH = pmapkit.Mesh(np.array(DEVICES).reshape(2, 4), ("x", "y"))
HALF = Mesh(np.array(DEVICES[:4]).reshape(2, 2), ("x", "y"))


def ns(spec, mesh=MESH):
    return NamedSharding(mesh, spec)


def farange(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


def same(ours, ref):
    for o, r in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(r))
        assert o.sharding == r.sharding, (o.sharding, r.sharding)


def spec_regex(s):
    """How classic pjit tests put a spec into a regex."""
    return str(s).replace("(", r"\(").replace(")", r"\)")


# ------------------------------------------------------------ no mesh context --

def test_named_sharding_needs_no_mesh_context():
    f = lambda a: a * 2  # noqa: E731
    ours = pmapkit.pjit(f, in_axis_resources=ns(P("x")),
                        out_axis_resources=ns(P("y")))(farange(8, 4))
    ref = jax.jit(f, in_shardings=ns(P("x")), out_shardings=ns(P("y")))(farange(8, 4))
    same(ours, ref)


def test_pytree_prefixes_of_shardings():
    def f(a, b):
        return {"s": a + b["w"], "t": b["v"]}

    x, w, v = farange(8, 4), farange(8, 4), farange(4)
    ours = pmapkit.pjit(f, in_axis_resources=(ns(P("x")), {"w": ns(P(None, "y")), "v": None}),
                        out_axis_resources={"s": ns(P("x", "y")), "t": None})(
                            x, {"w": w, "v": v})
    ref = jax.jit(f, in_shardings=(ns(P("x")), {"w": ns(P(None, "y")), "v": ns(P())}),
                  out_shardings={"s": ns(P("x", "y")), "t": ns(P())})(x, {"w": w, "v": v})
    same(ours, ref)


def test_modern_spelling_and_a_list_prefix():
    f = lambda a, b: a - b  # noqa: E731
    ours = pmapkit.pjit(f, in_shardings=[ns(P("x")), ns(P())], out_shardings=ns(P("x")))(
        farange(8), farange(8))
    ref = jax.jit(f, in_shardings=(ns(P("x")), ns(P())), out_shardings=ns(P("x")))(
        farange(8), farange(8))
    same(ours, ref)


def test_single_device_sharding():
    d = DEVICES[3]
    f = lambda a: a + 1  # noqa: E731
    ours = pmapkit.pjit(f, in_axis_resources=SingleDeviceSharding(d),
                        out_axis_resources=SingleDeviceSharding(d))(farange(8))
    ref = jax.jit(f, in_shardings=SingleDeviceSharding(d),
                  out_shardings=SingleDeviceSharding(d))(farange(8))
    same(ours, ref)
    assert ours.sharding == SingleDeviceSharding(d)
    # outputs left to the partitioner are on that device too, as with jax.jit
    out = pmapkit.pjit(f, in_axis_resources=SingleDeviceSharding(d))(farange(8))
    assert out.sharding == SingleDeviceSharding(d)


def test_a_replicated_sharding_of_another_kind():
    repl = _sharding_impls.GSPMDSharding.get_replicated(tuple(MESH.devices.flat))
    ours = pmapkit.pjit(lambda a: a * 3, in_axis_resources=repl,
                        out_axis_resources=ns(P("x")))(farange(8))
    np.testing.assert_array_equal(np.asarray(ours), farange(8) * 3)
    assert ours.sharding == ns(P("x"))


def test_a_partitioned_sharding_pjit_cannot_express_is_refused():
    hlo = ns(P("x"))._to_xla_hlo_sharding(1)
    odd = _sharding_impls.GSPMDSharding(tuple(MESH.devices.flat), hlo)
    with pytest.raises(TypeError, match="in_axis_resources leaf specifications are "
                       "expected to be PartitionSpec instances, None, a NamedSharding or "
                       "a SingleDeviceSharding"):
        pmapkit.pjit(lambda a: a, in_axis_resources=odd)


@pytest.mark.parametrize("sharding", [ns(P("x", "y")), SingleDeviceSharding(DEVICES[2])],
                         ids=["named", "single_device"])
def test_omitted_specs_on_committed_arrays_outside_any_mesh(sharding):
    a = jax.device_put(farange(8, 4), sharding)
    f = lambda v: v * 3  # noqa: E731
    ours = pmapkit.pjit(f)(a)
    ref = jax.jit(f)(a)
    same(ours, ref)


def test_shardings_and_a_mesh_context_together():
    with MESH:
        ours = pmapkit.pjit(lambda a, b: a + b, in_axis_resources=(ns(P("x")), P("y")),
                            out_axis_resources=P("x", "y"))(farange(8, 4), farange(8, 4))
    assert ours.sharding == ns(P("x", "y"))
    np.testing.assert_array_equal(np.asarray(ours), 2 * farange(8, 4))


def test_committed_arrays_laid_out_otherwise_than_a_given_sharding_are_refused():
    # As 0.4 pjit and jax.jit: a NamedSharding given is where a committed
    # argument must be; a PartitionSpec (the seed's pjit) repartitions it.
    a = jax.device_put(farange(8, 4), ns(P("y")))
    with pytest.raises(ValueError, match="Sharding passed to jit does not match"):
        jax.jit(lambda v: v + 1, in_shardings=ns(P("x")), out_shardings=ns(P("x")))(a)
    with pytest.raises(ValueError, match="Sharding passed to pjit does not match"):
        pmapkit.pjit(lambda v: v + 1, ns(P("x")), ns(P("x")))(a)
    with pmapkit.Mesh(ns(P()).mesh.devices, ns(P()).mesh.axis_names):
        ours = pmapkit.pjit(lambda v: v + 1, P("x"), P("x"))(a)
    assert ours.sharding == ns(P("x"))
    np.testing.assert_array_equal(np.asarray(ours), farange(8, 4) + 1)


# ------------------------------------------------------- 0.4-era messages --

def test_committed_array_on_other_devices_miss_and_hit_path():
    f = pmapkit.pjit(lambda v: v * 2, ns(P("x")), None)
    elsewhere = jax.device_put(farange(8), DEVICES[5])
    classic = (r"Pjit's devices and Array's devices should be equal. Got Pjit's device "
               r"ids \[0, 1, 2, 3, 4, 5, 6, 7\] on platform CPU and Array's device ids "
               r"\[5\] on platform CPU")
    with pytest.raises(ValueError, match=classic + r" \(argument 'v' \(positional "
                       r"argument 0\) of <lambda> is committed there"):
        f(elsewhere)
    # Compiled for host data, the signature's entry refuses it too.
    np.testing.assert_array_equal(np.asarray(f(farange(8))), farange(8) * 2)
    assert f._cache_size == 1
    with pytest.raises(ValueError, match=classic):
        f(elsewhere)
    np.testing.assert_array_equal(np.asarray(f(farange(8))), farange(8) * 2)


def test_committed_array_on_other_devices_under_a_mesh_with_omitted_specs():
    other = jax.device_put(farange(8, 4), ns(P("x"), HALF))
    with MESH, pytest.raises(ValueError, match=r"Pjit's devices and Array's devices "
                             r"should be equal. Got Pjit's device ids \[0, 1, 2, 3, 4, 5, "
                             r"6, 7\] on platform CPU and Array's device ids \[0, 1, 2, 3\]"):
        pmapkit.pjit(lambda v: v)(other)


def test_committed_arguments_on_different_devices_without_a_mesh():
    # 0.3.25 / 0.4.2 pjit_test test_pjit_committed_array_different_devices.
    a = jax.device_put(np.array([1, 2, 3]), DEVICES[0])
    b = jax.device_put(np.array([4, 5, 6]), DEVICES[1])
    with pytest.raises(ValueError, match=(
            r"Devices of all `Array` inputs and outputs should be the same. Got array "
            r"device ids \[0\] on platform CPU and another array's device ids \[1\] "
            r"on platform CPU \(argument 'y' \(positional argument 1\)")):
        pmapkit.pjit(lambda x, y: (x, y))(a, b)
    # On one device they run where they are.
    x, y = pmapkit.pjit(lambda x, y: (x, y))(a, jax.device_put(b, DEVICES[0]))
    assert x.sharding.device_set == y.sharding.device_set == {DEVICES[0]}


def test_shardings_over_different_devices():
    f = pmapkit.pjit(lambda a, b: (a, b), in_axis_resources=ns(P("x"), HALF),
                     out_axis_resources=ns(P("x")))
    with pytest.raises(ValueError, match=r"Received incompatible devices for pjitted "
                       r"computation \(Pjit's devices and Array's devices should be "
                       r"equal\). Got in_axis_resources of argument 'a' \(positional "
                       r"argument 0\) with device ids \[0, 1, 2, 3\] on platform CPU and "
                       r"out_axis_resources of output 0 with device ids \[0, 1, 2, 3, 4, "
                       r"5, 6, 7\] on platform CPU"):
        f(farange(8), farange(8))


def test_indivisible_dimension_with_a_named_sharding():
    s = ns(P("x", None))
    f = pmapkit.pjit(lambda v: v, in_axis_resources=s, out_axis_resources=None)
    # jax 0.4.1's pjit_test regex, and the full text
    error = re.compile(r"One of pjit arguments.*" + spec_regex(P("x", None)) + r".*"
                       r"implies that the size of its dimension 0 should be "
                       r"divisible by 2, but it is equal to 3 \(full shape: \(3, 2\)\)",
                       re.M | re.S)
    with pytest.raises(ValueError, match=error) as info:
        f(farange(3, 2))
    assert str(info.value).startswith(f"One of pjit arguments was given the sharding of {s}, "
                                      "which implies that the size of its dimension 0 ")


@pytest.mark.parametrize("what", ["in", "out"])
def test_indivisible_dimension_with_a_spec_classic_regex(what):
    spec = P(("x", "y"), None)
    f = (pmapkit.pjit(lambda v: v, spec, None) if what == "in"
         else pmapkit.pjit(lambda v: v, None, spec))
    error = re.compile(r"One of pjit " + ("arguments" if what == "in" else "outputs") +
                       r".*" + spec_regex(spec) + r".*implies that the size of its "
                       r"dimension 0 should be divisible by 8, but it is equal to 3 "
                       r"\(full shape: \(3, 2\)\)", re.M | re.S)
    with MESH, pytest.raises(ValueError, match=error):
        f(farange(3, 2))


def test_rank_too_small_for_a_named_sharding():
    s = ns(P("x", "y"))
    with pytest.raises(ValueError, match=re.escape(
            f"One of pjit arguments is incompatible with its sharding annotation {s}: "
            f"Sharding {s} is only valid for values of rank at least 2, but was "
            "applied to a value of rank 1")):
        pmapkit.pjit(lambda v: v.sum(), s, None)(farange(8))


@pytest.mark.parametrize("where", ["args", "outs", "constraint"])
def test_undefined_resource_axis_both_classic_regexes(where):
    spec = P(("x", "y"),)
    if where == "args":
        f, what = pmapkit.pjit(lambda v: v, spec, None), "pjit arguments"
    elif where == "outs":
        f, what = pmapkit.pjit(lambda v: v, None, spec), "pjit outputs"
    else:
        f = pmapkit.pjit(lambda v: pmapkit.with_sharding_constraint(v, spec), None, None)
        what = "with_sharding_constraint arguments"
    with pmapkit.Mesh(np.array(DEVICES[:1]).reshape(1, 1), ("z", "w")):
        with pytest.raises(ValueError) as info:
            f(jnp.ones((2, 2)))
    msg = str(info.value)
    # jax >= 0.3.17 (through 0.4.x) and jax 0.3.14's tests, respectively
    assert re.search(r"Resource axis: x of.*" + spec_regex(spec) + " is undefined", msg), msg
    assert re.search(r"One of " + what + r".*" + spec_regex(spec) + r", but resource axis "
                     r"x is undefined.", msg), msg
    # The classic notation first (classic programs look for "PartitionSpec("),
    # then JAX 0.10's, which the regexes above, built with str(spec), find.
    assert msg.startswith("Resource axis: x of PartitionSpec(('x', 'y'),) is undefined. "), msg
    assert "\n(as JAX 0.10 writes the spec) Resource axis: x of P(('x', 'y'),) is " \
        "undefined. " in msg, msg


@pytest.mark.parametrize("api", ["pjit_given", "pjit_omitted", "pmap"])
def test_deleted_input_miss_and_hit_path(api):
    if api == "pjit_given":
        f = pmapkit.pjit(lambda v: v + 1, ns(P("x")), None)
        make = lambda: jax.device_put(farange(8), ns(P("x")))  # noqa: E731
    elif api == "pjit_omitted":
        f = pmapkit.pjit(lambda v: v + 1)
        make = lambda: jax.device_put(farange(8), ns(P("x")))  # noqa: E731
    else:
        f = pmapkit.pmap(lambda v: v + 1)
        make = lambda: jax.pmap(lambda v: v)(farange(8))  # noqa: E731
    gone = make()
    gone.delete()
    for _ in range(2):    # a miss, then the failed signature's entry
        with pytest.raises(RuntimeError, match=r"Array has been deleted with "
                           r"shape=float32\[8\]"):
            f(gone)
    np.testing.assert_array_equal(np.asarray(f(make())), farange(8) + 1)
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        f(gone)   # a hit-path signature now


def test_aot_pytree_mismatch_classic_message():
    # jax 0.4.20's testLowerCompileInTreeMismatch
    with MESH:
        f = pmapkit.pjit(lambda x, y: x @ y, in_axis_resources=P(("x", "y"),),
                         out_axis_resources=P(("x", "y"),))
        x = jnp.arange(64.0).reshape(8, 8)
        exe = f.lower(x, x + 1).compile()
    with pytest.raises(TypeError, match="function compiled for .*, called with .*"):
        exe([x], [x + 1])


@pytest.mark.parametrize("leaf", [ns(P("x")), SingleDeviceSharding(DEVICES[2]), None],
                         ids=["named", "single_device", "prefix_with_none"])
def test_pickles_with_sharding_leaves(leaf):
    if leaf is None:
        f = pmapkit.pjit(operator.add, in_axis_resources=(ns(P("x")), None),
                         out_axis_resources=ns(P()))
        args = (farange(8), farange(8))
    else:
        f = pmapkit.pjit(operator.neg, leaf, leaf)
        args = (farange(8),)
    g = pickle.loads(pickle.dumps(f))
    same(g(*args), f(*args))
