"""pmapkit.host_callback: id_tap, id_print, call, barrier_wait — eagerly and
under jit, the argument checks, id_print's format, and the errors."""
import io
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmapkit import host_callback as hcb

from _hcb_helpers import Recorder, drained, floats, rec  # noqa: F401  (fixtures)


# -- id_tap ---------------------------------------------------------------------
@pytest.mark.parametrize("arg", [
    2.0,
    np.arange(6, dtype=np.float32).reshape(2, 3),
    (np.float32(1.0), {"a": np.arange(3, dtype=np.int32), "b": [np.ones(2, np.float32)]}),
], ids=["scalar", "array", "pytree"])
def test_id_tap_eager_is_identity_and_taps(rec, arg):
    out = hcb.id_tap(rec, arg)
    got, = rec.take()
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(arg)
    for o, a, t in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(arg),
                       jax.tree_util.tree_leaves(got[0])):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(a))
        assert isinstance(t, np.ndarray)
        np.testing.assert_array_equal(t, np.asarray(a))
    assert got[1] == ()


def test_id_tap_under_jit(rec):
    f = jax.jit(lambda x: hcb.id_tap(rec, (x, 2 * x))[1] * 3)
    out = f(jnp.arange(3.0))
    np.testing.assert_allclose(out, [0.0, 6.0, 12.0])
    (arg, transforms, device), = rec.take()
    assert floats(arg) == ([0.0, 1.0, 2.0], [0.0, 2.0, 4.0])
    assert transforms == () and device is None


def test_id_tap_result_returned_and_arg_tapped(rec):
    f = jax.jit(lambda x: hcb.id_tap(rec, x + 1, result=x * 10))
    np.testing.assert_allclose(f(jnp.float32(2)), 20.0)
    assert rec.values() == [3.0]


def test_id_tap_result_pytree_eager(rec):
    out = hcb.id_tap(rec, 1.0, result={"r": jnp.ones(2)})
    assert set(out) == {"r"}
    np.testing.assert_allclose(out["r"], [1.0, 1.0])
    assert rec.values() == [1.0]


def test_id_tap_with_device_jit_default_device(rec):
    jax.jit(lambda x: hcb.id_tap(rec, x, tap_with_device=True))(1.0)
    (_, _, device), = rec.take()
    assert device == jax.devices()[0]


def test_id_tap_with_device_follows_committed_argument(rec):
    x = jax.device_put(jnp.float32(5), jax.devices()[3])
    jax.jit(lambda x: hcb.id_tap(rec, x, tap_with_device=True))(x)
    (arg, _, device), = rec.take()
    assert device == jax.devices()[3] and float(arg) == 5.0


def test_id_tap_eager_with_device(rec):
    hcb.id_tap(rec, jnp.ones(2), tap_with_device=True)
    (_, _, device), = rec.take()
    assert device == jax.devices()[0]


def test_id_tap_partial_with_keywords(rec):
    seen = []
    import functools
    hcb.id_tap(functools.partial(lambda a, tr, what: seen.append((what, float(a))),
                                 what="activation"), 2.0)
    hcb.barrier_wait()
    assert seen == [("activation", 2.0)]


def test_id_tap_kwargs_rejected_with_classic_message():
    with pytest.raises(TypeError, match=re.escape(
            "Support for **kwargs in ``id_tap`` has been removed")):
        hcb.id_tap(lambda a, t: None, 1.0, what="x")


@pytest.mark.parametrize("jit", [False, True])
def test_id_tap_non_array_leaf_is_type_error(jit):
    def f(x):
        return hcb.id_tap(lambda a, t: None, {"x": x, "name": "hello"})
    f = jax.jit(f) if jit else f
    with pytest.raises(TypeError, match=r"\['name'\].*'hello'.*str.*not a JAX type"):
        f(1.0)


def test_id_tap_not_callable():
    with pytest.raises(TypeError, match="expects a callable"):
        hcb.id_tap(3, 1.0)


def test_id_tap_bad_device_index():
    with pytest.raises(TypeError, match="device_index must be a non-negative int"):
        hcb.id_tap(lambda a, t: None, 1.0, device_index=-1)


def test_id_tap_device_index_out_of_range_in_jit():
    with pytest.raises(ValueError, match="device_index=5 is out of range"):
        jax.jit(lambda x: hcb.id_tap(lambda a, t: None, x, device_index=5))(1.0)


