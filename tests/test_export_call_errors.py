"""Call-time argument errors: the same body against jax.export and
pmapkit.export (export -> serialize -> deserialize -> call, at top level and
inside jit) must raise the same exception type with the same message —
jax.export's "Dtype mismatch for args[0]...", "Shape mismatch for
args[0].shape[0]...", "Rank mismatch for args[0]...", "The invocation args
and kwargs must have the same pytree structure...", and its shape-polymorphism
errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmapkit import export as pe

from _export_helpers import IMPLS, sds, values


def _loss_fn(x, w):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def _scaled(x, *, scale):
    return x * scale


def _pair(x, y):
    return x, y


def _poly(*specs):
    return tuple(pe.poly_spec((None,) * len(s.split(",")), jnp.float32, s) for s in specs)


X, W = values((4, 3)), values((3, 2), seed=1)

CASES = {
    # name: (fun, specs, kwspecs, args, kwargs)
    "dtype": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X.astype(np.int32), W), {}),
    "dtype_float16": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X.astype(np.float16), W), {}),
    "shape": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X, W[:2]), {}),
    "rank": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X[None], W), {}),
    "scalar_for_array": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (3.0, W), {}),
    "too_few_args": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X,), {}),
    "too_many_args": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X, W, W), {}),
    "unexpected_kwarg": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (X, W), {"extra": W}),
    "list_for_array": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, ([X], W), {}),
    "none_for_array": (_loss_fn, (sds((4, 3)), sds((3, 2))), {}, (None, W), {}),
    "kwarg_dtype": (_scaled, (sds((2,)),), {"scale": sds(())}, (values((2,)),),
                    {"scale": np.int32(3)}),
    "kwarg_missing": (_scaled, (sds((2,)),), {"scale": sds(())}, (values((2,)),), {}),
    "poly_expression": (_pair, _poly("b, c", "2*b, c"), {}, (values((3, 2)), values((5, 2))), {}),
    "poly_variable_bound_twice": (_pair, _poly("b, c", "2*b, c"), {},
                                  (values((3, 2)), values((6, 4))), {}),
    "poly_same_variable": (_pair, _poly("b", "b"), {}, (values((3,)), values((4,))), {}),
    "poly_variable_zero": (_pair, _poly("b", "b"), {}, (values((0,)), values((0,))), {}),
    "poly_rank": (_pair, _poly("b", "b"), {}, (values((3, 1)), values((3,))), {}),
    "poly_dtype": (_pair, _poly("b", "b"), {}, (values((3,), np.int32), values((3,))), {}),
}


def _error(impl, case, where):
    fun, specs, kwspecs, args, kwargs = CASES[case]
    loaded = impl.round_trip(impl.export(fun, *specs, **kwspecs))
    call = loaded.call if where == "top" else jax.jit(loaded.call)
    with pytest.raises(Exception) as info:
        call(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("where", ["top", "jit"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_error_as_jax_export(case, where):
    theirs = _error(IMPLS[0], case, where)
    ours = _error(IMPLS[1], case, where)
    assert type(theirs) is ValueError
    assert type(ours) is type(theirs)
    assert str(ours) == str(theirs)


@pytest.mark.parametrize("case,message", [
    ("dtype", "Dtype mismatch for args[0]: expected float32 and called with int32"),
    ("shape", "Shape mismatch for args[1].shape[0] (expected same constant): "
              "expected (3, 2) and called with (2, 2)"),
    ("rank", "Rank mismatch for args[0]: expected (4, 3) and called with (1, 4, 3)"),
    ("kwarg_dtype", "Dtype mismatch for kwargs['scale']: expected float32 and "
                    "called with int32"),
    ("too_few_args", "The invocation args and kwargs must have the same pytree "
                     "structure as when the function '_loss_fn' was exported, but "
                     "they have the following structural differences:\n"
                     "   - args is a tuple of length 1 in the invocation and a tuple "
                     "of length 2 when exported, so the lengths do not match.\n"),
])
def test_the_classic_wording(case, message):
    error = _error(IMPLS[1], case, "top")
    assert type(error) is ValueError
    assert str(error) == message


@pytest.mark.parametrize("impl", IMPLS, ids=repr)
def test_non_array_argument_is_a_type_error(impl):
    loaded = impl.round_trip(impl.export(_loss_fn, sds((4, 3)), sds((3, 2))))
    with pytest.raises(TypeError, match=r"^Argument 'text' of type <class 'str'> is not "
                                        r"a valid JAX type"):
        loaded.call("text", W)
    if impl.name == "pmapkit":   # and says which argument, and what was expected
        with pytest.raises(TypeError, match=r"\(exported function '_loss_fn', args\[0\]: "
                                            r"expected an array float32\[4,3\]\)"):
            loaded.call("text", W)
