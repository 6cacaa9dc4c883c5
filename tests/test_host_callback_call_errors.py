"""A failed ``host_callback.call`` is raised to its caller, never a value.

On one device (jax.jit, eager, a 1-device pmap) the computation fails as
with ``jax.pure_callback``. In a pmapkit.pmap over 8 devices (run by
pmapkit or inside a user's jit), nested pmaps and a user's shard_map, the
failing device gets zeros until the end of its region, where every device
fails at once; in a whole-mesh program (jax.jit, pjit) every device meets
the call and fails with it. No device is left waiting in a collective (no
abort, no hang), the call raises, later calls run normally and
``barrier_wait`` reports it too. Whatever the body: collectives after the
call, the call inside scan or a cond taken on some devices only.
"""
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pmapkit
from pmapkit import host_callback as hcb

N = len(jax.devices())  # 8, forced by conftest


def host(x):
    if np.asarray(x).ravel()[0] == 3:  # device 3's slice
        raise ValueError("user exception")
    return x


def call(x):
    return hcb.call(host, x, result_shape=x)


BODIES = {
    "psum_after": lambda x: jax.lax.psum(call(x), "i"),
    "in_scan": lambda x: jax.lax.scan(
        lambda c, _: (jax.lax.psum(call(c), "i") * 0 + c, None), x, None, length=2)[0],
    "in_cond": lambda x: jax.lax.cond(x > 2, call, lambda v: v, x),
}


def assert_raises_user_exception(thunk):
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        np.asarray(thunk())
    assert "ValueError: user exception" in str(info.value)
    assert "CallbackException" in str(info.value)
    with pytest.raises(hcb.CallbackException) as barrier:
        hcb.barrier_wait()
    assert isinstance(barrier.value.__cause__, ValueError)


def fails_then_runs_as_jax_pmap(f, body):
    """``f`` raises the user's exception for device 3's slice, then runs
    (later calls are not failed by it) and agrees with jax.pmap."""
    assert_raises_user_exception(lambda: f(jnp.arange(N, dtype=jnp.float32)))
    ok = jnp.arange(N, dtype=jnp.float32) + 10  # no slice starts with 3
    want = jax.pmap(BODIES[body], axis_name="i")(ok)
    np.testing.assert_array_equal(np.asarray(f(ok)), np.asarray(want))
    hcb.barrier_wait()


@pytest.mark.parametrize("body", BODIES)
def test_pmap_on_8_devices_raises(body):
    fails_then_runs_as_jax_pmap(pmapkit.pmap(BODIES[body], axis_name="i"), body)


def test_one_device_programs_raise():
    x = jnp.float32(3)
    assert_raises_user_exception(lambda: jax.jit(call)(x))
    assert_raises_user_exception(lambda: call(x))
    assert_raises_user_exception(
        lambda: pmapkit.pmap(call, devices=jax.devices()[:1])(x[None]))
    np.testing.assert_array_equal(np.asarray(jax.jit(call)(x + 1)), 4.0)
    hcb.barrier_wait()


def _assert_every_device_fails(out):
    """Every device's shard of ``out`` reads as the failure, none as a
    value: the devices whose call did not fail raise too. Which device's
    error a shard shows is the runtime's pick; a device that did not fail
    reports the failure of the other one (device 3), with its cause."""
    texts = []
    for shard in sorted(out.addressable_shards, key=lambda s: s.device.id):
        with pytest.raises(jax.errors.JaxRuntimeError) as info:
            np.asarray(shard.data)
        text = str(info.value)
        assert "CallbackException" in text and "ValueError: user exception" in text, text
        if "failed on" in text:
            device_3 = str(jax.devices()[3])
            assert "host_callback.call failed on 1 other device(s) of this computation" in text
            assert f"(not on {device_3})" not in text, text
            assert "every device's computation fails with it" in text
        texts.append(text)
    assert len(texts) == N
    with pytest.raises(hcb.CallbackException) as barrier:
        hcb.barrier_wait()
    assert isinstance(barrier.value.__cause__, ValueError)


def _region_programs():
    P = jax.sharding.PartitionSpec
    body = BODIES["psum_after"]
    return {
        "pmap_inside_jit": jax.jit(pmapkit.pmap(body, axis_name="i")),
        "user_shard_map": jax.jit(jax.shard_map(
            lambda x: body(x[0])[None], mesh=_mesh(), in_specs=P("i"),
            out_specs=P("i"), check_vma=False)),
    }


