"""Bad inputs to ``pmapkit.host_callback``, and callbacks that fail.

A failing callback must never stop the device computation: a tap returns
normally, a failed ``call`` gives zeros of its declared shape, later calls
run, and the next ``barrier_wait`` raises ``CallbackException`` once,
chained to the original exception (an interrupt named as such). Probes with
an interrupt run in a worker of their own.
"""
from __future__ import annotations

import io

from stress.common import P, Result, Wrong, hcb, jax, jnp, mesh1d, np, pmapkit, x8

SECTION = "bad_inputs"


def _tap(arg, transforms):
    pass


def _drain():
    """Leave no failure behind for the next probe."""
    try:
        hcb.barrier_wait()
    except hcb.CallbackException:
        pass


def _jit_call(fun, x):
    try:
        return jax.block_until_ready(jax.jit(fun)(x))
    finally:
        _drain()


def _program(where, body):
    """``(callable, input)`` running ``body`` under pmap, pjit (4 devices) or jit."""
    if where == "pmap":
        return pmapkit.pmap(body), jnp.arange(4.0)
    if where == "jit":
        return jax.jit(body), jnp.arange(3.0)
    mesh = mesh1d(4, "d")
    pjitted = pmapkit.pjit(body, in_axis_resources=P("d"), out_axis_resources=P("d"))

    def under_mesh(v):
        with mesh:
            return pjitted(v)
    return under_mesh, jnp.arange(8.0)


def _failure_probe(where, api, failure):
    """A callback failing on marked values (>= 1000) with calls in flight."""
    causes = {"raise": ValueError, "interrupt": KeyboardInterrupt, "exit": SystemExit,
              "shape": TypeError, "dtype": TypeError, "pytree": TypeError}

    def host(a):
        if np.asarray(a).ravel()[0] < 1000:
            return None if api == "tap" else a * 10
        if failure == "raise":
            raise ValueError("host function failed")
        if failure == "interrupt":
            raise KeyboardInterrupt("stop now")
        if failure == "exit":
            raise SystemExit(7)
        if failure == "shape":
            return np.ones(a.shape + (3,), a.dtype)
        if failure == "dtype":
            return np.ones(a.shape, np.int32)
        return (a, a)   # pytree

    if api == "tap":
        body = lambda v: hcb.id_tap(lambda a, t: host(a), v) * 2  # noqa: E731
        good = lambda v: np.asarray(v) * 2  # noqa: E731
        failed_ref = good
    else:
        body = lambda v: hcb.call(host, v, result_shape=v) + 1  # noqa: E731
        good = lambda v: np.asarray(v) * 10 + 1  # noqa: E731
        failed_ref = lambda v: np.ones(np.shape(v), np.float32)  # noqa: E731

    def probe():
        _drain()
        f, x = _program(where, body)
        bad = x + 1000
        in_flight = [f(bad) for _ in range(2)]   # not waited for
        following = f(x)
        if not np.allclose(np.asarray(following), good(x)):
            raise Wrong(f"the valid call after failed ones returned {np.asarray(following)}")
        for out in in_flight:
            if not np.allclose(np.asarray(out), failed_ref(bad)):
                raise Wrong(f"a failed {api} gave {np.asarray(out)}, expected "
                            f"{failed_ref(bad)}")
        try:
            hcb.barrier_wait()
        except hcb.CallbackException as exc:
            cause = exc.__cause__
            if not isinstance(cause, causes[failure]):
                raise Wrong(f"barrier_wait's CallbackException is chained to "
                            f"{type(cause).__name__}, expected {causes[failure].__name__}: "
                            f"{exc}") from None
            if failure in ("interrupt", "exit") and type(cause).__name__ not in str(exc):
                raise Wrong(f"the interrupt is not named: {str(exc)[:200]}") from None
            message = str(exc).splitlines()[0][:160]
        else:
            raise Wrong("barrier_wait did not report the failed callback")
        hcb.barrier_wait()   # raised once
        again = f(x)
        if not np.allclose(np.asarray(again), good(x)):
            raise Wrong(f"a later call returned {np.asarray(again)}")
        hcb.barrier_wait()
        return Result(f"went on; barrier_wait: CallbackException from "
                      f"{type(cause).__name__} ({message})")
    return probe


