"""Classic behaviour where jax 0.10 drifted, held to jax 0.4.30's own
(``golden/drift_jax_0.4.30.json``, recorded by ``golden/drift_classic.py``):
pjit under ``jax.disable_jit()`` runs its body eagerly; a spec-less pjit's
compiled results are uncommitted like its call's; a Python int out of range
and a big-endian array are refused naming the argument, with classic words.
"""
import json
import pathlib

import numpy as np
import pytest

import jax

import pmapkit

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden"
                     / "drift_jax_0.4.30.json").read_text())


def value_dependent(x):
    if x.sum() > 0:
        return x + 1, type(x).__name__
    return x - 1, type(x).__name__


def test_pjit_under_disable_jit_runs_eagerly():
    f = pmapkit.pjit(value_dependent)
    plain = pmapkit.pjit(lambda v: v + 1)
    plain(np.ones(3, np.float32))  # compiled first: the disabled context is another
    with jax.disable_jit():
        assert type(plain(np.ones(3, np.float32))) is np.ndarray  # eager, on numpy
        got = [f(np.ones(3, np.float32)), f(-np.ones(3, np.float32))]
        with pmapkit.Mesh(np.array(jax.devices()), ("x",)):
            g = pmapkit.pjit(lambda x: x * 2 if x.sum() > 0 else x,
                             in_axis_resources=pmapkit.PartitionSpec("x"),
                             out_axis_resources=pmapkit.PartitionSpec("x"))
            np.testing.assert_array_equal(g(np.arange(8.0)), np.arange(8.0) * 2)
    assert [[v.tolist(), t] for v, t in got] == GOLDEN["disable_jit"]
    # Outside it the wrapper runs compiled again.
    assert isinstance(plain(np.ones(3, np.float32)), jax.Array)


def test_compiled_specless_pjit_results_are_uncommitted():
    x = np.ones(4, np.float32)
    compiled = pmapkit.pjit(lambda v: v + 1).lower(x).compile()
    assert [compiled(x)._committed for _ in range(2)] == GOLDEN["aot_committed"]
    assert pmapkit.pjit(lambda v: v + 1)(x)._committed == GOLDEN["call_committed"]
    # Uncommitted: it joins an array committed to another device (classic).
    other = jax.device_put(x, jax.devices()[3])
    assert (compiled(x) + other).devices() == {jax.devices()[3]}
    # Whatever the input's placement (classic's compiled object: uncommitted).
    assert not compiled(jax.device_put(x, jax.devices()[0]))._committed


@pytest.mark.parametrize("api", ["pjit", "pmap"])
def test_python_int_too_large_names_the_argument(api):
    if api == "pjit":
        f = pmapkit.pjit(lambda v, big: v + big)
        v = np.ones(2, np.int32)
    else:
        f = pmapkit.pmap(lambda v, big: v + big, in_axes=(0, None))
        v = np.ones((8, 2), np.int32)
    golden = GOLDEN["big_int"]
    for warm in (False, True):  # the miss path, then the hit path
        if warm:
            f(v, 3)
        with pytest.raises(OverflowError) as err:
            f(v, 2 ** 40)
        assert type(err.value).__name__ == golden["type"]
        message = str(err.value)
        assert "argument 'big'" in message and "int32" in message, message
        assert golden["message"].rsplit(" is ", 1)[0] in message, message


@pytest.mark.parametrize("api", ["pjit", "pmap"])
def test_big_endian_array_names_the_argument(api):
    f = pmapkit.pjit(lambda v: v + 1) if api == "pjit" else pmapkit.pmap(lambda v: v + 1)
    golden = GOLDEN["big_endian"]
    with pytest.raises(TypeError) as err:
        f(np.ones((8, 2), ">f4"))
    message = str(err.value)
    assert golden["message"] in message, message
    assert "argument 'v'" in message and "native byte order" in message, message


def _placed(out):
    return {"sharding": type(out.sharding).__name__,
            "devices": sorted(d.id for d in out.sharding.device_set),
            "committed": out._committed, "values": np.asarray(out).ravel().tolist()}


def test_pjit_moves_a_pmap_output_as_classic_pjit_did():
    golden = GOLDEN["pmap_output"]
    pm = pmapkit.pmap(lambda v: v * 2)(np.arange(8.0, dtype=np.float32).reshape(8, 1))
    add = pmapkit.pjit(lambda v: v + 1)
    for _ in range(2):  # the miss path, then the hit path
        assert _placed(add(pm)) == golden["no_mesh"]
    one = pmapkit.pmap(lambda v: v, devices=jax.devices()[3:4])(np.ones((1, 2), np.float32))
    assert _placed(add(one)) == golden["one_device_pmap"]
    beside = jax.device_put(np.ones((8, 1), np.float32), jax.devices()[2])
    assert _placed(pmapkit.pjit(lambda v, w: v + w)(pm, beside)) == golden["beside_committed"]
    P = pmapkit.PartitionSpec
    with pmapkit.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b")):
        onto = pmapkit.pjit(lambda v: v + 1, in_axis_resources=P("a"), out_axis_resources=P("a"))
        assert _placed(onto(pm)) == golden["onto_mesh"]
    # An equal sharding of the caller's own is not a pmap's: the array stays.
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    pmapkit.pmap(lambda v: v, axis_name="x")(np.ones((8, 1), np.float32))
    own = jax.device_put(np.ones((8, 1), np.float32),
                         jax.sharding.NamedSharding(mesh, P("x")))
    assert add(own).sharding.device_set == set(jax.devices())


@pytest.mark.parametrize("what", ["in_shardings", "out_shardings"])
def test_a_pmap_sharding_is_not_a_pjit_sharding(what):
    pm = pmapkit.pmap(lambda v: v * 2)(np.ones((8, 1), np.float32))
    golden = GOLDEN["pmap_sharding_given"][what]
    with pytest.raises(ValueError) as err:
        pmapkit.pjit(lambda v: v, **{what: pm.sharding})
    assert type(err.value).__name__ == golden["type"]
    head = golden["message"].split(" PmapSharding(")[0]
    assert str(err.value).startswith(head) and "not allowed" in str(err.value)