def test_id_tap_empty_arg(rec):
    out = jax.jit(lambda x: (hcb.id_tap(rec, None), x + 1)[1])(1.0)
    assert float(out) == 2.0
    (arg, _, _), = rec.take()
    assert arg is None


def test_taps_run_in_program_order(rec):
    def f(x):
        for i in range(10):
            x = hcb.id_tap(rec, x + 1.0)
        return x
    jax.jit(f)(0.0)
    assert rec.values() == [float(i) for i in range(1, 11)]


def test_unused_tap_is_not_dead_code(rec):
    def f(x):
        hcb.id_tap(rec, x * 2)  # result dropped
        return x + 1
    assert float(jax.jit(f)(1.0)) == 2.0
    assert rec.values() == [2.0]
    jaxpr = jax.make_jaxpr(f)(1.0)
    assert any(e.primitive.name == "pmapkit_outside_call" for e in jaxpr.eqns)
    assert jaxpr.effects


def test_repeated_jit_calls_reuse_compilation(rec):
    traces = []

    def f(x):
        traces.append(1)
        return hcb.id_tap(rec, x)
    g = jax.jit(f)
    for i in range(4):
        g(float(i))
    assert len(traces) == 1
    assert rec.values() == [0.0, 1.0, 2.0, 3.0]


def test_tap_receives_own_copies(rec):
    f = jax.jit(lambda x: hcb.id_tap(rec, x))
    f(jnp.zeros(4))
    f(jnp.ones(4))
    first, second = rec.take()
    np.testing.assert_array_equal(first[0], np.zeros(4))
    np.testing.assert_array_equal(second[0], np.ones(4))


def test_same_body_as_debug_callback_under_jit():
    ours, theirs = Recorder(), []

    def body(tap, x):
        for k in range(3):
            x = tap(x * 2.0 + k)
        return x

    def ours_tap(x):
        return hcb.id_tap(ours, x)

    def theirs_tap(x):
        jax.debug.callback(lambda v: theirs.append(np.asarray(v).tolist()), x,
                           ordered=True)
        return x
    a = jax.jit(lambda x: body(ours_tap, x))(jnp.arange(3.0))
    b = jax.jit(lambda x: body(theirs_tap, x))(jnp.arange(3.0))
    jax.effects_barrier()
    np.testing.assert_array_equal(a, b)
    assert ours.values() == theirs


# -- id_print -------------------------------------------------------------------
def _printed(fun, *args):
    stream = io.StringIO()
    fun(stream, *args)
    hcb.barrier_wait()
    return stream.getvalue()


def test_id_print_kwargs_sorted_then_value():
    out = _printed(lambda s, x: hcb.id_print(x, zeta=1, alpha="a", output_stream=s),
                   np.float32(3.0))
    assert out == "alpha: a zeta: 1\n3.\n"


def test_id_print_seed_power3_tuple():
    def power3(s, x):
        y = x * x
        hcb.id_print((x, y), what="x,x^2", output_stream=s)
        return y * x
    assert _printed(power3, 3.0) == "what: x,x^2\n( 3. 9. )\n"
    assert _printed(lambda s, x: jax.jit(lambda x: power3(s, x))(x), 3.0) == \
        "what: x,x^2\n( 3. 9. )\n"


def test_id_print_returns_argument():
    stream = io.StringIO()
    out = jax.jit(lambda x: hcb.id_print(x, output_stream=stream) + 1)(1.0)
    hcb.barrier_wait()
    assert float(out) == 2.0 and stream.getvalue() == "1.\n"


def test_id_print_list_dict_formatting():
    value = {"b": [np.int32(1), np.int32(2)], "a": np.arange(3, dtype=np.float32)}
    out = _printed(lambda s, v: hcb.id_print(v, output_stream=s), value)
    assert out == "{ a=[0. 1. 2.] b=[ 1 2 ] }\n"


def test_id_print_threshold_summarises():
    out = _printed(lambda s, v: hcb.id_print(v, threshold=5, output_stream=s),
                   np.arange(20, dtype=np.int32))
    assert "..." in out
    full = _printed(lambda s, v: hcb.id_print(v, output_stream=s),
                    np.arange(20, dtype=np.int32))
    assert "..." not in full


