"""Any hashable names a pmap's axis, as in classic pmap.

``pmap(f, (0, 0))`` (in_axes given positionally lands in ``axis_name``: the
tuple is the name), an object used as the name in ``lax.psum`` and the other
collectives, ``axis_index``, nested pmaps, and pmaps under jit, grad and
vmap: the values are jax 0.4.30's (``golden/axis_names_jax_0.4.30.json``,
recorded by ``golden/axis_names_classic.py`` from ``_axis_name_cases.py``).
"""
import json
import pathlib

import jax
import numpy as np
import pytest

import pmapkit
from pmapkit.core.rules.primitives import per_device_context
from pmapkit.core.sharding import axis_names

import _axis_name_cases as cases
from _axis_name_cases import X, Name

GOLDEN = pathlib.Path(__file__).parent / "golden" / "axis_names_jax_0.4.30.json"
CLASSIC = json.loads(GOLDEN.read_text())


def test_the_golden_is_classic_jax():
    assert CLASSIC["jax"] == "0.4.30"
    assert set(CLASSIC["cases"]) == {c.__name__ for c in cases.CASES}
    assert set(CLASSIC["pjit_cases"]) == {c.__name__ for c in cases.PJIT_CASES}


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.__name__)
def test_each_case_gives_classic_values(case):
    # The cases were recorded under JAX's default promotion rules.
    with jax.numpy_dtype_promotion("standard"):
        got = json.loads(json.dumps(cases._tolist(case(pmapkit.pmap))))
    assert got == CLASSIC["cases"][case.__name__]


def _body(a):
    return jax.lax.psum(a, Name("shared")) * a


def test_equal_names_are_one_axis_and_share_the_compiled_program():
    first = pmapkit.pmap(_body, Name("shared"))
    np.testing.assert_array_equal(first(X), X * X.sum())
    # Another, equal object: the same parameters, so the same cache entries
    # (a fresh wrapper's first call is a hit), and the same mesh axis.
    second = pmapkit.pmap(_body, Name("shared"))
    assert second._cache_size == 1
    np.testing.assert_array_equal(second(X), X * X.sum())
    assert axis_names.mesh_name(Name("shared")) == axis_names.mesh_name(Name("shared"))
    assert axis_names.mesh_name(Name("other")) != axis_names.mesh_name(Name("shared"))


def test_a_str_name_is_its_own_mesh_axis():
    out = pmapkit.pmap(lambda a: jax.lax.psum(a, "i"), "i")(X)
    assert out.sharding.mesh.axis_names == ("i",)
    assert axis_names.mesh_name("i") == "i"


def test_the_mesh_names_a_hashable_axis_with_a_string():
    # jax 0.10's meshes and PartitionSpecs take strings (a tuple in a
    # PartitionSpec is several axes): the result's sharding names the axis
    # with the one string the name maps to.
    name = ("batch", 0)
    out = pmapkit.pmap(lambda a: a + 1.0, name)(X)
    mesh_axis = axis_names.mesh_name(name)
    assert isinstance(mesh_axis, str)
    assert out.sharding.mesh.axis_names == (mesh_axis,)
    assert out.sharding.spec == jax.sharding.PartitionSpec(mesh_axis)
    assert "sdy.mesh" in pmapkit.pmap(lambda a: a + 1.0, name).lower(X).as_text()


def test_an_unbound_name_is_reported_with_the_users_name():
    with pytest.raises(NameError) as info:
        pmapkit.pmap(lambda a: jax.lax.psum(a, Name("elsewhere")), Name("here"))(X)
    assert "Name('elsewhere')" in str(info.value)


@pytest.mark.parametrize("name", [["a"], {"a": 1}, {1, 2}])
def test_an_unhashable_name_is_a_type_error_naming_axis_name(name):
    # Refused when the wrapper is made, before any call (classic pmap's
    # hashing raised the same TypeError at the call).
    with pytest.raises(TypeError, match=f"pmap axis_name must be hashable.*of type "
                       f"{type(name).__name__}"):
        pmapkit.pmap(lambda a: a, name)


