"""One module, three vintages of the export API: the seed's jax2tf
``jax_export``, the 0.4.2x ``jax.experimental.export`` and ``jax.export``.

Each vintage's script body runs against ``pmapkit.export`` bound to the
name the old script imported (``jax_export``, ``export``); the jax.export
body runs against ``jax.export`` itself and ``pmapkit.export`` and must
observe the same values."""
import collections
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

import pmapkit
from pmapkit import PartitionSpec as P
from pmapkit import export as pe

from _export_helpers import N, assert_tree_close, pmapkit_checks, sds, values

# The names each vintage's module had, all on pmapkit.export (docs/export.md's table).
VINTAGE_NAMES = {
    "jax.experimental.jax2tf.jax_export": [
        "Exported", "export", "call_exported", "poly_spec", "poly_specs",
        "default_lowering_platform", "shape_and_dtype_jax_array"],
    "jax.experimental.export": [
        "Exported", "export", "call", "call_exported", "DisabledSafetyCheck",
        "default_lowering_platform", "args_specs", "symbolic_shape",
        "symbolic_args_specs", "is_symbolic_dim", "SymbolicScope", "serialize",
        "deserialize", "minimum_supported_serialization_version",
        "maximum_supported_serialization_version"],
    "jax.export": list(jax_export.__all__),
}


@pytest.mark.parametrize("vintage", sorted(VINTAGE_NAMES))
def test_every_vintage_name_is_there(vintage):
    missing = [n for n in VINTAGE_NAMES[vintage] if not hasattr(pe, n)]
    assert not missing, f"pmapkit.export lacks {vintage} names {missing}"
    assert set(VINTAGE_NAMES[vintage]) <= set(pe.__all__)


def test_version_ranges_are_jax_exports():
    assert pe.minimum_supported_serialization_version == \
        pe.minimum_supported_calling_convention_version == \
        jax_export.minimum_supported_calling_convention_version
    assert pe.maximum_supported_serialization_version == \
        pe.maximum_supported_calling_convention_version == \
        jax_export.maximum_supported_calling_convention_version
    assert pe.default_lowering_platform() == pe.default_export_platform() == \
        jax_export.default_export_platform()


# -- the seed: jax.experimental.jax2tf.jax_export ------------------------------
def test_seed_jax_export_script():
    jax_export_module = pe   # from jax.experimental.jax2tf import jax_export

    def f(x, unused):
        return jnp.sin(x) * 2

    exp = jax_export_module.export(f, lowering_platform="cpu", strict_checks=True)(
        sds((4, 3)), sds((2,), jnp.int32))
    assert isinstance(exp, jax_export_module.Exported)
    assert exp.lowering_platform == "cpu" == jax_export_module.default_lowering_platform()
    assert exp.strict_checks is True
    assert exp.module_kept_var_idx == (0,)
    assert len(exp.in_shardings) == 1          # the kept inputs only, as the seed's
    assert len(exp.in_shardings_hlo) == 2      # every input (later vintages)
    assert exp.module_uses_dim_vars is False
    assert exp.xla_call_module_version == exp.calling_convention_version
    x = values((4, 3))
    out = jax_export_module.call_exported(exp)(x, np.zeros(2, np.int32))
    assert_tree_close(out, np.sin(x) * 2, tol=1e-6)
    assert isinstance(exp.vjp(), pe.Exported)

    spec = jax_export_module.poly_spec((None, 3), np.float32, "b, 3")
    poly = jax_export_module.export(lambda x: x.sum(0))(spec)
    assert poly.module_uses_dim_vars is True
    assert_tree_close(jax_export_module.call_exported(poly)(x), x.sum(0), tol=1e-6)
    specs = jax_export_module.poly_specs((x, np.zeros(5, np.int32)), ["b, ...", None])
    assert str(specs[0].shape[0]) == "b" and specs[1].shape == (5,)
    assert jax_export_module.shape_and_dtype_jax_array(x) == ((4, 3), np.float32)

    relaxed = jax_export_module.export(jnp.cos, lowering_platform="tpu",
                                       strict_checks=False)(sds((2,)))
    assert relaxed.strict_checks is False and relaxed.lowering_platform == "tpu"
    assert_tree_close(jax_export_module.call_exported(relaxed)(np.zeros(2, np.float32)),
                      np.ones(2, np.float32))