def test_id_print_long_tuple_breaks_lines():
    value = tuple(np.arange(8, dtype=np.float32) + k for k in range(4))
    out = _printed(lambda s, v: hcb.id_print(v, output_stream=s), value)
    lines = out.splitlines()
    assert lines[0].startswith("( [") and lines[-1].endswith("] )")
    assert len(lines) == 4 and all(line.startswith("  [") for line in lines[1:-1])


def test_id_print_device_shown():
    out = _printed(lambda s, x: jax.jit(
        lambda x: hcb.id_print(x, tap_with_device=True, output_stream=s))(x), 1.0)
    assert out == f"device: {jax.devices()[0]}\n1.\n"


def test_id_print_to_stdout(capsys):
    hcb.id_print(np.int32(7), what="seven")
    hcb.barrier_wait()
    assert capsys.readouterr().out == "what: seven\n7\n"


def test_id_print_equal_printers_share_compilation():
    stream = io.StringIO()
    traces = []

    def f(x):
        traces.append(1)
        return hcb.id_print(x, what="w", output_stream=stream)
    g = jax.jit(f)
    g(1.0)
    g(2.0)
    hcb.barrier_wait()
    assert stream.getvalue() == "what: w\n1.\nwhat: w\n2.\n" and len(traces) == 1


# Recorded from jax 0.4.30's jax.experimental.host_callback running the same
# calls (JAX_HOST_CALLBACK_LEGACY=1, 4 CPU devices).
CLASSIC_PRINTOUT = """\
alpha: a zeta: 1
3.
{ a=[0. 1. 2.] b=[ 1 2 ] }
( [0. 1. 2. 3. 4. 5. 6. 7.]
  [1. 2. 3. 4. 5. 6. 7. 8.]
  [2. 3. 4. 5. 6. 7. 8. 9.]
  [ 3.  4.  5.  6.  7.  8.  9. 10.] )
[ 0  1  2 ... 17 18 19]
( ( 1. 2. ) [ 3 ] )
[[1. 1. 1.]
 [1. 1. 1.]]
transforms: [('batch', {'batch_dims': (0, 0)})] what: x,x^2
( [2. 3.] [4. 9.] )
transforms: [('batch', {'batch_dims': (0,)}), ('batch', {'batch_dims': (0,)})]
[[1. 1.]
 [1. 1.]]
transforms: [('batch', {'batch_dims': (0, None)})]
( [1. 1.] 3. )
"""


def test_id_print_matches_classic_printout():
    s = io.StringIO()

    def p(*a, **k):
        hcb.id_print(*a, output_stream=s, **k)
    p(np.float32(3.0), zeta=1, alpha="a")
    p({"b": [np.int32(1), np.int32(2)], "a": np.arange(3, dtype=np.float32)})
    p(tuple(np.arange(8, dtype=np.float32) + k for k in range(4)))
    p(np.arange(20, dtype=np.int32), threshold=5)
    p(((np.float32(1), np.float32(2)), [np.int32(3)]))
    p(np.ones((2, 3), np.float32))
    jax.vmap(lambda x: hcb.id_print((x, x * x), what="x,x^2", output_stream=s))(
        np.array([2.0, 3.0], np.float32))
    jax.vmap(jax.vmap(lambda x: hcb.id_print(x, output_stream=s)))(
        np.ones((2, 2), np.float32))
    jax.vmap(lambda x, y: hcb.id_print((x, y), output_stream=s), in_axes=(0, None))(
        np.ones(2, np.float32), np.float32(3))
    hcb.barrier_wait()
    assert s.getvalue() == CLASSIC_PRINTOUT


# -- call -----------------------------------------------------------------------
def test_call_eager():
    out = hcb.call(lambda x: np.sin(x), np.arange(3, dtype=np.float32),
                   result_shape=jax.ShapeDtypeStruct((3,), np.float32))
    np.testing.assert_allclose(out, np.sin(np.arange(3.0)), rtol=1e-6)


def test_call_seed_eig_example():
    def host_eig(m):
        return np.linalg.eigvals(m)

    def device_fun(m):
        return hcb.call(host_eig, m,
                        result_shape=jax.ShapeDtypeStruct(m.shape[:-1], jnp.complex64))
    m = np.array([[0.0, -1.0], [1.0, 0.0]], np.float32)  # eigenvalues +-i
    out = jax.jit(device_fun)(m)
    assert out.dtype == jnp.complex64
    np.testing.assert_allclose(np.sort(out.imag), [-1.0, 1.0], rtol=1e-6)


