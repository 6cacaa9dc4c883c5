"""A numpy input is read as it is at the call, on every route.

CPU dispatch is asynchronous in jax 0.10, and jaxlib puts a 64-byte-aligned
numpy array on the CPU without a copy (a large unaligned one it copies later,
on another thread): a caller that writes the next batch into the same buffer
right after the call changes what a computation still queued computes.
Classic JAX (0.4.30: ``golden/inputs_at_call_jax_0.4.30.json``, recorded by
``golden/inputs_at_call_classic.py``) computed the value at the call; so does
pmapkit, on each route: JAX's call of the program (one device, small inputs),
``HostSpec.put`` on the hit path, the miss path, donation, a compiled
``lower().compile()`` object, pjit with and without specs, a loaded export
artifact's call; one and 8 devices.

Each call is queued behind a slow computation on every device, so that a
buffer still shared would be read after the write (jax.jit itself gets most
of these wrong here: the first test shows the probe detects the drift).

A large input (over ``HOST_COPY_MAX_BYTES``) on CPU devices is not copied:
jaxlib reads the caller's array in place and the call returns once its
program has run, as classic JAX's synchronous CPU calls did; a donated one
is always copied.
"""
import json
import pathlib

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import pmapkit
from pmapkit import export as pe
from pmapkit.core.programs.compiled_program import HOST_COPY_MAX_BYTES

CALLS = 200
GOLDEN = pathlib.Path(__file__).parent / "golden" / "inputs_at_call_jax_0.4.30.json"
# Per device row: 16 float32 (64 bytes, aligned: aliased by jaxlib), and
# 1 MiB (copied later on a worker thread when unaligned, aliased when aligned;
# over the host route's bound, so put by HostSpec on one device).
SMALL, LARGE = 16, 1 << 18

_busy = jax.jit(lambda m: jnp.linalg.matrix_power(m, 24))


def aligned(rows, cols):
    """A float32 host array whose data starts on a 64-byte boundary (what
    jaxlib aliases), as numpy's large allocations and many small ones do."""
    nbytes = rows * cols * 4
    buf = np.empty(nbytes + 64, np.uint8)
    start = (-buf.ctypes.data) % 64
    return buf[start:start + nbytes].view(np.float32).reshape(rows, cols)


def wrong_results(call, x, devices, calls=CALLS):
    """How many of ``calls`` calls of ``call(x)`` (which doubles ``x``)
    computed something other than the value ``x`` had at the call, with
    ``x`` overwritten right after each call returns."""
    slow = [jax.device_put(np.eye(128, dtype=np.float32) * 0.5, d) for d in devices]
    wrong = 0
    for _ in range(calls):
        x[...] = 1.0
        for m in slow:
            _busy(m)
        y = call(x)
        x[...] = 99.0
        wrong += int(not np.all(np.asarray(y) == 2.0))
    return wrong


def _double(x):
    return x * 2.0


def _routes(ndev, cols):
    """name -> a callable doubling an (ndev, cols) host array."""
    devices = jax.devices()[:ndev]
    mesh = pmapkit.Mesh(np.array(devices), ("x",))
    pm = pmapkit.pmap(_double, devices=devices)
    donating = pmapkit.pmap(_double, devices=devices, donate_argnums=0)
    missing = pmapkit.pmap(_double, devices=devices)
    sharded = pmapkit.pjit(_double, in_axis_resources=P("x"), out_axis_resources=P("x"))
    specless = pmapkit.pjit(_double)

    def miss(x):
        missing.clear_cache()  # every call signs anew: the miss path puts x
        return missing(x)

    def pjit_on_mesh(x):
        with mesh:
            return sharded(x)

    compiled = pm.lower(aligned(ndev, cols)).compile()
    # A loaded artifact's call (a jax.jit of jax.export's call, on device 0).
    spec = jax.ShapeDtypeStruct((ndev, cols), jnp.float32)
    loaded = pe.deserialize(pe.serialize(pe.export(jax.jit(_double))(spec)))
    return {"hit": pm, "miss": miss, "donation": donating, "aot": compiled,
            "pjit": pjit_on_mesh, "pjit without specs": specless,
            "export": loaded.call}