# -- 0.4.2x: jax.experimental.export ----------------------------------------------
def test_jax_experimental_export_script():
    export = pe   # from jax.experimental import export

    def f(x):
        return jnp.tanh(x) * 3

    x = values((5, 2))
    (spec,) = export.symbolic_args_specs((x,), "b, ...")
    assert export.is_symbolic_dim(spec.shape[0])
    platform = export.DisabledSafetyCheck.platform()
    exp = export.export(f, lowering_platforms=("cpu",), disabled_checks=[platform])(spec)
    assert exp.lowering_platforms == ("cpu",)
    assert exp.disabled_safety_checks == (platform,)
    assert exp.strict_checks is False
    assert exp.uses_shape_polymorphism is True
    assert exp.ordered_effects == () and exp.unordered_effects == ()
    assert (export.minimum_supported_serialization_version
            <= exp.mlir_module_serialization_version
            <= export.maximum_supported_serialization_version)
    blob = export.serialize(exp, vjp_order=1)
    loaded = export.deserialize(bytearray(blob))
    run = export.call(loaded)
    assert_tree_close(run(x), np.tanh(x) * 3, tol=1e-6)
    grad = jax.grad(lambda x: run(x).sum())(x)
    assert_tree_close(grad, 3 * (1 - np.tanh(x) ** 2), tol=1e-5)
    assert_tree_close(jax.jit(run)(x[:2]), np.tanh(x[:2]) * 3, tol=1e-6)

    with pytest.warns(DeprecationWarning, match="symbolic_args_specs"):
        (old,) = export.args_specs((x,), "c, ...")
    assert str(old.shape[0]) == "c"
    scope = export.SymbolicScope(("d >= 4",))
    (bounded,) = export.symbolic_args_specs((x,), "d, ...", scope=scope)
    assert bounded.shape[0].scope is scope


def test_shape_assertions_check_is_accepted_and_has_no_effect():
    with pytest.warns(DeprecationWarning, match="no effect"):
        check = pe.DisabledSafetyCheck.shape_assertions()
    assert isinstance(check, jax_export.DisabledSafetyCheck)
    assert pe.DisabledSafetyCheck.platform() == jax_export.DisabledSafetyCheck.platform()
    exp = pe.export(jnp.sin, disabled_checks=[check])(sds((3,)))
    assert exp.disabled_safety_checks == () and exp.strict_checks is True
    assert pe.deserialize(pe.serialize(exp)).strict_checks is True


def test_symbolic_args_specs_errors():
    x = values((5, 2))
    with pytest.raises(ValueError, match="cannot use both 'scope' and 'constraints'"):
        pe.symbolic_args_specs((x,), "b, ...", constraints=("b >= 2",),
                               scope=pe.SymbolicScope())
    with pytest.raises(ValueError, match=r"'b' has rank 1 but arg_shape \(5, 2\) has rank 2"):
        pe.symbolic_args_specs((x,), "b")   # jax.export would take it
    with pytest.raises(ValueError, match="symbolic_args_specs shapes_specs"):
        pe.symbolic_args_specs((x, x), ("a", "b", "c"))
    with pytest.raises(TypeError, match="symbolic_args_specs: the leaves of 'shapes_specs' "
                                        "must be str or None"):
        pe.symbolic_args_specs((x,), (3,))