def test_call_pytree_result_under_jit():
    def host(arg):
        a, b = arg
        return {"sum": np.asarray(a + b), "n": np.int32(a.size)}
    shape = {"sum": jax.ShapeDtypeStruct((2,), np.float32), "n": np.int32(0)}
    out = jax.jit(lambda x, y: hcb.call(host, (x, y), result_shape=shape))(
        jnp.ones(2), jnp.full(2, 2.0))
    np.testing.assert_allclose(out["sum"], [3.0, 3.0])
    assert int(out["n"]) == 2 and out["n"].dtype == jnp.int32


def test_call_scalar_result_shape_canonicalized():
    # a Python float describes float32 (x64 off), and float64 host results
    # are canonicalized like classic results were.
    out = jax.jit(lambda x: hcb.call(lambda a: float(a) * 2, x, result_shape=0.0))(2.0)
    assert out.dtype == jnp.float32 and float(out) == 4.0


@pytest.mark.parametrize("result_shape", [None, ()])
def test_call_no_result(result_shape):
    seen = []
    out = jax.jit(lambda x: hcb.call(lambda a: seen.append(float(a)) or result_shape,
                                     x, result_shape=result_shape))(5.0)
    hcb.barrier_wait()
    assert out == result_shape and seen == [5.0]


def test_call_with_device():
    out = jax.jit(lambda x: hcb.call(lambda a, device: a + device.id, x,
                                     result_shape=x, call_with_device=True))(
        jax.device_put(jnp.float32(1), jax.devices()[2]))
    assert float(out) == 3.0


def test_call_in_control_flow():
    def body(i, c):
        return c + hcb.call(lambda a: a * 2, i, result_shape=i)
    assert int(jax.jit(lambda n: jax.lax.fori_loop(0, n, body, 0))(4)) == 12


@pytest.mark.parametrize("returned, pattern", [
    (np.ones(3, np.float32), r"returned float32\[3\], but result_shape declared float32\[2\]"),
    (np.ones(2, np.int32), r"returned int32\[2\], but result_shape declared float32\[2\]"),
    ((np.ones(2, np.float32),), r"pytree structure"),
], ids=["shape", "dtype", "structure"])
def test_call_wrong_result_raises_clear_error(returned, pattern):
    # One device: the call fails (jax.pure_callback's way); barrier_wait too.
    f = jax.jit(lambda x: hcb.call(lambda a: returned, x,
                                   result_shape=jax.ShapeDtypeStruct((2,), np.float32)))
    with pytest.raises(jax.errors.JaxRuntimeError, match=pattern) as raised:
        np.asarray(f(1.0))
    assert "CallbackException" in str(raised.value)
    with pytest.raises(hcb.CallbackException, match=pattern) as info:
        hcb.barrier_wait()
    assert isinstance(info.value.__cause__, TypeError)


def test_call_exception_raises_then_barrier_raises():
    def host(a):
        raise ZeroDivisionError("no host result")
    f = jax.jit(lambda x: hcb.call(host, x, result_shape=(x, jnp.int32(0))))
    with pytest.raises(jax.errors.JaxRuntimeError, match="ZeroDivisionError: no host result"):
        jax.tree_util.tree_map(np.asarray, f(1.0))
    ok = jax.jit(lambda x: hcb.call(lambda a: a + 1, x, result_shape=x))
    assert float(ok(1.0)) == 2.0
    with pytest.raises(hcb.CallbackException) as info:
        hcb.barrier_wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_failing_call_raises_as_pure_callback_does():
    def host(a):
        raise ValueError("user exception")
    x = jnp.arange(3.0)
    with pytest.raises(Exception) as theirs:
        np.asarray(jax.jit(lambda v: jax.pure_callback(host, v, v))(x))
    with pytest.raises(Exception) as ours:
        np.asarray(jax.jit(lambda v: hcb.call(host, v, result_shape=v))(x))
    assert type(ours.value) is type(theirs.value)
    assert "ValueError: user exception" in str(ours.value)
    with pytest.raises(hcb.CallbackException):
        hcb.barrier_wait()


