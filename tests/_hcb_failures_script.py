"""Run by tests/test_host_callback_failures.py in a subprocess (a failing
``call`` could abort the whole process): ``host_callback.call`` whose
function raises, returns another shape or another dtype, or is interrupted,
under pmapkit.pmap, pmapkit.pjit (4 devices) and jax.jit.

One compiled program per transformation. Prints one JSON line per case to
stdout.
"""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import pmapkit  # noqa: E402
from pmapkit import host_callback as hcb  # noqa: E402

# The failure rides on the data (the thousands of the argument's values),
# so calls in flight fail or succeed deterministically, whenever they run.
MODES = ("raise", "shape", "dtype", "interrupt")


def host(a):
    now = (("ok",) + MODES)[int(np.asarray(a).ravel()[0] // 1000)]
    if now == "raise":
        raise ValueError("host function failed")
    if now == "interrupt":
        raise KeyboardInterrupt("stop now")
    if now == "shape":
        return np.ones(a.shape + (3,), a.dtype)
    if now == "dtype":
        return np.ones(a.shape, np.int32)
    return a * 10 + 1


def body(x):
    return hcb.call(host, x, result_shape=x) + 1


def jax_body(x):
    """``body`` with ``jax.pure_callback``: what JAX itself raises when a host
    function fails in a jit on one device."""
    return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1


JAX_REFERENCE = {"jit": jax.jit(jax_body)}


def programs():
    devices = np.array(jax.devices()[:4])
    mesh = pmapkit.Mesh(devices, ("d",))
    pjitted = pmapkit.pjit(body, in_axis_resources=P("d"), out_axis_resources=P("d"))

    def under_mesh(x):
        with mesh:
            return pjitted(x)
    return {"pmap": (pmapkit.pmap(body), jnp.arange(4.0)),
            "pjit": (under_mesh, jnp.arange(8.0)),
            "jit": (jax.jit(body), jnp.arange(3.0))}


def expect(x):
    return (np.asarray(x) * 10 + 2).tolist()


def read_failed(result):
    """What reading a failed call's result gives: its values, or the error."""
    try:
        if isinstance(result, Exception):
            raise result
        return np.asarray(result).tolist()
    except Exception as exc:  # noqa: BLE001
        return {"error": type(exc).__name__, "message": str(exc)[-3000:]}


def jax_failed(where, x, bad):
    """The same two failing calls with JAX's own callback, where JAX has one
    that raises (None elsewhere)."""
    reference = JAX_REFERENCE.get(where)
    if reference is None:
        return None
    reference(x)  # compiled and warm, as ``fun`` is
    failed = []
    for _ in range(2):
        try:
            failed.append(reference(bad))
        except Exception as exc:  # noqa: BLE001
            failed.append(exc)
    return [read_failed(r) for r in failed]


def run_case(where, fun, x, failure):
    bad = x + 1000 * (1 + MODES.index(failure))
    failed = []
    for _ in range(2):  # both in flight before anything waits (when they return)
        try:
            failed.append(fun(bad))
        except Exception as exc:  # noqa: BLE001  (raised by the call itself)
            failed.append(exc)
    following = fun(x)                     # the next valid call
    report = {"where": where, "failure": failure,
              "failed_results": [read_failed(r) for r in failed],
              "jax_failed_results": jax_failed(where, x, bad),
              "next_result": np.asarray(following).tolist(), "expected": expect(x)}
    try:
        hcb.barrier_wait()
        report["barrier"] = None
    except hcb.CallbackException as exc:
        report["barrier"] = {"type": type(exc).__name__, "message": str(exc)[:300],
                             "cause": type(exc.__cause__).__name__,
                             "cause_message": str(exc.__cause__)}
    try:
        hcb.barrier_wait()
        report["second_barrier"] = None
    except hcb.CallbackException as exc:
        report["second_barrier"] = str(exc)[:200]
    report["later_result"] = np.asarray(fun(x)).tolist()
    hcb.barrier_wait()
    return report


def main():
    for where, (fun, x) in programs().items():
        fun(x)  # compile
        hcb.barrier_wait()
        for failure in MODES:
            print(json.dumps(run_case(where, fun, x, failure)), flush=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