# -- jax.export: the same body against jax.export and pmapkit.export --------------
def _jax_export_body(mod):
    """A jax.export-era script; returns what it observed."""
    f = jax.jit(lambda x, *, y: {"s": jnp.sin(x) + y, "n": x.shape[0] * jnp.ones(())})
    x = values((6, 3))
    (spec,) = mod.symbolic_args_specs((x,), "b, ...")
    exp = mod.export(f, platforms=["cpu"],
                     disabled_checks=[mod.DisabledSafetyCheck.custom_call("nothing")])(
        spec, y=jax.ShapeDtypeStruct((), np.float32))
    plain = mod.export(jax.jit(jnp.cos))(x)   # concrete arguments as specs
    loaded = mod.deserialize(exp.serialize(vjp_order=1))
    y = np.float32(0.5)
    return {
        "fun_name": exp.fun_name,
        "platforms": exp.platforms,
        "in_avals": str(exp.in_avals), "out_avals": str(exp.out_avals),
        "in_tree": exp.in_tree, "out_tree": exp.out_tree,
        "nr_devices": exp.nr_devices,
        "version_ok": (mod.minimum_supported_calling_convention_version
                       <= exp.calling_convention_version
                       <= mod.maximum_supported_calling_convention_version),
        "uses_global_constants": exp.uses_global_constants,
        "disabled": tuple(map(str, exp.disabled_safety_checks)),
        "kept": exp.module_kept_var_idx,
        "in_shardings_hlo": exp.in_shardings_hlo,
        "in_shardings_jax": exp.in_shardings_jax(None),
        "has_vjp": loaded.has_vjp(),
        "default": mod.default_export_platform(),
        "call": loaded.call(x, y=y),
        "call_fewer_rows": loaded.call(x[:2], y=y),
        "jit_call": jax.jit(loaded.call)(x, y=y),
        "grad": jax.grad(lambda x: loaded.call(x, y=y)["s"].sum())(x),
        "plain": plain.call(x),
        "plain_in_avals": str(plain.in_avals),
    }


def test_jax_export_script_same_as_jax():
    theirs = _jax_export_body(jax_export)
    ours = _jax_export_body(pe)
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        if key in ("call", "call_fewer_rows", "jit_call", "grad", "plain"):
            assert_tree_close(ours[key], value, tol=1e-6)
        else:
            assert ours[key] == value, key
    assert theirs["version_ok"] and theirs["uses_global_constants"]


def test_registered_pytrees_serialize_through_the_container():
    Point = collections.namedtuple("Point", ["x", "y"])
    pe.register_namedtuple_serialization(Point, serialized_name="pmapkit_tests.Point")
    exp = pe.export(jax.jit(lambda p: Point(p.y, p.x)))(Point(sds((2,)), sds((3,))))
    loaded = pe.deserialize(pe.serialize(exp))
    out = loaded.call(Point(values((2,)), values((3,), seed=1)))
    assert isinstance(out, Point) and out.x.shape == (3,) and out.y.shape == (2,)


# -- every vintage, for plain, pmap and pjit functions -----------------------------
def _seed(fun, specs):
    exp = pe.export(fun, lowering_platform="cpu", strict_checks=True)(*specs)
    return pe.call_exported(pe.deserialize(pe.serialize(exp)))


def _experimental(fun, specs):
    exp = pe.export(fun, lowering_platforms=["cpu"], disabled_checks=())(*specs)
    return pe.call(pe.deserialize(pe.serialize(exp, vjp_order=1)))


def _modern(fun, specs):
    exp = pe.export(fun, platforms=["cpu"], disabled_checks=[])(*specs)
    return pe.deserialize(exp.serialize()).call


VINTAGES = {"jax_export": _seed, "jax.experimental.export": _experimental,
            "jax.export": _modern}


def _normalize(x):
    return x / jax.lax.psum(x, "i")


