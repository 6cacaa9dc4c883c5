"""Every error of classic pmap: exception type plus the part of the message
that tells the user what to fix (argument names, sizes, device counts).

Messages come from ``pmapkit/pmap/_pmap.py`` and ``pmapkit/core/sharding/specs.py``. Each error
must be raised before anything runs: the ``no_compile`` fixture fails a test
that reaches ``compiling.compile_pmap``, and errors that can be found without
tracing also must not trace the user function. A second identical call must
raise the same error (the failed signature must not turn into a usable or a
hanging cache entry).
"""
import inspect
import re
import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import pmapkit
from pmapkit.core.programs import compiling

N = len(jax.devices())  # 8, forced by conftest


@pytest.fixture(autouse=True)
def no_compile(monkeypatch):
    """Count compilations; tests assert none happened for an erroring call."""
    calls = []
    real = compiling.compile_pmap

    def compile_pmap(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(compiling, "compile_pmap", compile_pmap)
    return calls


class Traced:
    """A user function that counts its traces."""

    def __init__(self, fn):
        self.fn = fn
        self.traces = 0
        self.__name__ = getattr(fn, "__name__", "traced")

    def __call__(self, *args, **kwargs):
        self.traces += 1
        return self.fn(*args, **kwargs)


def x8(*rest):
    return np.ones((N,) + rest, np.float32)


def raises_twice(exc, pieces, call, no_compile):
    """``call()`` raises ``exc`` whose message contains every piece, twice
    (miss, then the signature's fallback entry), compiling nothing."""
    for _ in range(2):
        with pytest.raises(exc) as info:
            call()
        msg = str(info.value)
        for piece in pieces:
            assert piece in msg, (piece, msg)
    assert not no_compile


# ------------------------------------------------------------------ in_axes --

@pytest.mark.parametrize("in_axes,args", [
    ((0, 0, 0), (x8(), x8())),       # longer than the arguments
    (((0, 0),), (x8(),)),            # nested deeper than the argument
    ({"a": 0}, (x8(),)),             # wrong container type
])
def test_in_axes_not_a_prefix(no_compile, in_axes, args):
    body = Traced(lambda *a: a[0])
    f = pmapkit.pmap(body, in_axes=in_axes)
    raises_twice(ValueError, ["in_axes specification must be a tree prefix"],
                 lambda: f(*args), no_compile)
    assert body.traces == 0


def test_in_axes_out_of_range_names_the_argument(no_compile):
    def f(x):
        return x
    g = pmapkit.pmap(f, in_axes=2)
    raises_twice(ValueError, ["'x'", "along axis 2", "at least 3", "only 2",
                              "(8, 3)"],
                 lambda: g(x8(3)), no_compile)


def test_negative_in_axes_out_of_range(no_compile):
    def f(x):
        return x
    g = pmapkit.pmap(f, in_axes=-3)
    raises_twice(ValueError, ["'x'", "along axis -3", "at least 3", "only 2"],
                 lambda: g(x8(3)), no_compile)


def test_in_axes_error_names_pytree_leaf_and_kwarg(no_compile):
    def f(d, k):
        return d["a"] + k
    g = pmapkit.pmap(f, in_axes=({"a": 0, "b": 1}, 0))
    # A rank-1 leaf cannot be mapped along axis 1; the message gives its path.
    raises_twice(ValueError, ["'d'", "['b']", "along axis 1"],
                 lambda: g({"a": x8(), "b": x8()}, x8()), no_compile)
    # Keyword arguments are always mapped along axis 0, whatever in_axes says.
    h = pmapkit.pmap(lambda x, k: x + k, in_axes=(None,))
    raises_twice(ValueError, ["keyword argument 'k'", "along axis 0"],
                 lambda: h(x8(), k=np.float32(1)), no_compile)


@pytest.mark.parametrize("bad", [0.0, "0", 1.5, (0, 1.0)])
def test_in_axes_leaf_of_wrong_type(bad):
    # Checked at decoration, before any call.
    with pytest.raises(TypeError, match=re.escape(
            "pmap in_axes must be an int, None, or (nested) container")):
        pmapkit.pmap(lambda x: x, in_axes=bad)


# ----------------------------------------------------------------- out_axes --

@pytest.mark.parametrize("bad", [1.5, "0", [0, 0.0]])
def test_out_axes_leaf_of_wrong_type(bad):
    with pytest.raises(TypeError, match=re.escape(
            "pmap out_axes must be an int, None, or (nested) container")):
        pmapkit.pmap(lambda x: x, out_axes=bad)


def test_out_axes_not_a_prefix(no_compile):
    f = pmapkit.pmap(lambda x: x, out_axes=(0, 0))
    raises_twice(ValueError, ["out_axes specification must be a tree prefix"],
                 lambda: f(x8()), no_compile)


@pytest.mark.parametrize("out_axes", [3, -4])
def test_out_axes_out_of_range(no_compile, out_axes):
    def f(x):
        return x
    g = pmapkit.pmap(f, out_axes=out_axes)
    raises_twice(ValueError, [f"out_axes={out_axes} is out of range",
                              "rank 1", "[-2, 1]"],
                 lambda: g(x8(3)), no_compile)


# out_axes=None on a varying output is accepted (each device keeps its own
# value, reading gives the first device's): tests/test_pmap_nested.py.


def test_out_axes_none_allowed_for_psum_and_unmapped_input():
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    f = pmapkit.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", out_axes=None)
    np.testing.assert_array_equal(np.asarray(f(x)), x.sum(0))
    w = np.arange(3, dtype=np.float32)
    g = pmapkit.pmap(lambda v, u: (v, u * 2), in_axes=(0, None),
                     out_axes=(0, None))
    out_v, out_u = g(x, w)
    np.testing.assert_array_equal(np.asarray(out_v), x)
    np.testing.assert_array_equal(np.asarray(out_u), w * 2)


# ------------------------------------------------------------- mapped sizes --

def test_mapped_sizes_differ_names_both_arguments(no_compile):
    def f(x, y):
        return x
    g = pmapkit.pmap(f)
    raises_twice(ValueError, ["inconsistent sizes", "'x'", "'y'", "size 8",
                              "size 4"],
                 lambda: g(x8(3), np.ones(4, np.float32)), no_compile)


def test_more_instances_than_devices(no_compile):
    def f(x):
        return x
    g = pmapkit.pmap(f)
    # classic pxla's text (its pmap_test regex below) and the docstring's
    raises_twice(ValueError, [f"compiling computation that requires {N + 1} logical "
                              f"devices, but only {N} XLA devices are available "
                              f"(num_replicas={N + 1})",
                              f"requires {N + 1} replicas, but only {N} XLA devices "
                              "are available", "pmapped function f",
                              # how to get more CPU devices, where they are CPUs
                              f"--xla_force_host_platform_device_count={N + 1}",
                              f"jax.config.update('jax_num_cpu_devices', {N + 1})"],
                 lambda: g(np.ones(N + 1, np.float32)), no_compile)
    with pytest.raises(ValueError, match=r"compiling computation that requires \d+ "
                       r"logical devices, but only \d+ XLA devices are available .*"):
        g(np.ones(N + 1, np.float32))


@pytest.mark.parametrize("n_devices,size", [(2, 4), (N, 1), (4, 2)])
def test_devices_and_mapped_size_differ(no_compile, n_devices, size):
    # Classic pmap ran on exactly the given devices (jax.pmap 0.10 accepts a
    # smaller axis and runs on the first ones).
    def f(x):
        return x
    devices = jax.devices()[:n_devices]
    g = pmapkit.pmap(f, devices=devices)
    raises_twice(ValueError, [
        "Leading axis size of input to pmapped function must equal the number of "
        f"local devices passed to pmap. Got axis_size={size}, "
        f"num_local_devices={n_devices}.\n(Local devices available to pmap: "
        + ", ".join(map(str, devices)) + ")"],
        lambda: g(np.ones(size, np.float32)), no_compile)


def test_devices_and_nested_sizes_differ(no_compile):
    inner = pmapkit.pmap(lambda v: v * 2)
    g = pmapkit.pmap(inner, devices=jax.devices())
    raises_twice(ValueError, [
        "pmapped function requires 4 local devices to run due to nested pmapped "
        "or other parallel functions, but only 8 are available.\n(outer axis "
        "size: 2, local devices available to pmap: cpu:0"],
        lambda: g(np.ones((2, 2), np.float32)), no_compile)


def test_no_mapped_argument(no_compile):
    body = Traced(lambda x: x)
    f = pmapkit.pmap(body, in_axes=None)
    raises_twice(ValueError, ["at least one argument with a mapped axis"],
                 lambda: f(x8()), no_compile)
    assert body.traces == 0


def test_axis_size_mismatch(no_compile):
    f = pmapkit.pmap(lambda x: x, axis_size=4)
    raises_twice(ValueError, ["axis_size 4 doesn't match", "axis_size 8"],
                 lambda: f(x8()), no_compile)


# ---------------------------------------------------------------- arguments --

@pytest.mark.parametrize("bad", ["abc", object()], ids=["str", "object"])
def test_non_array_argument_names_it(no_compile, bad):
    def f(x, y):
        return x
    body = Traced(f)
    body.__signature__ = inspect.signature(f)  # names 'y'
    g = pmapkit.pmap(body)
    raises_twice(TypeError, ["'y'", "not a valid JAX type",
                             "static_broadcasted_argnums"],
                 lambda: g(x8(), bad), no_compile)
    assert body.traces == 0


def test_unhashable_static_argument(no_compile):
    body = Traced(lambda x, k: x)
    f = pmapkit.pmap(body, static_broadcasted_argnums=1)
    raises_twice(ValueError, ["Non-hashable static arguments are not supported",
                              "index 1"],
                 lambda: f(x8(), [1, 2]), no_compile)
    assert body.traces == 0


def test_static_argnum_beyond_passed_args(no_compile):
    f = pmapkit.pmap(lambda x, k=1: x, static_broadcasted_argnums=1)
    raises_twice(ValueError, ["static_broadcasted_argnums=(1,)",
                              "only 1 positional argument"],
                 lambda: f(x8()), no_compile)


def test_error_does_not_poison_the_function():
    # A failed signature keeps failing; others compile and run normally.
    f = pmapkit.pmap(lambda x, y: x + y)
    with pytest.raises(ValueError, match="inconsistent sizes"):
        f(x8(), np.ones(4, np.float32))
    np.testing.assert_array_equal(np.asarray(f(x8(), x8())), 2 * x8())
    with pytest.raises(ValueError, match="inconsistent sizes"):
        f(x8(), np.ones(4, np.float32))


# ------------------------------------------------------- decoration options --

def test_empty_devices():
    f = pmapkit.pmap(lambda x: x, devices=[])  # refused at the call, as classic pmap did
    with pytest.raises(ValueError, match="must be non-empty"):
        f(np.ones((1, 2), np.float32))


def test_repeated_device():
    d = jax.devices()[0]
    with pytest.raises(ValueError, match="more than once"):
        pmapkit.pmap(lambda x: x, devices=[d, jax.devices()[1], d])


@pytest.mark.parametrize("fun", [3, None, "f"])
def test_non_callable_fun(fun):
    with pytest.raises(TypeError, match="requires a callable"):
        pmapkit.pmap(fun)


def test_donate_overlapping_static():
    with pytest.raises(ValueError, match=r"must not\s+overlap.*\[1\]"):
        pmapkit.pmap(lambda x, k: x, static_broadcasted_argnums=1,
                     donate_argnums=(0, 1))



# ------------------------------------------------------- non-JAX outputs --

@pytest.mark.parametrize("api", ["pmap", "jit"])
def test_non_jax_output_names_its_path_and_type(no_compile, api):
    # jax.jit's wording (jax.pmap's own names no path): "at output component".
    def f(x):
        return x, {"a": x, "b": "s"}

    if api == "pmap":
        g = pmapkit.pmap(f)
    else:
        g = jax.jit(f)
    with pytest.raises(TypeError) as info:
        g(x8())
    msg = str(info.value)
    assert f"traced for {api} returned a value of type <class 'str'> at output " \
           "component [1]['b'], which is not a valid JAX type" in msg, msg
    assert msg.startswith("function f at "), msg
    assert not no_compile


def test_non_jax_output_at_the_top_has_no_path(no_compile):
    g = pmapkit.pmap(lambda x: object())
    ref = jax.jit(lambda x: object())
    with pytest.raises(TypeError) as mine:
        g(x8())
    with pytest.raises(TypeError) as theirs:
        ref(x8())
    assert "traced for pmap returned a value of type <class 'object'>, which is " \
           "not a valid JAX type" in str(mine.value)
    # Same sentence as jax.jit, but for the transformation's name.
    tail = lambda e: str(e.value).split(" traced for ")[1].split(" ", 1)[1]  # noqa: E731
    assert tail(mine) == tail(theirs)


# ------------------------------------------------------------- devices --

@pytest.mark.parametrize("devices,shown", [
    ([0, 1], "element 0 is 0 of type int"),
    (["cpu:0"], "element 0 is 'cpu:0' of type str"),
    (np.arange(2), "element 0 is np.int64(0) of type int64"),
])
def test_devices_that_are_not_devices(devices, shown):
    with pytest.raises(TypeError, match=re.escape(
            "pmap 'devices' must be a sequence of jax.Device objects")) as info:
        pmapkit.pmap(lambda x: x, devices=devices)
    assert shown in str(info.value)


def test_devices_a_single_device_or_not_a_sequence():
    d = jax.devices()[0]
    with pytest.raises(TypeError, match=r"got a single device .*; pass \[.*\] to run on it alone"):
        pmapkit.pmap(lambda x: x, devices=d)
    with pytest.raises(TypeError, match="got 3 of type int"):
        pmapkit.pmap(lambda x: x, devices=3)


# ------------------------------------------- classic pmap_test expectations --

@pytest.mark.parametrize("pmap_impl", [jax.pmap, pmapkit.pmap], ids=["jax", "pmapkit"])
def test_keyword_arguments_against_a_tuple_in_axes(pmap_impl):
    # jax's testInAxesPyTreePrefixMismatchErrorKwargs (jax.pmap 0.10 still says it)
    x = jnp.array([3.14])
    f = pmap_impl(lambda x, y: x, in_axes=((0, 0), 0))
    with pytest.raises(ValueError, match=re.escape(
            "each argument passed by keyword is mapped")) as info:
        f(x=(x, x), y=x)
    assert "The 'full pytree' here is the tuple of arguments passed positionally" \
        in str(info.value)


def test_in_axes_prefix_error_names_the_key_path():
    # jax's testInAxesPyTreePrefixMismatchError
    x = jnp.array([3.14])
    f = pmapkit.pmap(lambda x, y: x, in_axes=((0, 0, 0), 0))
    with pytest.raises(ValueError, match=re.escape("pmap in_axes[0][0]")) as info:
        f((x, x), x)
    assert "each argument passed by keyword" not in str(info.value)


def test_out_axes_prefix_error_names_the_key_path():
    # jax's testOutAxesPyTreePrefixMismatchError (jax.pmap 0.10 names
    # "broadcast_prefix prefix_tree" there instead)
    x = jnp.array([3.14])
    f = pmapkit.pmap(lambda x, y: ((x, x), x), out_axes=((0, 0, 0), 0))
    with pytest.raises(ValueError, match=re.escape("pmap out_axes[0]")) as info:
        f(x, x)
    assert "Ensure that the `out_axes` argument to `pmap` is a pytree prefix of the " \
        "pmapped function's output." in str(info.value)


def test_jit_of_pmap_warns_once_per_trace():
    # jax's testJitOfPmapWarningMessage: the jitted function's name
    def foo(x):
        return x * 2

    with pytest.warns(UserWarning, match="The jitted function foo includes a pmap"):
        out = jax.jit(pmapkit.pmap(foo))(jnp.arange(N, dtype=jnp.float32))
    np.testing.assert_array_equal(np.asarray(out), np.arange(N) * 2)

    def outer(x):
        return pmapkit.pmap(foo)(x) + 1

    jitted = jax.jit(outer)
    with pytest.warns(UserWarning, match="The jitted function outer includes a pmap"):
        jitted(x8())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jitted(x8())                            # cached: no new trace, no warning
        pmapkit.pmap(foo)(x8())                 # eager: none
        jax.grad(lambda v: pmapkit.pmap(foo)(v).sum())(x8())   # eager grad: none