def register(reg):
    add = reg.section(SECTION, "host_callback")
    x = jnp.arange(3.0)

    # -- arguments of id_tap / id_print / call ----------------------------------------------
    add("id_tap(1, x)", lambda: hcb.id_tap(1, x), names=("callable",))
    add("id_tap(tap, 's')", lambda: hcb.id_tap(_tap, "s"), names=("arg", "type", "str"))
    add("id_tap(tap, object()) under jit", lambda: _jit_call(
        lambda v: hcb.id_tap(_tap, (v, object()))[0], x), names=("arg", "type", "object"))
    add("id_tap(tap, x, foo=1)", lambda: hcb.id_tap(_tap, x, foo=1), names=("kwargs", "foo"))
    add("id_tap device_index=-1", lambda: hcb.id_tap(_tap, x, device_index=-1),
        names="device_index")
    add("id_tap device_index='0'", lambda: hcb.id_tap(_tap, x, device_index="0"),
        names="device_index")
    add("id_tap device_index=100 under jit", lambda: _jit_call(
        lambda v: hcb.id_tap(_tap, v, device_index=100), x),
        names=("device_index", "100", "device"), ref=lambda: np.arange(3.0))
    add("id_tap callback_flavor='io'", lambda: hcb.id_tap(_tap, x, callback_flavor="io"),
        names="callback_flavor")
    add("id_tap result='s'", lambda: hcb.id_tap(_tap, x, result="s"),
        names=("result", "type"))
    add("id_tap arg=None", lambda: _jit_call(lambda v: hcb.id_tap(_tap, None, result=v), x),
        ref=lambda: np.arange(3.0))
    add("id_print output_stream=object()", lambda: _print_to(object(), x),
        expect=(TypeError, ValueError, hcb.CallbackException),
        names=("output_stream", "write"))
    add("id_print threshold='x'", lambda: _print_threshold(x),
        expect=(TypeError, ValueError, hcb.CallbackException), names=("threshold",))
    add("call result_shape='s'", lambda: hcb.call(np.sin, x, result_shape="s"),
        names="result_shape")
    add("call result_shape=object()", lambda: hcb.call(np.sin, x, result_shape=object()),
        names="result_shape")
    add("call result_shape of strings", lambda: hcb.call(
        np.sin, x, result_shape=np.array(["a", "b"])), names=("result_shape", "dtype"))
    add("call(1, x)", lambda: hcb.call(1, x, result_shape=x), names=("callable",))
    add("call result_shape=None, returns a value", lambda: _call_none_returns(x),
        expect=hcb.CallbackException, names=("result_shape", "structure", "pytree"))
    add("tap_with_device=True, tap takes no device", lambda: _tap_without_device(),
        expect=hcb.CallbackException, names=("device",))
    add("barrier_wait with nothing pending", lambda: _barrier_noop())

    # -- failing callbacks (calls in flight) --------------------------------------------------------
    for where in ("pmap", "pjit", "jit"):
        for api, failure in (("tap", "raise"), ("call", "raise"), ("call", "shape"),
                             ("call", "dtype"), ("call", "pytree")):
            add(f"{api} {failure} under {where}", _failure_probe(where, api, failure),
                isolated=where == "pjit", timeout=120)
        for api in ("tap", "call"):
            add(f"{api} KeyboardInterrupt under {where}",
                _failure_probe(where, api, "interrupt"), isolated=True, timeout=120)
    add("tap SystemExit under pmap", _failure_probe("pmap", "tap", "exit"),
        isolated=True, timeout=120)

    # -- re-entrancy ---------------------------------------------------------------------------------
    add("barrier_wait inside a tap", lambda: _reentrant(lambda: hcb.barrier_wait()),
        isolated=True, timeout=60, expect=(RuntimeError, hcb.CallbackException),
        names=("barrier_wait", "callback"))
    add("a jax computation inside a tap under pmap", lambda: _reentrant(
        lambda: float(jnp.sum(jnp.arange(4.0)))), isolated=True, timeout=60,
        expect=(RuntimeError, hcb.CallbackException), names=("callback",))


def _print_to(stream, x):
    out = jax.jit(lambda v: hcb.id_print(v, output_stream=stream))(x)
    hcb.barrier_wait()
    return out


def _print_threshold(x):
    buffer = io.StringIO()
    out = jax.jit(lambda v: hcb.id_print(v, output_stream=buffer, threshold="x"))(x)
    hcb.barrier_wait()
    return out


def _call_none_returns(x):
    _drain()
    out = jax.jit(lambda v: hcb.call(lambda a: a * 2, v, result_shape=None))(x)
    hcb.barrier_wait()
    return out


def _tap_without_device():
    _drain()
    f = pmapkit.pmap(lambda v: hcb.id_tap(_tap, v, tap_with_device=True))
    f(x8(n=4))
    hcb.barrier_wait()
    return Result("no error: tap_with_device=True called a tap without a device "
                  "parameter and nothing was reported")


def _barrier_noop():
    _drain()
    hcb.barrier_wait()
    hcb.barrier_wait()
    return Result("no-op")


def _reentrant(inside):
    """A tap that does ``inside()`` on the host under pmap; must not hang."""
    _drain()
    seen = []

    def tap(arg, transforms):
        seen.append(inside())

    f = pmapkit.pmap(lambda v: hcb.id_tap(tap, v) * 2)
    out = np.asarray(f(jnp.arange(4.0)))
    hcb.barrier_wait()
    if not np.allclose(out, np.arange(4.0) * 2):
        raise Wrong(f"returned {out}")
    return Result(f"ran ({len(seen)} taps)")
