"""pmapkit.host_callback with pmapkit.pmap (one tap per device, with its
slice and device), pmapkit.pjit (one tap, with the gathered operand), the
cached-call path (no re-trace, no re-compile) and barrier_wait across
threads."""
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pmapkit
from pmapkit import host_callback as hcb

from _hcb_helpers import (Recorder, drained, floats, rec,  # noqa: F401  (fixtures)
                          square_tapping_its_tangent)

N = 8
JOIN_TIMEOUT_S = 120   # a thread still running past it has hung


def by_device(calls):
    """{device id: [tapped values in order]}."""
    out = {}
    for arg, _, device in calls:
        out.setdefault(device.id, []).append(floats(arg))
    return out


class CompileCounter:
    """Counts XLA backend compilations (JAX's public monitoring events)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kwargs):
        if event == self.EVENT:
            self.count += 1


_compiles = CompileCounter()


# -- pmap ------------------------------------------------------------------------
def test_pmap_one_tap_per_device_with_its_slice(rec):
    f = pmapkit.pmap(lambda x: hcb.id_tap(rec, x * 2, tap_with_device=True) + 1)
    x = jnp.arange(float(N))
    np.testing.assert_allclose(f(x), 2 * np.arange(N) + 1)
    seen = by_device(rec.take())
    assert seen == {d.id: [2.0 * i] for i, d in enumerate(jax.devices()[:N])}


def test_pmap_per_device_program_order(rec):
    def body(x):
        for k in range(4):
            x = hcb.id_tap(rec, x + 1.0, tap_with_device=True)
        return x
    pmapkit.pmap(body)(jnp.zeros(4))
    seen = by_device(rec.take())
    assert sorted(seen) == [d.id for d in jax.devices()[:4]]
    assert all(v == [1.0, 2.0, 3.0, 4.0] for v in seen.values())


def test_pmap_devices_argument_order(rec):
    devices = jax.devices()[:4][::-1]
    pmapkit.pmap(lambda x: hcb.id_tap(rec, x, tap_with_device=True),
                 devices=devices)(jnp.arange(4.0))
    seen = by_device(rec.take())
    assert seen == {d.id: [float(i)] for i, d in enumerate(devices)}


def test_pmap_broadcast_operand(rec):
    pmapkit.pmap(lambda x, y: hcb.id_tap(rec, (x, y), tap_with_device=True),
                 in_axes=(0, None))(jnp.arange(2.0), jnp.ones(3))
    seen = by_device(rec.take())
    assert seen == {0: [(0.0, [1.0, 1.0, 1.0])], 1: [(1.0, [1.0, 1.0, 1.0])]}


def test_pmap_same_taps_as_jax_pmap_debug_callback():
    ours, theirs, lock = Recorder(), {}, threading.Lock()

    def record_theirs(v, i):
        with lock:
            theirs.setdefault(int(i), []).append(np.asarray(v).tolist())

    def body(tap, x):
        y = tap(x * 3.0)
        return tap(jnp.sin(y))

    def theirs_tap(v):
        jax.debug.callback(record_theirs, v, jax.lax.axis_index("i"))
        return v
    x = jnp.arange(12.0).reshape(4, 3)
    a = pmapkit.pmap(lambda x: body(
        lambda v: hcb.id_tap(ours, v, tap_with_device=True), x))(x)
    b = jax.pmap(lambda x: body(theirs_tap, x), axis_name="i")(x)
    jax.effects_barrier()
    np.testing.assert_allclose(a, b, rtol=1e-6)
    seen = by_device(ours.take())
    assert {k: v for k, v in seen.items()} == {
        jax.devices()[i].id: v for i, v in theirs.items()}


def test_pmap_cached_call_does_not_retrace_or_recompile(rec):
    traces = []

    def body(x):
        traces.append(1)
        return hcb.id_tap(rec, x * 2) + 1
    f = pmapkit.pmap(body)
    x = jnp.arange(float(N))
    f(x)
    before = _compiles.count
    for _ in range(5):
        out = f(x)
    np.testing.assert_allclose(out, 2 * np.arange(N) + 1)
    assert len(traces) == 1 and f._cache_size == 1
    assert _compiles.count == before
    assert len(rec.take()) == 6 * N


def test_pmap_cached_call_feeds_outputs_back(rec):
    f = pmapkit.pmap(lambda x: hcb.id_tap(rec, x, tap_with_device=True) + 1)
    x = jnp.zeros(4)
    for _ in range(3):
        x = f(x)
    np.testing.assert_allclose(x, [3.0] * 4)
    assert all(v == [0.0, 1.0, 2.0] for v in by_device(rec.take()).values())


def test_pmap_call_returns_each_device_its_slice():
    f = pmapkit.pmap(lambda x: hcb.call(lambda a, device: a + device.id, x,
                                        result_shape=x, call_with_device=True))
    out = f(jnp.zeros((N, 2)))
    ids = [d.id for d in jax.devices()[:N]]
    np.testing.assert_allclose(out, np.repeat(np.array(ids, np.float32)[:, None], 2, 1))


def test_pmap_seed_host_sin_example(capsys):
    def host_sin(x, *, device):
        print(f"Invoking host_sin with {x.shape} on {device}")
        return np.sin(x)
    out = pmapkit.pmap(lambda x: hcb.call(host_sin, x, result_shape=x,
                                          call_with_device=True))(
        np.ones((2, 4), dtype=np.float32))
    np.testing.assert_allclose(out, np.sin(np.ones((2, 4))), rtol=1e-6)
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == [f"Invoking host_sin with (4,) on {d}" for d in jax.devices()[:2]]


def test_pmap_id_print_with_device():
    import io
    stream = io.StringIO()
    pmapkit.pmap(lambda x: hcb.id_print(x * x, what="x^2", tap_with_device=True,
                                        output_stream=stream),
                 devices=jax.local_devices()[:2])(np.array([3.0, 4.0], np.float32))
    hcb.barrier_wait()
    lines = stream.getvalue().splitlines()
    # Each printout (keywords line, value line) is written under one lock.
    chunks = sorted([lines[0:2], lines[2:4]])
    assert len(lines) == 4
    assert chunks == [[f"device: {jax.devices()[0]} what: x^2", "9."],
                      [f"device: {jax.devices()[1]} what: x^2", "16."]]


def test_pmap_with_vmap_inside(rec):
    f = pmapkit.pmap(lambda x: jax.vmap(lambda r: hcb.id_tap(rec, r, tap_with_device=True))(x))
    f(jnp.ones((2, 3)))
    calls = rec.take()
    assert len(calls) == 2
    assert all(t == (("batch", {"batch_dims": (0,)}),) and a.shape == (3,)
               for a, t, _ in calls)


def test_vmap_of_pmap(rec):
    f = jax.vmap(pmapkit.pmap(lambda x: hcb.id_tap(rec, x * 2, tap_with_device=True)))
    out = f(jnp.ones((3, 2)))
    np.testing.assert_allclose(out, np.full((3, 2), 2.0))
    calls = rec.take()
    assert sorted(d.id for _, _, d in calls) == [d.id for d in jax.devices()[:2]]
    assert all(floats(a) == [2.0, 2.0, 2.0] for a, _, _ in calls)


def test_grad_of_pmap_taps_primals_per_device(rec):
    x = jnp.arange(4.0)
    g = jax.grad(lambda x: pmapkit.pmap(
        lambda v: hcb.id_tap(rec, v * 2, tap_with_device=True) * v)(x).sum())(x)
    np.testing.assert_allclose(g, 4 * np.arange(4.0))
    seen = by_device(rec.take())
    assert seen == {d.id: [2.0 * i] for i, d in enumerate(jax.devices()[:4])}


def test_grad_of_pmap_taps_transposed_tangents_per_device(rec):
    f = square_tapping_its_tangent(rec, tap_with_device=True)
    x = jnp.arange(4.0)
    g = jax.grad(lambda x: pmapkit.pmap(lambda v: f(v))(x).sum())(x)
    np.testing.assert_allclose(g, 2 * x)
    calls = rec.take()
    assert {d.id: (floats(a), t) for a, t, d in calls} == {
        i: (2.0 * i, (("transpose", {}),)) for i in range(4)}


def test_pmap_inside_jit(rec):
    f = jax.jit(lambda x: pmapkit.pmap(lambda v: hcb.id_tap(rec, v, tap_with_device=True))(x) * 2)
    np.testing.assert_allclose(f(jnp.arange(4.0)), 2 * np.arange(4.0))
    assert by_device(rec.take()) == {d.id: [float(i)]
                                    for i, d in enumerate(jax.devices()[:4])}


def test_pmap_scan_with_taps(rec):
    def body(x):
        return jax.lax.scan(lambda c, a: (hcb.id_tap(rec, c + a, tap_with_device=True), None),
                            x, jnp.arange(3.0))[0]
    pmapkit.pmap(body)(jnp.array([0.0, 10.0]))
    assert by_device(rec.take()) == {0: [0.0, 1.0, 3.0], 1: [10.0, 11.0, 13.0]}


def test_pmap_tap_exception_does_not_hang():
    def bad(arg, transforms, device):
        if device.id == 1:
            raise ValueError("device 1 failed")
    out = pmapkit.pmap(lambda x: hcb.id_tap(bad, x, tap_with_device=True) + 1)(
        jnp.zeros(4))
    np.testing.assert_allclose(out, np.ones(4))
    with pytest.raises(hcb.CallbackException, match="device 1 failed"):
        hcb.barrier_wait()


# -- pjit -------------------------------------------------------------------------
@pytest.fixture
def mesh4():
    devices = np.array(jax.devices()[:4])
    with pmapkit.Mesh(devices, ("d",)):
        yield jax.sharding.Mesh(devices, ("d",))


def test_pjit_taps_once_with_gathered_operand(rec, mesh4):
    f = pmapkit.pjit(lambda x: hcb.id_tap(rec, x * 2, tap_with_device=True) + 1,
                     in_axis_resources=P("d"), out_axis_resources=P("d"))
    out = f(jnp.arange(8.0))
    assert out.sharding == jax.sharding.NamedSharding(mesh4, P("d"))
    np.testing.assert_allclose(out, 2 * np.arange(8.0) + 1)
    (arg, _, device), = rec.take()
    assert floats(arg) == [2.0 * i for i in range(8)] and device == jax.devices()[0]


def test_pjit_device_index(rec, mesh4):
    f = pmapkit.pjit(lambda x: hcb.id_tap(rec, x, tap_with_device=True, device_index=2),
                     in_axis_resources=P("d"), out_axis_resources=P("d"))
    f(jnp.arange(8.0))
    (arg, _, device), = rec.take()
    assert device == jax.devices()[2] and arg.shape == (8,)


def test_pjit_call_returns_whole_result(mesh4):
    f = pmapkit.pjit(lambda x: hcb.call(lambda a: a * 10, x, result_shape=x),
                     in_axis_resources=P("d"), out_axis_resources=P("d"))
    out = f(jnp.arange(8.0))
    np.testing.assert_allclose(out, 10 * np.arange(8.0))
    assert out.sharding.spec == P("d")


def test_pjit_cached_call_does_not_retrace(rec, mesh4):
    traces = []

    def body(x):
        traces.append(1)
        return hcb.id_tap(rec, x) * 2
    f = pmapkit.pjit(body, in_axis_resources=P("d"), out_axis_resources=P("d"))
    x = jnp.arange(8.0)
    f(x)
    before = _compiles.count
    for _ in range(3):
        f(x)
    assert len(traces) == 1 and _compiles.count == before
    assert len(rec.take()) == 4


def test_grad_of_pjit(rec, mesh4):
    f = pmapkit.pjit(lambda x: (hcb.id_tap(rec, x) * x).sum(),
                     in_axis_resources=P("d"), out_axis_resources=None)
    np.testing.assert_allclose(jax.grad(f)(jnp.arange(8.0)), 2 * np.arange(8.0))
    (arg, _, _), = rec.take()
    assert floats(arg) == [float(i) for i in range(8)]


def test_pjit_same_as_jax_jit_debug_callback(mesh4):
    ours, theirs = Recorder(), []
    sharding = jax.sharding.NamedSharding(mesh4, P("d"))

    def theirs_tap(v):
        jax.debug.callback(lambda a: theirs.append(np.asarray(a).tolist()), v)
        return v
    x = jnp.arange(8.0)
    a = pmapkit.pjit(lambda x: hcb.id_tap(ours, x + 1) * 2,
                     in_axis_resources=P("d"), out_axis_resources=P("d"))(x)
    b = jax.jit(lambda x: theirs_tap(x + 1) * 2, in_shardings=sharding,
                out_shardings=sharding)(jax.device_put(x, sharding))
    # (placed first: under the mesh, which is JAX's too, x is committed)
    jax.effects_barrier()
    np.testing.assert_allclose(a, b)
    assert ours.values() == theirs


# -- threads ----------------------------------------------------------------------
def test_barrier_wait_covers_four_threads():
    seen, lock = [], threading.Lock()

    def slow(arg, transforms):
        time.sleep(0.01)
        with lock:
            seen.append(float(np.asarray(arg).ravel()[0]))
    f = jax.jit(lambda x: hcb.id_tap(slow, x))
    g = pmapkit.pmap(lambda x: hcb.id_tap(slow, x))
    f(0.0), g(jnp.zeros(4))  # compile outside the threads
    hcb.barrier_wait()
    seen.clear()

    def work(k):
        for _ in range(3):
            f(float(k))
            g(jnp.full((4,), float(k)))
    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread hung"
    hcb.barrier_wait()
    assert len(seen) == 4 * 3 * (1 + 4)
    assert sorted(set(seen)) == [0.0, 1.0, 2.0, 3.0]


def test_barrier_wait_from_other_threads_concurrently(rec):
    f = jax.jit(lambda x: hcb.id_tap(rec, x))
    errors = []

    def work(k):
        try:
            for i in range(5):
                f(float(k * 10 + i))
            hcb.barrier_wait(f"thread{k}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors
    assert sorted(rec.values()) == sorted(float(k * 10 + i) for k in range(4)
                                          for i in range(5))


def test_pmap_call_wrong_shape_raises_and_barrier_reports_it():
    f = pmapkit.pmap(lambda x: hcb.call(lambda a: np.ones(5, np.float32), x,
                                        result_shape=x))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"returned float32\[5\]"):
        np.asarray(f(jnp.ones((4, 2))))
    with pytest.raises(hcb.CallbackException, match=r"returned float32\[5\], but "
                       r"result_shape declared float32\[2\]") as info:
        hcb.barrier_wait()
    assert type(info.value.__cause__) is TypeError
    hcb.barrier_wait()  # reported once
    jax.effects_barrier()


# -- nested pmaps --------------------------------------------------------------
def test_nested_pmap_each_device_taps_its_slice(rec):
    # The classic module's test_tap_pmap_pmap_vmap, on 2 x 4 devices.
    m = np.fromfunction(lambda i, j, k: 100. * i + 10. * j + k, (2, 4, 3),
                        dtype=np.float32)
    f = pmapkit.pmap(pmapkit.pmap(jax.vmap(
        lambda x: hcb.id_tap(rec, x * 2., tap_with_device=True) ** 2)))
    np.testing.assert_allclose(f(m), (2 * m) ** 2)
    calls = rec.take()
    assert {d.id: (floats(a), t) for a, t, d in calls} == {
        4 * i + j: ((2 * m[i, j]).tolist(), (("batch", {"batch_dims": (0,)}),))
        for i in range(2) for j in range(4)}


def test_nested_pmap_extra_code_taps_on_every_device():
    # The classic module's test_tap_pmap_pmap_extra: code around the inner
    # pmap runs (and taps its group's value) on every device of the group.
    seen, lock = [], threading.Lock()

    def tap(what):
        def record(arg, transforms, device):
            with lock:
                seen.append((what, device.id, np.asarray(arg).tolist()))
        return record
    m = np.fromfunction(lambda i, j, k: 100. * i + 10. * j + k, (2, 4, 3),
                        dtype=np.float32)

    def fun(xv):
        xv = hcb.id_tap(tap("before"), xv + 1., tap_with_device=True)
        res = pmapkit.pmap(lambda x: hcb.id_tap(tap("inside"), x * 2.,
                                                tap_with_device=True))(xv)
        return hcb.id_tap(tap("after"), res + 1., tap_with_device=True)
    out = pmapkit.pmap(fun)(m)
    np.testing.assert_allclose(out, (m + 1) * 2 + 1)
    hcb.barrier_wait()
    want = []
    for i in range(2):
        for j in range(4):
            want += [("before", 4 * i + j, (m[i] + 1).tolist()),
                     ("inside", 4 * i + j, ((m[i, j] + 1) * 2).tolist()),
                     ("after", 4 * i + j, ((m[i] + 1) * 2 + 1).tolist())]
    assert sorted(seen) == sorted(want)


@pytest.mark.parametrize("outer,inner", [(2, 1), (2, 4)])
def test_nested_pmap_extra_code_taps_in_program_order_per_device(outer, inner):
    # test_tap_pmap_pmap_extra's order: per device "before", the inner
    # pmap's "inside", then "after" (no token orders taps in nested regions;
    # "after" once came before "inside"). Also through id_tap's ``result``.
    seen, lock = [], threading.Lock()

    def tap(what):
        def record(arg, transforms, device):
            with lock:
                seen.append((device.id, what))
        return record

    def fun(xv):
        xv = hcb.id_tap(tap("before"), xv + 1., tap_with_device=True)
        res = pmapkit.pmap(lambda x: hcb.id_tap(tap("inside"), x, result=x * 2.,
                                                tap_with_device=True))(xv)
        return hcb.id_tap(tap("after"), res + 1., tap_with_device=True)
    f = pmapkit.pmap(fun, devices=jax.devices()[:outer * inner])
    m = np.arange(outer * inner * 3, dtype=np.float32).reshape(outer, inner, 3)
    for _ in range(10):
        seen.clear()
        np.testing.assert_allclose(f(m), (m + 1) * 2 + 1)
        hcb.barrier_wait()
        for device in range(outer * inner):
            assert [w for d, w in seen if d == device] == ["before", "inside", "after"], seen


def test_nested_pmap_taps_keep_program_order_per_device(rec):
    def inner(x):
        for k in range(5):
            x = hcb.id_tap(rec, x + 1.0, tap_with_device=True)
        return x
    pmapkit.pmap(pmapkit.pmap(inner), devices=jax.devices()[::-1])(jnp.zeros((2, 4)))
    seen = by_device(rec.take())
    assert sorted(seen) == list(range(8))
    assert all(v == [1.0, 2.0, 3.0, 4.0, 5.0] for v in seen.values())


def test_nested_pmap_devices_order_and_call(rec):
    devices = jax.devices()[::-1]
    inner = lambda y: hcb.call(lambda a, device: a + 100 * device.id, y,  # noqa: E731
                               result_shape=y, call_with_device=True)
    outer = lambda x: pmapkit.pmap(inner)(  # noqa: E731
        hcb.call(lambda a: a * 2, x, result_shape=x))
    out = pmapkit.pmap(outer, devices=devices)(jnp.arange(8.0).reshape(2, 4))
    ids = np.array([d.id for d in devices], np.float32).reshape(2, 4)
    np.testing.assert_allclose(out, 2 * np.arange(8.0).reshape(2, 4) + 100 * ids)


def test_three_level_pmap_taps_at_every_level(rec):
    def level(depth):
        def body(x):
            x = hcb.id_tap(rec, x, tap_with_device=True)
            return x if depth == 3 else pmapkit.pmap(level(depth + 1))(x)
        return body
    x = jnp.arange(8.0).reshape(2, 2, 2)
    np.testing.assert_allclose(pmapkit.pmap(level(1))(x), x)
    seen = by_device(rec.take())
    flat = np.arange(8.0).reshape(2, 2, 2)
    assert seen == {d: [flat[d // 4].tolist(), flat[d // 4, (d // 2) % 2].tolist(),
                        float(d)] for d in range(8)}


def test_grad_through_nested_pmap_taps_primals(rec):
    f = pmapkit.pmap(pmapkit.pmap(lambda v: hcb.id_tap(rec, v, tap_with_device=True) ** 2))
    x = jnp.arange(8.0).reshape(2, 4)
    np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(x), 2 * x)
    assert by_device(rec.take()) == {d: [float(d)] for d in range(8)}


def test_tap_in_partly_manual_jax_shard_map_is_a_clear_error():
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("i", "j"))
    f = jax.jit(jax.shard_map(lambda x: hcb.id_tap(lambda a, t: None, x), mesh=mesh,
                              in_specs=P("i"), out_specs=P("i"), axis_names={"i"}))
    with pytest.raises(NotImplementedError, match=r"only some mesh axes are manual "
                       r"\(\['i'\] of \['i', 'j'\]\) is supported in pmapkit.pmap "
                       "bodies around nested pmaps only"):
        f(jnp.arange(8.0))


def test_tap_in_jax_nested_shard_map_is_a_clear_error():
    # Not a pmapkit nested pmap: its token would reach XLA, which aborts.
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), ("i", "j"))

    def outer(x):
        return jax.shard_map(lambda y: hcb.id_tap(lambda a, t: None, y),
                             mesh=jax.sharding.get_abstract_mesh(), in_specs=P("j"),
                             out_specs=P("j"), axis_names={"j"})(x)
    f = jax.jit(jax.shard_map(outer, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                              axis_names={"i"}))
    with pytest.raises(NotImplementedError, match="an ordered callback inside a manual "
                       r"region nested in another \(not a nested pmapkit.pmap\)"):
        f(jnp.arange(8.0))


def test_other_ordered_effect_in_nested_pmaps_is_a_clear_error():
    # Its token would reach XLA, which aborts: run where an abort is contained.
    import subprocess
    import sys
    code = "\n".join([
        "import jax, jax.numpy as jnp, pmapkit",
        "from jax.experimental import io_callback",
        "def body(y):",
        "    io_callback(lambda a: None, None, y, ordered=True)",
        "    return y + 1",
        "try:",
        "    pmapkit.pmap(pmapkit.pmap(body))(jnp.zeros((2, 4)))",
        "except NotImplementedError as e:",
        "    print('raised:', e)"])
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("raised: pmapkit: ordered effects (OrderedIO) are not supported in "
            "pmaps nested in another or around one") in proc.stdout


def test_jax_pmap_taps_per_device_too(rec):
    jax.pmap(lambda x: hcb.id_tap(rec, x, tap_with_device=True))(jnp.arange(4.0))
    assert by_device(rec.take()) == {d.id: [float(i)]
                                    for i, d in enumerate(jax.devices()[:4])}


def test_pmap_cached_call_with_unused_argument(rec):
    traces = []

    def body(x, unused):
        traces.append(1)
        return hcb.id_tap(rec, x * 2) + 1
    f = pmapkit.pmap(body)
    x, y = jnp.arange(4.0), jnp.ones(4)
    for _ in range(3):
        out = f(x, y)
    np.testing.assert_allclose(out, 2 * np.arange(4.0) + 1)
    assert len(traces) == 1 and len(rec.take()) == 12


def test_pmap_cached_call_with_donation(rec):
    g = pmapkit.pmap(lambda x: hcb.id_tap(rec, x, tap_with_device=True) * 2,
                     donate_argnums=0)
    x = jnp.ones(4)
    for _ in range(3):
        x = g(x)
    np.testing.assert_allclose(x, np.full(4, 8.0))
    assert all(v == [1.0, 2.0, 4.0] for v in by_device(rec.take()).values())


@pytest.mark.parametrize("where", ["inside", "around"])
def test_checkpoint_and_pmap_fire_again_per_device(rec, where):
    def body(v):
        return jnp.sin(hcb.id_tap(rec, v, tap_with_device=True))
    f = (pmapkit.pmap(jax.checkpoint(body)) if where == "inside"
         else jax.checkpoint(pmapkit.pmap(body)))
    x = jnp.arange(2.0) + 1
    g = jax.grad(lambda x: f(x).sum())(x)
    np.testing.assert_allclose(g, np.cos([1.0, 2.0]), rtol=1e-6)
    # forward pass, then rematerialization in the backward pass
    assert by_device(rec.take()) == {0: [1.0, 1.0], 1: [2.0, 2.0]}


def test_taps_of_successive_8_device_programs_run_in_order_at_no_token_assembly(
        rec, monkeypatch):
    # A tap in a whole-mesh jit over 8 devices threads the ordered effect's
    # token from one computation to the next: each waits for the previous
    # one's tokens (taps keep dispatch order across computations), and the
    # tokens coming out stay per device: no Mesh, NamedSharding and global
    # token array assembled per call (JAX's way, half of the dispatch).
    from jax.sharding import Mesh, NamedSharding

    devices = jax.devices()[:8]
    mesh = Mesh(np.array(devices), ("d",))
    sharding = NamedSharding(mesh, P("d"))
    step = jax.jit(lambda v: hcb.id_tap(rec, v[:1] * 1.0, result=v) + 1.0)
    x = jax.device_put(np.zeros(8, np.float32), sharding)
    x = step(x)                       # compiled; taps 0
    assert rec.values() == [[0.0]]
    built = []
    real_new = Mesh.__new__

    def counting_new(cls, *args, **kwargs):
        built.append(args)
        return real_new(cls, *args, **kwargs)

    monkeypatch.setattr(Mesh, "__new__", staticmethod(counting_new))
    for _ in range(20):               # unblocked: 20 computations in flight
        x = step(x)
    jax.effects_barrier()             # waits on the per-device tokens
    monkeypatch.undo()
    assert rec.values() == [[float(i)] for i in range(1, 21)]
    assert built == []
    np.testing.assert_array_equal(np.asarray(x), np.full(8, 21.0, np.float32))