def _export_spellings(ndev, cols):
    """name -> a callable doubling an (ndev, cols) host array through an
    exported function, each vintage's spelling: jax_export's
    ``call_exported(exp)``, jax.experimental.export's ``call(exp)`` and
    ``exp.call``, jax.export's ``exp.call`` (fresh and loaded); on 8
    devices the artifacts are pjit's (run under its mesh) and pmap's."""
    devices = jax.devices()[:ndev]
    spec = jax.ShapeDtypeStruct((ndev, cols), jnp.float32)
    mesh = pmapkit.Mesh(np.array(devices), ("x",))
    if ndev == 1:
        fun = _double
    else:
        fun = pmapkit.pjit(_double, in_axis_resources=P("x"), out_axis_resources=P("x"))
    with mesh:
        seed = pe.export(fun)(spec)
        experimental = pe.export(fun, lowering_platforms=("cpu",))(spec)
        current = pe.export(fun if ndev > 1 else jax.jit(fun), platforms=("cpu",))(spec)
    pmapped = pe.export(pmapkit.pmap(_double, devices=devices))(spec)
    calls = {"jax_export call_exported": pe.call_exported(seed),
             "experimental call": pe.call(experimental),
             "experimental Exported.call": experimental.call,
             "jax.export Exported.call": current.call,
             "loaded Exported.call": pe.deserialize(pe.serialize(current)).call,
             "pmap's Exported.call": pmapped.call}

    def on_mesh(call):
        def run(x):
            with mesh:
                return call(x)
        return run
    return {name: on_mesh(call) for name, call in calls.items()}


@pytest.mark.parametrize("ndev", [1, 8])
@pytest.mark.parametrize("cols", [SMALL, LARGE], ids=["64B", "1MiB"])
def test_every_export_spelling_computes_the_value_at_the_call(ndev, cols):
    devices = jax.devices()[:ndev]
    x = aligned(ndev, cols)
    wrong = {name: wrong_results(call, x, devices, calls=CALLS // 4)
             for name, call in _export_spellings(ndev, cols).items()}
    assert wrong == dict.fromkeys(wrong, 0)


def test_the_probe_sees_the_drift_of_jax_jit():
    # Without a snapshot (jax.jit 0.10 on CPU) the probe finds wrong values.
    x = aligned(1, LARGE)
    assert wrong_results(jax.jit(_double), x, jax.devices()[:1], calls=20) > 0


def test_classic_reference_computed_the_value_at_the_call():
    golden = json.loads(GOLDEN.read_text())
    assert golden["jax"] == "0.4.30"
    for row in golden["rows"]:
        if row["api"] == "jax.jit":
            assert row["wrong"] == 0, row


@pytest.mark.parametrize("ndev", [1, 8])
@pytest.mark.parametrize("cols", [SMALL, LARGE], ids=["64B", "1MiB"])
def test_every_route_computes_the_value_at_the_call(ndev, cols):
    devices = jax.devices()[:ndev]
    x = aligned(ndev, cols)
    wrong = {name: wrong_results(call, x, devices)
             for name, call in _routes(ndev, cols).items()}
    assert wrong == dict.fromkeys(wrong, 0)


def test_the_host_route_is_the_one_measured():
    # One device, small input: JAX's call of the program runs the hit path
    # (so the test above covered it); a 1 MiB input is put by HostSpec.
    f = pmapkit.pmap(lambda v: v * 2.0, devices=jax.devices()[:1])
    f(aligned(1, SMALL))
    f(aligned(1, LARGE))
    routed = {e.host_specs[0].aval.shape: e.host_call is not None
              for c in f._shared.caches.values() for e in c.values()}
    assert routed == {(1, SMALL): True, (1, LARGE): False}


def _entry(f):
    (entry,) = [e for c in f._shared.caches.values() for e in c.values()]
    return entry


@pytest.mark.parametrize("cols", [SMALL, LARGE], ids=["64B", "1MiB"])
def test_the_callers_array_is_never_the_programs_buffer(cols):
    # A donated numpy input: the program may write into what it is given,
    # which must be a copy, never the caller's memory (a large one too:
    # never read in place).
    f = pmapkit.pmap(lambda v: v + 1.0, devices=jax.devices()[:1], donate_argnums=0)
    x = aligned(1, cols)
    x[...] = 5.0
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), np.full((1, cols), 6.0))
    np.testing.assert_array_equal(x, np.full((1, cols), 5.0))
    assert not _entry(f).host_specs[0].aliases