@pytest.mark.parametrize("where", ["pmap_inside_jit", "user_shard_map"])
def test_devices_that_did_not_fail_raise_too(where):
    # Only device 3's call fails; the other seven devices must not hand back
    # a value (a multi-process run shows it per process; here, per shard).
    f = _region_programs()[where]
    for _ in range(3):
        _assert_every_device_fails(f(jnp.arange(N, dtype=jnp.float32)))
    ok = jnp.arange(N, dtype=jnp.float32) + 10
    np.testing.assert_array_equal(np.asarray(f(ok)), np.full(N, np.sum(np.arange(N) + 10.0)))
    hcb.barrier_wait()


def test_devices_that_did_not_fail_report_this_runs_failure():
    # What the other devices report is the failure of their own run, kept
    # only until every device of the region has raised: a later run failing
    # otherwise never reports an earlier run's exception.
    from pmapkit.host_callback import _failures

    def failing_with(message):
        def host_fn(x):
            if np.asarray(x).ravel()[0] == 3:
                raise ValueError(message)
            return x
        # Inside a user's jit: each device's shard reads as its own error.
        return jax.jit(pmapkit.pmap(lambda x: jax.lax.psum(
            hcb.call(host_fn, x, result_shape=x), "i"), axis_name="i"))

    for message in ("first failure", "second failure"):
        out = failing_with(message)(jnp.arange(N, dtype=jnp.float32))
        for shard in out.addressable_shards:
            with pytest.raises(jax.errors.JaxRuntimeError) as info:
                np.asarray(shard.data)
            assert f"ValueError: {message}" in str(info.value), str(info.value)
            assert "first failure" not in str(info.value) or message == "first failure"
        with pytest.raises(hcb.CallbackException):
            hcb.barrier_wait()
        assert not _failures._take.seen.failed and not _failures._take.raised.counts


# -- beyond pmapkit's own pmap programs --------------------------------------------
def host_whole(x):
    if 3 in np.asarray(x):  # the whole value: device 3's slice among it
        raise ValueError("user exception")
    return x


def call_whole(x):
    return hcb.call(host_whole, x, result_shape=x)


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()), ("i",))


def _sharded(x):
    return jax.device_put(x, jax.sharding.NamedSharding(_mesh(), jax.sharding.PartitionSpec("i")))


WHOLE_MESH = {
    # Collectives after the call (the sum over all devices), and before it.
    "sum_after": lambda x: call_whole(x).sum() + x,
    "in_scan": lambda x: jax.lax.scan(
        lambda c, _: (call_whole(c).sum() * 0 + c, None), x, None, length=2)[0],
    "in_cond": lambda x: jax.lax.cond(x.sum() > 0, call_whole, lambda v: v, x),
}


@pytest.mark.parametrize("body", WHOLE_MESH)
def test_whole_mesh_jit_on_8_devices_raises(body):
    f = jax.jit(WHOLE_MESH[body])
    x = _sharded(jnp.arange(N, dtype=jnp.float32))
    assert_raises_user_exception(lambda: f(x))
    ok = x + 10
    want = jax.jit(lambda v: WHOLE_MESH[body](v))(ok)  # host_whole returns its input
    np.testing.assert_array_equal(np.asarray(f(ok)), np.asarray(want))
    hcb.barrier_wait()


def test_pjit_on_8_devices_raises_and_next_calls_run():
    P = jax.sharding.PartitionSpec
    f = pmapkit.pjit(WHOLE_MESH["sum_after"], in_axis_resources=P("i"),
                     out_axis_resources=P("i"))
    x = jnp.arange(N, dtype=jnp.float32)
    with pmapkit.Mesh(np.array(jax.devices()), ("i",)):
        # Two failing runs in flight, then a good one: only the failed fail.
        failed = [f(x), f(x)]
        good = f(x + 10)
        for result in failed:
            with pytest.raises(jax.errors.JaxRuntimeError,
                               match="(?s)CallbackException.*ValueError: user exception"):
                np.asarray(result)
        np.testing.assert_array_equal(np.asarray(good),
                                      np.asarray(WHOLE_MESH["sum_after"](x + 10)))
    with pytest.raises(hcb.CallbackException):
        hcb.barrier_wait()
    hcb.barrier_wait()