@pytest.mark.parametrize("kind", ["plain", "pmap", "pjit"])
@pytest.mark.parametrize("vintage", sorted(VINTAGES))
def test_every_vintage_exports_plain_pmap_and_pjit(vintage, kind):
    make = VINTAGES[vintage]
    if kind == "plain":
        body = lambda x: jnp.tanh(x) + 1  # noqa: E731
        fun = jax.jit(body) if vintage == "jax.export" else body
        x = values((N, 3))
        run = make(fun, (sds((N, 3)),))
        want, devices = np.tanh(x) + 1, 1
    elif kind == "pmap":
        fun = pmapkit.pmap(_normalize, axis_name="i")
        x = values((N, 3)) + 2
        with pmapkit_checks():
            run = make(fun, (sds((N, 3)),))
        want, devices = x / x.sum(0), N
    else:
        fun = pmapkit.pjit(lambda x: jnp.tanh(x) * 2, in_axis_resources=P("x"),
                           out_axis_resources=P("x"))
        mesh = pmapkit.Mesh(np.array(jax.devices()), ("x",))
        x = values((N, 3))
        with mesh, pmapkit_checks():
            run = make(fun, (sds((N, 3)),))
        want, devices = np.tanh(x) * 2, N
    # A multi-device artifact runs where its inputs are: here on a mesh.
    with pmapkit.Mesh(np.array(jax.devices()[:devices]), ("i",)):
        got = run(x)
    assert_tree_close(got, want, tol=1e-5)
    assert len(got.sharding.device_set) == devices


def test_no_warnings_from_the_vintage_names():
    # The 0.4.30 jax.experimental.export warned on every name; pmapkit serves
    # them as supported names (only the deprecated args_specs and
    # shape_assertions warn, as they did in their own vintage).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exp = pe.export(jnp.sin, lowering_platforms=["cpu"])(sds((2,)))
        assert exp.lowering_platforms == ("cpu",)
        assert exp.uses_shape_polymorphism is False
        assert exp.mlir_module_serialization_version == exp.calling_convention_version
        pe.call(exp)(np.zeros(2, np.float32))


def test_shape_poly_errors_point_where_each_vintage_pointed():
    # Called as the earlier vintages called (module-level call / call_exported),
    # jax2tf's README, as in their tests; as exp.call (jax.export), its docs.
    exp = pe.export(jax.jit(lambda x: x.sum(0)))(
        jax.ShapeDtypeStruct(pe.symbolic_shape("(a + 2*b, a)"), np.float32))
    bad = np.zeros((2, 2), np.float32)   # b = 0: "Expected value >= 1"
    start = ("Input shapes do not match the polymorphic shapes specification. "
             "Expected value >= 1 for dimension variable 'b'.")
    for classic in (pe.call_exported(exp), pe.call(exp)):
        with pytest.raises(ValueError) as info:
            classic(bad)
        assert str(info.value).startswith(start)
        assert str(info.value).endswith(
            "Please see https://github.com/google/jax/blob/main/jax/experimental/jax2tf/"
            "README.md#shape-assertion-errors for more details.")
    assert pe.call(exp) is pe.call_exported(exp)
    with pytest.raises(ValueError) as info:
        exp.call(bad)
    assert str(info.value).startswith(start)
    assert str(info.value).endswith(
        "Please see https://docs.jax.dev/en/latest/export/shape_poly.html"
        "#shape-assertion-errors for more details.")
    # Good shapes run through either spelling, under jit too.
    ok = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(np.asarray(jax.jit(pe.call(exp))(ok)), ok.sum(0))
    np.testing.assert_array_equal(np.asarray(exp.call(ok)), ok.sum(0))


def test_calling_convention_out_of_range_carries_both_vintages_words():
    previous = jax.config.jax_export_calling_convention_version
    too_new = jax_export.maximum_supported_calling_convention_version + 1
    jax.config.update("jax_export_calling_convention_version", too_new)
    try:
        for fun in (jnp.sin, pmapkit.pmap(jnp.sin)):
            with pytest.raises(ValueError) as info:
                pe.export(fun)(jax.ShapeDtypeStruct((1, 3), np.float32))
            text = str(info.value)
            # jax.export's, then jax_export's (2023) and 0.4.2x's spelling.
            assert (f"The requested export calling convention version {too_new} is "
                    "outside the range of supported versions") in text
            assert (f"The requested jax_serialization version {too_new} is outside "
                    "the range of supported versions") in text
    finally:
        jax.config.update("jax_export_calling_convention_version", previous)
