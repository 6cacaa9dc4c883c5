"""pmapkit.export: the classic API surface and round trips.

Round-trip bodies run through both implementations (``impl``: jax.export and
pmapkit.export: export -> serialize -> deserialize -> call) and must agree
with each other and with numpy.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from pmapkit import export as pe

from _export_helpers import IMPLS, assert_tree_close, sds, values

DTYPES = [np.float32, jnp.bfloat16, np.int32, np.bool_, np.complex64]


def _unary(dtype):
    if dtype == np.bool_:
        return lambda x: jnp.logical_not(x), np.logical_not
    if np.issubdtype(np.dtype(dtype), np.integer):
        return lambda x: x * 3 - 1, lambda x: (x * 3 - 1).astype(x.dtype)
    return lambda x: x * x + x, lambda x: (x * x + x).astype(x.dtype)


@pytest.mark.parametrize("impl", IMPLS, ids=repr)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_dtypes(impl, dtype):
    fun, ref = _unary(dtype)
    x = values((2, 3), dtype)
    exported = impl.export(fun, sds((2, 3), dtype))
    loaded = impl.round_trip(exported)
    out = impl.call(loaded, x)
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-6
    assert_tree_close(out, ref(x), tol)
    assert out.dtype == np.dtype(dtype)


@pytest.mark.parametrize("impl", IMPLS, ids=repr)
def test_round_trip_pytrees_in_and_out(impl):
    def fun(tree, scale):
        a, (b, c) = tree["a"], tree["bc"]
        return {"sum": a + b, "prod": [a * c, scale * b]}, (c,)

    tree = {"a": values((3,)), "bc": (values((3,), seed=1), values((3,), seed=2))}
    specs = jax.tree_util.tree_map(lambda v: sds(v.shape), tree)
    loaded = impl.round_trip(impl.export(fun, specs, sds(())))
    out = impl.call(loaded, tree, np.float32(2.0))
    a, (b, c) = tree["a"], tree["bc"]
    assert_tree_close(out, ({"sum": a + b, "prod": [a * c, 2 * b]}, (c,)))


@pytest.mark.parametrize("impl", IMPLS, ids=repr)
def test_round_trip_kwargs(impl):
    def fun(x, *, y, z):
        return x * y - z

    loaded = impl.round_trip(impl.export(fun, sds((4,)), y=sds((4,)), z=sds(())))
    x, y = values((4,)), values((4,), seed=1)
    assert_tree_close(impl.call(loaded, x, y=y, z=np.float32(1.5)), x * y - np.float32(1.5))


def test_same_values_as_jax_export():
    def fun(x, w):
        return jnp.tanh(x @ w), jnp.argmax(x, axis=1)

    x, w = values((4, 3)), values((3, 2), seed=1)
    specs = (sds((4, 3)), sds((3, 2)))
    ours = pe.deserialize(pe.serialize(pe.export(fun)(*specs))).call(x, w)
    theirs = jax_export.deserialize(jax_export.export(jax.jit(fun))(*specs).serialize()).call(x, w)
    assert_tree_close(ours, theirs, tol=0)


def test_exported_attributes():
    def fun(x, y, unused):
        return {"out": x + y}

    exported = pe.export(fun)(sds((2, 3)), sds((2, 3)), sds((5,), jnp.int32))
    assert exported.fun_name == "fun"
    assert exported.in_avals == (jax.core.ShapedArray((2, 3), jnp.float32),) * 2 + (
        jax.core.ShapedArray((5,), jnp.int32),)
    assert exported.out_avals == (jax.core.ShapedArray((2, 3), jnp.float32),)
    assert exported.in_tree == jax.tree_util.tree_structure(((1, 2, 3), {}))
    assert exported.out_tree == jax.tree_util.tree_structure({"out": 1})
    assert exported.lowering_platform == pe.default_lowering_platform() == "cpu"
    assert exported.platforms == ("cpu",)
    assert exported.strict_checks is True
    assert exported.module_kept_var_idx == (0, 1)
    assert len(exported.in_shardings) == 2   # the kept inputs only, as classic
    assert len(exported.out_shardings) == 1
    assert exported.module_uses_dim_vars is False
    assert exported.nr_devices == 1
    assert exported.calling_convention_version == jax_export.maximum_supported_calling_convention_version
    assert isinstance(exported.mlir_module_serialized, bytes)
    text = exported.mlir_module()
    assert "func.func public @main" in text and "stablehlo.add" in text
    assert exported.has_vjp()
    assert "fun_name='fun'" in repr(exported)


def test_jit_function_is_exported_as_is():
    jitted = jax.jit(lambda x, n: x * n, static_argnums=1)
    exported = pe.export(jitted)(sds((3,)), 4)
    assert exported.in_tree == jax.tree_util.tree_structure(((1,), {}))
    assert_tree_close(exported.call(np.ones(3, np.float32)), np.full(3, 4, np.float32))


def test_call_exported_classic_spelling_and_values():
    exported = pe.export(jnp.sin)(sds((3,)))
    x = values((3,))
    assert_tree_close(pe.call_exported(exported)(x), np.sin(x), tol=1e-6)
    assert pe.call_exported(exported) is pe.call_exported(exported)  # cached


def test_call_accepts_numpy_scalars_and_python_numbers():
    exported = pe.export(lambda x, s: x * s)(sds((3,)), sds(()))
    assert_tree_close(exported.call(np.ones(3, np.float32), 2.0), np.full(3, 2, np.float32))


def test_lowering_platform_spellings():
    a = pe.export(jnp.cos, lowering_platform="cpu")(sds((2,)))
    b = pe.export(jnp.cos, platforms=["cpu"])(sds((2,)))
    assert a.platforms == b.platforms == ("cpu",)
    multi = pe.export(jnp.cos, platforms=("cpu", "tpu"))(sds((2,)))
    assert multi.platforms == ("cpu", "tpu")
    assert_tree_close(multi.call(np.zeros(2, np.float32)), np.ones(2, np.float32))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(lowering_platform="cpu", platforms=["cpu"]), ValueError,
     "export got both 'lowering_platform' and 'platforms'; they are spellings of "
     "one option from different export APIs, give one"),
    (dict(lowering_platforms=["cpu"], platforms=["cpu"]), ValueError,
     "both 'lowering_platforms' and 'platforms'"),
    (dict(lowering_platform="cpu", lowering_platforms=["cpu"]), ValueError,
     "both 'lowering_platform' and 'lowering_platforms'"),
    (dict(strict_checks=False, disabled_checks=[]), ValueError,
     "both 'strict_checks' and 'disabled_checks'"),
    (dict(disabled_checks="platform"), TypeError,
     "'disabled_checks' must be a sequence of export.DisabledSafetyCheck, got str"),
    (dict(disabled_checks=["platform"]), TypeError,
     r"'disabled_checks' must hold export.DisabledSafetyCheck values .*got 'platform'"),
    (dict(platforms=[]), ValueError, "at least one platform"),
    (dict(platforms=["cpu", "cpu"]), ValueError, "twice"),
    (dict(platforms=[3]), TypeError, "str"),
    (dict(strict_checks="yes"), TypeError, "strict_checks"),
])
def test_export_option_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        pe.export(jnp.sin, **kwargs)


def test_platforms_jax_export_knows_no_backend_for_are_recorded():
    # As jax.export: a platform without a backend here is lowered for, not
    # refused (a multi-platform artifact may name one).
    x = np.arange(4, dtype=np.float32)
    theirs = jax_export.export(jax.jit(jnp.sin), platforms=("cpu", "other"))(x)
    for kwargs in (dict(platforms=("cpu", "other")),
                   dict(lowering_platforms=["cpu", "other"])):
        ours = pe.export(jnp.sin, **kwargs)(x)
        assert ours.platforms == theirs.platforms == ("cpu", "other")
        assert_tree_close(ours.call(x), np.sin(x), tol=1e-6)


def test_export_requires_callable():
    with pytest.raises(TypeError, match="'fun' must be callable"):
        pe.export(3)


def test_to_jax_and_from_jax():
    exported = pe.export(jnp.exp)(sds((3,)))
    jexp = pe.to_jax(exported)
    assert isinstance(jexp, jax_export.Exported)
    raw = jexp.serialize()
    # A raw jax.export blob is not ours: deserialize refuses it ...
    with pytest.raises(pe.DeserializationError, match="bad magic"):
        pe.deserialize(raw)
    # ... and from_jax takes it explicitly, unchecked.
    back = pe.from_jax(jax_export.deserialize(raw))
    assert isinstance(back, pe.Exported)
    assert_tree_close(back.call(np.zeros(3, np.float32)), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="jax.export.Exported"):
        pe.from_jax(exported)
    with pytest.raises(TypeError, match="pmapkit.export.Exported"):
        pe.to_jax(jexp)
    for call in (pe.call_exported, pe.call):   # jax.export's type and words
        with pytest.raises(ValueError, match=r"The exported argument must be an "
                                             r"export.Exported. Found .*wrap it with "
                                             r"pmapkit.export.from_jax"):
            call(jexp)
    with pytest.raises(ValueError, match="must be an export.Exported. Found 3.$"):
        pe.call(3)


def test_serialize_argument_errors():
    exported = pe.export(jnp.exp)(sds((3,)))
    with pytest.raises(TypeError, match="vjp_order"):
        pe.serialize(exported, vjp_order="1")
    with pytest.raises(ValueError, match="vjp_order"):
        pe.serialize(exported, vjp_order=-1)
    with pytest.raises(TypeError, match="pmapkit.export.Exported"):
        pe.serialize(pe.to_jax(exported))
    loaded = pe.deserialize(exported.serialize())   # the method spelling
    with pytest.raises(ValueError, match="has none"):
        pe.serialize(loaded, vjp_order=1)


def test_poly_spec_and_poly_specs():
    spec = pe.poly_spec((None, 4), jnp.float32, "b, ...")
    assert str(spec.shape[0]) == "b" and spec.shape[1] == 4
    assert pe.poly_spec((3, 4), jnp.int32, None).shape == (3, 4)
    assert pe.poly_spec((None,), jnp.float32, "2*b").shape[0] == 2 * spec.shape[0]
    assert tuple(map(str, pe.poly_spec((None, 4), jnp.float32, "(b, 4)").shape)) == ("b", "4")
    args = (np.zeros((2, 3), np.float32), {"k": np.zeros((5,), np.int32)})
    tree = pe.poly_specs(args, ["a, _", {"k": "c"}])
    assert str(tree[0].shape[0]) == "a" and tree[0].shape[1] == 3
    assert str(tree[1]["k"].shape[0]) == "c" and tree[1]["k"].dtype == np.int32
    same = pe.poly_specs(args, "d, ...")
    assert str(same[0].shape[0]) == str(same[1]["k"].shape[0]) == "d"
    assert pe.poly_specs(args, None)[0].shape == (2, 3)
    # poly_spec (jax_export had no scopes) shares one scope across calls;
    # symbolic_shape makes a new one per call, as jax.export's does.
    assert pe.poly_spec((None,), jnp.float32, "b").shape[0].scope is spec.shape[0].scope
    assert pe.symbolic_shape("b, 3")[0].scope is not pe.symbolic_shape("b")[0].scope


def test_mixed_symbolic_scopes_are_refused_at_export():
    # As jax.export: two symbolic_shape calls are two scopes; mixing them in
    # one export is an error naming both arguments.
    def f(x, y):
        return jnp.concatenate([x, y], axis=1)

    specs = [jax.ShapeDtypeStruct(pe.symbolic_shape(s), np.float32)
             for s in ("(w, h1)", "(w, h2)")]
    for export in (lambda f: pe.export(f), lambda f: jax_export.export(jax.jit(f))):
        with pytest.raises(ValueError, match=r"(?s)Invalid mixing of symbolic scopes when "
                           r"exporting f.*Expected current \(from args\[0\]\) scope .*"
                           r"and found for 'w' \(args\[1\]\) scope"):
            export(f)(*specs)
    # The 0.4.2x keywords of symbolic_args_specs; one call is one scope.
    a = np.zeros((3, 4), np.float32)
    x_spec, y_spec = pe.symbolic_args_specs((a, a), polymorphic_shapes=("w, h1", "w, h2"))
    assert x_spec.shape[0].scope is y_spec.shape[0].scope
    assert pe.export(f)(x_spec, y_spec).in_avals[0].shape[0] == x_spec.shape[0]
    scope = pe.SymbolicScope()
    (z,) = pe.symbolic_args_specs((a,), "w, ...", scope)   # 0.4.2x: 3rd is the scope
    assert z.shape[0].scope is scope
    (z,) = pe.symbolic_args_specs((a,), polymorphic_shapes="w, ...",
                                  symbolic_constraints=("w >= 2",))
    assert "w >= 2" in str(z.shape[0].scope)


@pytest.mark.parametrize("call,error,match", [
    (lambda: pe.poly_spec((None,), jnp.float32, None), ValueError, "unknown"),
    (lambda: pe.poly_spec("b", jnp.float32, "b"), TypeError, "arg_shape"),
    (lambda: pe.poly_spec((2.5,), jnp.float32, "b"), TypeError, "arg_shape"),
    (lambda: pe.poly_spec((2,), jnp.float32, 7), TypeError, "polymorphic_shape"),
    (lambda: pe.poly_spec((3, 4), jnp.float32, "b"), ValueError,
     r"poly_spec: polymorphic_shape 'b' has rank 1 but arg_shape \(3, 4\) has rank 2"),
    (lambda: pe.poly_spec([3], jnp.float32, "b, c"), ValueError,
     r"polymorphic_shape 'b, c' has rank 2 but arg_shape \(3,\) has rank 1"),
    (lambda: pe.poly_spec((), jnp.float32, "b"), ValueError,
     r"polymorphic_shape 'b' has rank 1 but arg_shape \(\) has rank 0"),
    (lambda: pe.poly_spec((3, 4), jnp.float32, "a, b, c, ..."), ValueError,
     r"polymorphic_shape 'a, b, c, \.\.\.' does not fit arg_shape \(3, 4\)"),
    (lambda: pe.poly_specs((np.zeros((2, 3)),), ("b",)), ValueError,
     r"'b' has rank 1 but arg_shape \(2, 3\) has rank 2"),
    (lambda: pe.poly_specs((np.zeros(2), np.zeros(3)), ("a", "b", "c")), ValueError,
     "polymorphic_shapes"),
    (lambda: pe.poly_specs((np.zeros(2),), (5,)), TypeError, "str or None"),
    (lambda: pe.poly_specs(([1, 2],), None), TypeError, ".shape and .dtype"),
])
def test_poly_spec_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