@pytest.mark.parametrize("body", BODIES)
def test_pmap_inside_user_jit_raises(body):
    with pytest.warns(UserWarning, match="includes a pmap"):
        fails_then_runs_as_jax_pmap(jax.jit(pmapkit.pmap(BODIES[body], axis_name="i")), body)


def test_nested_pmaps_raise():
    f = pmapkit.pmap(pmapkit.pmap(lambda x: jax.lax.psum(call(x), ("i", "j")),
                                  axis_name="j"), axis_name="i")
    x = jnp.arange(N, dtype=jnp.float32).reshape(2, N // 2)
    assert_raises_user_exception(lambda: f(x))
    np.testing.assert_array_equal(np.asarray(f(x + 10)),
                                  np.full((2, N // 2), np.sum(np.arange(N) + 10.0)))
    hcb.barrier_wait()


@pytest.mark.parametrize("body", BODIES)
def test_user_shard_map_raises(body):
    P = jax.sharding.PartitionSpec

    def per_device(x):
        return BODIES[body](x[0])[None]
    fails_then_runs_as_jax_pmap(
        jax.jit(jax.shard_map(per_device, mesh=_mesh(), in_specs=P("i"),
                              out_specs=P("i"), check_vma=False)), body)


def test_whole_mesh_calls_from_several_threads_get_their_own_results():
    # Runs dispatched from several threads may reach the devices in different
    # orders; each device takes the outcome of the run on its operand.
    f = jax.jit(lambda x: (call_whole(x) * 2).sum() + x)
    wrong, failed = [], []

    def worker(k):
        try:
            for i in range(10):
                x = _sharded(jnp.full(N, float(10 + k * 100 + i)))
                got = np.asarray(f(x))
                want = np.asarray(x) * 2 * N + np.asarray(x)
                if not np.array_equal(got, want):
                    wrong.append((k, i))
        except Exception as exc:  # noqa: BLE001 - reported below
            failed.append(exc)
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread's whole-mesh calls hung"
    assert not failed and not wrong
    hcb.barrier_wait()


def test_a_whole_mesh_call_crosses_into_python_once_per_run(monkeypatch):
    # Only the caller's device runs host code when the function succeeds (as
    # jax.pure_callback crosses once); the others learn its result from XLA.
    from pmapkit.host_callback import _primitive
    crossings = []
    one, every = _primitive._one_device_host_fn, _primitive._per_device_host_fn

    def counted_one(device, invoke, *flat):
        crossings.append(device)
        return one(device, invoke, *flat)

    def counted_every(devices, invoke, partition_id, *flat):
        crossings.append(devices[int(partition_id)])
        return every(devices, invoke, partition_id, *flat)
    monkeypatch.setattr(_primitive, "_one_device_host_fn", counted_one)
    monkeypatch.setattr(_primitive, "_per_device_host_fn", counted_every)
    f = jax.jit(lambda x: hcb.call(lambda v: v * 2, x, result_shape=x) + 1.0)
    x = _sharded(jnp.arange(N, dtype=jnp.float32))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), np.arange(N) * 2.0 + 1.0)
    hcb.barrier_wait()
    assert crossings == [jax.devices()[0]] * 3


def test_failed_whole_mesh_runs_are_kept_within_a_bound():
    # Each device of a failed run raises the caller's exception (kept by its
    # number); only the last KEPT_FAILURES are kept.
    from pmapkit.host_callback import _runtime
    f = jax.jit(WHOLE_MESH["sum_after"])
    x = _sharded(jnp.arange(N, dtype=jnp.float32))
    for _ in range(_runtime.KEPT_FAILURES + 3):
        out = f(x)
        # Every device's result is the error, never the zeros the caller got.
        for shard in out.addressable_shards:
            with pytest.raises(jax.errors.JaxRuntimeError,
                               match="(?s)CallbackException.*ValueError: user exception"):
                np.asarray(shard.data)
        with pytest.raises(hcb.CallbackException):
            hcb.barrier_wait()
    jax.effects_barrier()
    assert len(_runtime.caller_failures.failed) == _runtime.KEPT_FAILURES
    np.testing.assert_array_equal(np.asarray(f(x + 10)),
                                  np.asarray(WHOLE_MESH["sum_after"](x + 10)))
    hcb.barrier_wait()