def test_legacy_semantics_flag():
    # The legacy implementation's semantics (jax-v0.4.33 host_callback with
    # JAX_HOST_CALLBACK_LEGACY=True): what JAX's suite branches on.
    assert hcb.LEGACY_SEMANTICS is True
    with pytest.raises(NotImplementedError,
                       match="batching rules are implemented only for id_tap, not for call"):
        jax.vmap(lambda v: hcb.call(lambda a: a, v, result_shape=v))(jnp.ones((2, 3)))


@pytest.mark.parametrize("bad", [object(), {"a": object()}, [1.0, "not a dtype"]])
def test_call_bad_result_shape_classic_message(bad):
    with pytest.raises(ValueError) as info:
        hcb.call(lambda a: a, 1.0, result_shape=bad)
    assert str(info.value) == (
        "result_shape should be a pytree of values with structure matching the "
        "expected result of the callback function. The values must be either "
        "numeric scalars, or must have 'shape' and 'dtype' attributes. "
        f"Got {bad}")


@pytest.mark.parametrize("shape, want", [
    (1.0, "float32[]"), (np.int8(3), "int8[]"),
    (np.zeros((2, 3), np.int16), "int16[2,3]"),
    (jax.ShapeDtypeStruct((4,), jnp.bfloat16), "bfloat16[4]"),
], ids=["float", "np-scalar", "array", "struct"])
def test_call_result_shape_leaf_kinds(shape, want):
    out = jax.eval_shape(lambda x: hcb.call(lambda a: a, x, result_shape=shape), 1.0)
    assert jax.core.ShapedArray(out.shape, out.dtype).str_short() == want


# -- callback_flavor (the classic module's last releases) --------------------------
@pytest.mark.parametrize("flavor", list(hcb.CallbackFlavor))
def test_callback_flavor_documented_values(rec, flavor):
    assert [m.name for m in hcb.CallbackFlavor] == ["IO_CALLBACK", "PURE", "DEBUG"]

    def body(x):
        y = hcb.id_tap(rec, x, callback_flavor=flavor)
        y = hcb.id_print(y, callback_flavor=flavor, output_stream=io.StringIO())
        return hcb.call(lambda a: a * 2, y, result_shape=y, callback_flavor=flavor)
    assert float(jax.jit(body)(3.0)) == 6.0
    assert rec.values() == [3.0]


@pytest.mark.parametrize("api", ["id_tap", "id_print", "call"])
@pytest.mark.parametrize("bad", ["IO_CALLBACK", 1, None])
def test_callback_flavor_other_values_are_a_clear_error(api, bad):
    calls = {"id_tap": lambda: hcb.id_tap(lambda a, t: None, 1.0, callback_flavor=bad),
             "id_print": lambda: hcb.id_print(1.0, callback_flavor=bad),
             "call": lambda: hcb.call(lambda a: a, 1.0, result_shape=1.0,
                                      callback_flavor=bad)}
    with pytest.raises(TypeError) as info:
        calls[api]()
    assert str(info.value) == (
        f"host_callback.{api}: callback_flavor must be a host_callback.CallbackFlavor "
        "(CallbackFlavor.IO_CALLBACK, CallbackFlavor.PURE or CallbackFlavor.DEBUG), "
        f"got {bad!r}.")


def test_call_not_differentiable_or_batchable():
    f = lambda x: hcb.call(lambda a: a, x, result_shape=x)  # noqa: E731
    with pytest.raises(NotImplementedError, match="call does not support jvp"):
        jax.grad(f)(1.0)
    with pytest.raises(NotImplementedError, match="batching rules are implemented only for id_tap, not for call"):
        jax.vmap(f)(jnp.ones(2))


# -- errors and barrier_wait -----------------------------------------------------
def test_tap_exception_logged_then_barrier_raises(caplog):
    def bad(arg, transforms):
        raise ValueError(f"bad tap {float(arg)}")
    with caplog.at_level(logging.ERROR, logger="pmapkit.host_callback"):
        out = jax.jit(lambda x: hcb.id_tap(bad, x) * 2)(3.0)
        assert float(out) == 6.0  # the computation carries on
        with pytest.raises(hcb.CallbackException, match="bad tap 3.0") as info:
            hcb.barrier_wait()
    assert isinstance(info.value.__cause__, ValueError)
    assert "Traceback" in str(info.value)
    assert any("bad tap 3.0" in r.getMessage() for r in caplog.records)
    hcb.barrier_wait()  # reported once