def _cpu_count_ok(ndev):
    devices = jax.devices()[:ndev]
    if len(devices) < ndev or any(d.platform != "cpu" for d in devices):
        pytest.skip(f"needs {ndev} CPU devices")
    return devices


@pytest.mark.parametrize("ndev", [1, 8])
def test_a_large_input_is_read_in_place(ndev):
    # No copy on CPU: the device buffers the put makes are the caller's rows.
    assert LARGE * 4 > HOST_COPY_MAX_BYTES
    devices = _cpu_count_ok(ndev)
    f = pmapkit.pmap(_double, devices=devices)
    x = aligned(ndev, LARGE)
    x[...] = 1.0
    f(x)
    entry = _entry(f)
    spec = entry.host_specs[0]
    assert spec.aliases and entry.host_waits == (0,)
    put = spec.put(x)
    buffers = sorted(s.data.unsafe_buffer_pointer() for s in put.addressable_shards)
    assert buffers == [x[i].ctypes.data for i in range(ndev)]
    # A small input is still copied at the call.
    g = pmapkit.pmap(lambda v: v * 2.0, devices=devices)
    g(aligned(ndev, SMALL))
    assert not _entry(g).host_specs[0].aliases and _entry(g).host_waits is None


@pytest.mark.parametrize("ndev", [1, 8])
def test_a_call_reading_its_input_in_place_returns_after_its_program(ndev):
    # Queued behind slow work on every device, the call's results are
    # ready when it returns: nothing reads the caller's array afterwards.
    devices = _cpu_count_ok(ndev)
    f = pmapkit.pmap(_double, devices=devices)
    x = aligned(ndev, LARGE)
    x[...] = 1.0
    f(x)
    slow = [jax.device_put(np.eye(128, dtype=np.float32) * 0.5, d) for d in devices]
    for _ in range(20):
        for m in slow:
            _busy(m)
        y = f(x)
        assert y.is_ready()
        x[...] = 99.0
        np.testing.assert_array_equal(np.asarray(y), np.full((ndev, LARGE), 2.0))
        x[...] = 1.0


def test_a_broadcast_view_put_on_many_devices():
    # Classic code replicated parameters with ``np.broadcast_to`` (one buffer
    # seen by every device's slice): jaxlib refuses to read such slices
    # "during the call only", so HostSpec puts a private copy; the value is
    # still the one at the call.
    base = np.ones((3,), np.float32)
    stacked = np.broadcast_to(base, (8, 3))
    f = pmapkit.pmap(lambda p: p * 2)
    want = np.asarray(jax.pmap(lambda p: p * 2)(stacked))
    for _ in range(3):          # the miss path, then the hit path
        y = f(stacked)
        base[...] = 99.0
        np.testing.assert_array_equal(np.asarray(y), want)
        base[...] = 1.0


def test_a_float0_result_beside_a_large_input_read_in_place():
    # The call waits for its results; a float0 one (the gradient of an
    # integer, a numpy array) has nothing to wait for.
    def body(x, n):
        g = jax.grad(lambda x, n: x.sum() * n.sum().astype(x.dtype), argnums=1,
                     allow_int=True)(x, n)
        return x * 2.0, g
    f = pmapkit.pmap(body, devices=jax.devices()[:1])
    x = aligned(1, LARGE)
    x[...] = 1.0
    n = np.ones((1, 3), np.int32)
    for _ in range(3):
        y, g = f(x, n)
        assert g.dtype == jax.dtypes.float0 and g.shape == (1, 3)
        np.testing.assert_array_equal(np.asarray(y), np.full((1, LARGE), 2.0))
    assert _entry(f).host_waits == (0,)