def test_an_empty_str_name_is_still_refused():
    with pytest.raises(ValueError, match="non-empty"):
        pmapkit.pmap(lambda a: a, "")


def test_renaming_reaches_nested_jaxprs_and_effects():
    # The lowering renames every use of the name: a jit's, a scan's and
    # a cond's bodies, and the named-axis effects.
    n = Name("deep")

    def body(a):
        inner = jax.jit(lambda v: jax.lax.psum(v, n))
        # (every device takes the same branch: its collective runs on all)
        c = jax.lax.cond(jax.lax.psum(a, n) > 3, lambda v: jax.lax.pmax(v, n),
                         lambda v: v, a)
        return inner(a) + jax.lax.scan(lambda c, _: (c + jax.lax.axis_index(n).astype(c.dtype), None),
                                       c, None, length=2)[0]

    with per_device_context(n, 8):
        closed = jax.make_jaxpr(body)(np.float32(1.0))
    mesh_axis = axis_names.mesh_name(n)
    renamed = axis_names.renamed(closed, {n: mesh_axis})
    text = str(renamed)
    assert "Name('deep')" in str(closed) and "Name('deep')" not in text
    assert mesh_axis in text
    out = pmapkit.pmap(body, n)(X)
    want = X.sum() + X.max() + 2 * np.arange(8)
    np.testing.assert_array_equal(out, want.astype(np.float32))


def test_a_pjit_inside_the_body_resolves_the_name():
    n = Name("outer pmap")
    inner = pmapkit.pjit(lambda a: jax.lax.psum(a, n) * 2)
    out = pmapkit.pmap(lambda a: inner(a) + jax.lax.axis_index(n).astype(a.dtype), n)(X)
    np.testing.assert_array_equal(out, 2 * X.sum() + np.arange(8, dtype=np.float32))


def test_host_callbacks_inside_a_body_named_by_an_object():
    from pmapkit import host_callback as hcb
    n = Name("taps")
    seen = []

    def body(a):
        total = hcb.id_tap(lambda v, _: seen.append(float(v)), jax.lax.psum(a, n))
        return hcb.call(lambda v: np.asarray(v) + 1, total,
                        result_shape=jax.ShapeDtypeStruct((), np.float32))
    out = pmapkit.pmap(body, n)(X)
    hcb.barrier_wait()
    np.testing.assert_array_equal(out, np.full(8, X.sum() + 1, np.float32))
    assert seen == [float(X.sum())] * 8


def test_the_name_survives_pickling():
    f = pmapkit.pmap(_body, Name("shared"))
    import pickle
    g = pickle.loads(pickle.dumps(f))
    np.testing.assert_array_equal(g(X), X * X.sum())


def test_a_mesh_refuses_an_unhashable_or_tuple_name():
    for bad in (["x"], ("a", "b")):
        with pytest.raises(TypeError, match="Mesh axis_names must be hashable and not tuples"):
            pmapkit.Mesh(np.array(jax.devices()), (bad,))


def test_a_mesh_axis_named_by_an_object_has_its_string():
    mesh = pmapkit.Mesh(np.array(jax.devices()), (Name("m"),))
    assert mesh.axis_names == (axis_names.mesh_name(Name("m")),)
    assert axis_names.shown(mesh.axis_names[0]) == Name("m")


@pytest.mark.parametrize("case", cases.PJIT_CASES, ids=lambda c: c.__name__)
def test_pjit_meshes_and_specs_name_axes_with_hashables_as_classic(case):
    # Classic meshes and PartitionSpecs took any hashable but a tuple (which
    # groups axes); pjit's values and layouts are jax 0.4.30's.
    got = json.loads(json.dumps(cases._tolist(case(
        pmapkit.pjit, pmapkit.Mesh, pmapkit.with_sharding_constraint, jax.devices()))))
    assert got == CLASSIC["pjit_cases"][case.__name__]