def test_a_failure_on_every_device_is_logged_once(caplog):
    # A failing call in a pmap fails on each device, and a loop fails it
    # again: one ERROR with its traceback, the repeats at DEBUG, and nothing
    # from JAX's callback logger for the CallbackException pmapkit raised.
    import pmapkit

    def refuse(x):
        raise ValueError("refused everywhere")
    f = pmapkit.pmap(lambda x: hcb.call(refuse, x, result_shape=x) + 1)
    n = jax.local_device_count()
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):
            with pytest.raises(Exception, match="CallbackException"):
                f(jnp.ones((n, 2))).block_until_ready()
        with pytest.raises(hcb.CallbackException):
            hcb.barrier_wait()
    ours = [r for r in caplog.records if r.name == "pmapkit.host_callback"
            and "refused everywhere" in r.getMessage()]
    errors = [r for r in ours if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "Traceback" in errors[0].getMessage()
    assert len(ours) == 2 * n       # every device's run, each loop: still seen
    assert not [r for r in caplog.records if r.name.startswith("jax")
                and r.exc_info and isinstance(r.exc_info[1], hcb.CallbackException)]


def test_barrier_reports_last_exception():
    def bad(arg, transforms):
        raise KeyError(int(arg))
    f = jax.jit(lambda x: hcb.id_tap(bad, x))
    f(1)
    f(2)
    with pytest.raises(hcb.CallbackException, match="KeyError: 2") as info:
        hcb.barrier_wait("named")
    assert info.value.__cause__.args == (2,)


def test_eager_tap_exception_does_not_raise_at_call():
    def bad(arg, transforms):
        raise RuntimeError("eager boom")
    assert float(hcb.id_tap(bad, 1.0)) == 1.0
    with pytest.raises(hcb.CallbackException, match="eager boom"):
        hcb.barrier_wait()


def test_stop_outfeed_receiver_and_alias(rec):
    jax.jit(lambda x: hcb.id_tap(rec, x))(1.0)
    hcb.stop_outfeed_receiver()
    assert hcb.TapFunctionException is hcb.CallbackException
    assert rec.values() == [1.0]


# -- a call outside per-device code: token-free, still in program order ---------------
def _mixed_program(log):
    def tap(a, transforms):
        log.append(("tap", int(np.asarray(a).ravel()[0])))

    def host(a):
        log.append(("call", int(np.asarray(a).ravel()[0])))
        return a

    def f(x):
        hcb.id_tap(tap, x)
        y = hcb.call(host, x + 1, result_shape=x)   # nothing orders these two
        hcb.id_tap(tap, x + 2)                      # but program order
        z = hcb.call(host, x + 3, result_shape=x)
        w = jax.lax.scan(lambda c, _: (c, hcb.call(host, c, result_shape=c)),
                         x + 4, None, length=2)[1]
        return y + z + w.sum(0)
    return f


def _sharded_8(value):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
    return jax.device_put(jnp.full(8, value, jnp.int32),
                          jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d")))


@pytest.mark.parametrize("devices", [1, 8])
def test_calls_and_taps_of_one_program_run_in_program_order(devices):
    # Calls outside per-device code thread no effect token (their program
    # dispatches as jax.pure_callback's does), yet keep program order with
    # the program's taps and with each other, on one device and over 8.
    log = []
    f = jax.jit(_mixed_program(log))
    for i in range(20):
        log.clear()
        x = jnp.int32(10 * i) if devices == 1 else _sharded_8(10 * i)
        jax.block_until_ready(f(x))
        hcb.barrier_wait()
        base = 10 * i
        assert log == [("tap", base), ("call", base + 1), ("tap", base + 2),
                       ("call", base + 3), ("call", base + 4), ("call", base + 4)], log


def test_call_threads_a_token_only_in_per_device_code():
    from pmapkit.host_callback import _primitive
    x = jnp.ones(3)
    outside = jax.make_jaxpr(lambda v: hcb.call(lambda a: a, v, result_shape=v))(x)
    assert outside.effects == {_primitive.host_callback_unordered_effect}
    tap = jax.make_jaxpr(lambda v: hcb.id_tap(lambda a, t: None, v))(x)
    assert tap.effects == {_primitive.host_callback_effect}
    inside = jax.make_jaxpr(
        lambda v: hcb.call(lambda a: a, v, result_shape=v), axis_env=[("i", 8)])(x)
    assert inside.effects == {_primitive.host_callback_effect}
