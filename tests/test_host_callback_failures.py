"""Failing callbacks: a tap never stops the device computation; a failed
``call`` never hands back a value where its failure can be raised safely.

A tap or ``call`` whose function raises (a ``KeyboardInterrupt`` included) or
whose ``call`` result has another shape or dtype: a tap's computation runs
on; a failed ``call`` fails its computation under jax.jit on one device (the
caller gets the error, naming the original one, as with jax.pure_callback)
and under pmapkit.pmap over 4 devices (every device fails at the end of the
body: one failing alone would leave the others in a collective until
XLA:CPU aborts), and under pmapkit.pjit over 4 devices gives zeros of its
declared shape. The next valid call succeeds even with
failed ones still in flight, and ``barrier_wait()`` raises
``CallbackException`` once, chained to the original exception and naming an
interrupt as such. The ``call`` cases run in a subprocess (a failing
``call`` under pjit used to abort the whole process)."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pmapkit
from pmapkit import host_callback as hcb

from _hcb_helpers import drained  # noqa: F401  (fixture)

SCRIPT = os.path.join(os.path.dirname(__file__), "_hcb_failures_script.py")
SUBPROCESS_TIMEOUT_S = 240
WHERE = ("pmap", "pjit", "jit")


def fails_on_marked(error):
    """A tap raising ``error`` on values marked with 1000 or more (the failure
    rides on the data, so calls in flight fail whenever they run)."""
    seen = []

    def tap(arg, transforms):
        if np.asarray(arg).ravel()[0] >= 1000:
            raise error("tap function failed")
        seen.append(np.asarray(arg).tolist())
    return tap, seen


def program(where, tap):
    body = lambda x: hcb.id_tap(tap, x) * 2  # noqa: E731
    if where == "pmap":
        return pmapkit.pmap(body), jnp.arange(4.0)
    if where == "jit":
        return jax.jit(body), jnp.arange(3.0)
    mesh = pmapkit.Mesh(np.array(jax.devices()[:4]), ("d",))
    pjitted = pmapkit.pjit(body, in_axis_resources=P("d"), out_axis_resources=P("d"))

    def under_mesh(x):
        with mesh:
            return pjitted(x)
    return under_mesh, jnp.arange(8.0)


@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
@pytest.mark.parametrize("where", WHERE)
def test_failing_tap_with_calls_in_flight(where, error):
    tap, seen = fails_on_marked(error)
    f, x = program(where, tap)
    in_flight = [f(x + 1000) for _ in range(3)]   # none waited for
    np.testing.assert_allclose(f(x), 2 * x)        # the next valid call
    for out in in_flight:                          # the failed ones ran on too
        np.testing.assert_allclose(out, 2 * (x + 1000))
    with pytest.raises(hcb.CallbackException) as info:
        hcb.barrier_wait()
    assert type(info.value.__cause__) is error
    assert str(info.value.__cause__) == "tap function failed"
    assert "tap function failed" in str(info.value)
    if error is KeyboardInterrupt:
        assert "interrupted by KeyboardInterrupt" in str(info.value)
    else:
        assert str(info.value).startswith(
            "There were exceptions during callback processing. Last one was: ")
    hcb.barrier_wait()  # raised once
    np.testing.assert_allclose(f(x), 2 * x)
    hcb.barrier_wait()
    assert len(seen) == (2 * 4 if where == "pmap" else 2)


def test_interrupt_is_reported_over_later_errors():
    def tap(arg, transforms):
        code = int(arg)
        if code == 1:
            raise KeyboardInterrupt("interrupted first")
        if code == 2:
            raise ValueError("ordinary error after it")
    f = jax.jit(lambda x: hcb.id_tap(tap, x))
    for code in (1, 2, 2, 0):
        f(jnp.int32(code))
    with pytest.raises(hcb.CallbackException,
                       match="interrupted by KeyboardInterrupt") as info:
        hcb.barrier_wait()
    assert type(info.value.__cause__) is KeyboardInterrupt
    assert str(info.value.__cause__) == "interrupted first"
    hcb.barrier_wait()
    # Ordinary errors alone: the last one is reported (classic).
    for code in (2, 0):
        f(jnp.int32(code))
    with pytest.raises(hcb.CallbackException, match="ordinary error after it"):
        hcb.barrier_wait()


# -- call: in a subprocess -------------------------------------------------------
@pytest.fixture(scope="module")
def call_reports():
    proc = subprocess.run([sys.executable, "-P", SCRIPT], capture_output=True,
                          text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert reports and reports[-1] == {"done": True}, proc.stdout[-2000:]
    return {(r["where"], r["failure"]): r for r in reports[:-1]}


CAUSES = {"raise": ("ValueError", "host function failed"),
          "interrupt": ("KeyboardInterrupt", "stop now"),
          "shape": ("TypeError", "but result_shape declared"),
          "dtype": ("TypeError", "but result_shape declared")}


@pytest.mark.parametrize("failure", ["raise", "shape", "dtype", "interrupt"])
@pytest.mark.parametrize("where", WHERE)
def test_failing_call_fails_its_result_and_reports_at_barrier(call_reports, where, failure):
    rep = call_reports[(where, failure)]
    cause, text = CAUSES[failure]
    # jit (one device), pjit (a whole-mesh program on 4 devices, which meet
    # at the call) and pmap (4 devices, all failing at the end of the body):
    # the call raises, naming the original error.
    # The error's type is JAX's for a failing host function in the same
    # program: a JaxRuntimeError, or where JAX dispatches a one-device jit
    # on its C++ path (as it does jax.pure_callback's and this call's), the
    # ValueError that path raises.
    if rep["jax_failed_results"] is None:
        expected_types = ["JaxRuntimeError"] * len(rep["failed_results"])
    else:
        expected_types = [r["error"] for r in rep["jax_failed_results"]]
        assert set(expected_types) <= {"JaxRuntimeError", "ValueError"}, rep
    assert [f["error"] for f in rep["failed_results"]] == expected_types, rep
    for failed in rep["failed_results"]:
        assert "CallbackException" in failed["message"]
        assert text in failed["message"] and cause in failed["message"]
    assert rep["next_result"] == rep["expected"]
    barrier = rep["barrier"]
    assert barrier["type"] == "CallbackException" and barrier["cause"] == cause
    assert text in barrier["cause_message"]
    if failure == "shape":
        assert "returned float32[" in barrier["cause_message"]
    if failure == "dtype":
        assert "returned int32[" in barrier["cause_message"]
    if failure == "interrupt":
        assert "interrupted by KeyboardInterrupt" in barrier["message"]
    assert rep["second_barrier"] is None
    assert rep["later_result"] == rep["expected"]


def test_barrier_wait_inside_a_tap_is_an_error_not_a_deadlock(drained):
    # It would wait for the computation running the tap (it hung, now and
    # then); it raises instead, and the outer barrier_wait reports it.
    def tap(arg, transforms):
        hcb.barrier_wait()

    f = pmapkit.pmap(lambda v: hcb.id_tap(tap, v) * 2)
    for _ in range(5):
        out = f(jnp.arange(4.0))
        np.testing.assert_array_equal(np.asarray(out), np.arange(4.0) * 2)
        with pytest.raises(hcb.CallbackException) as info:
            hcb.barrier_wait()
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "called from inside a host callback" in str(info.value.__cause__)
