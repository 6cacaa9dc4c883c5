"""``pmapkit migrate`` translates host_callback (issue 49, issue 57): migrated
taps run one at a time in program order, receive numpy arrays as classic
taps did, and a raising tap is logged while the program goes on; sizes and
axis names read from the site. Split from ``test_migrate_translate.py``
(one file per subject, each under 900 lines)."""
import datetime
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from pmapkit.tools.migrate import migrate_source

from _migrate_helpers import env, run_migrated as _run


# -- 2. host_callback keeps classic order ---------------------------------------------------

_TAPS_ON_8_DEVICES = '''\
import threading
import numpy as np
import jax
from jax import lax
from jax.experimental import host_callback as hcb

inside, overlaps, seen = [0], [0], {}
lock = threading.Lock()


def tap(value, transforms, device):
    with lock:
        inside[0] += 1
        overlaps[0] += inside[0] > 1
    seen.setdefault(device.id, []).append(float(value))
    for _ in range(2000):        # a handler that takes its time: others must wait
        pass
    with lock:
        inside[0] -= 1


def step(v):
    v = hcb.id_tap(tap, v.sum(), result=v, tap_with_device=True)
    total = lax.psum(v, "i")
    hcb.id_tap(tap, -1.0 * total.sum(), tap_with_device=True)
    return total


p = jax.pmap(step, axis_name="i")
x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
for _ in range(150):          # dispatched without blocking
    out = p(x)
jax.block_until_ready(out)
hcb.barrier_wait()
print("overlaps", overlaps[0], "devices", sorted(seen), "taps", sum(map(len, seen.values())))
alternate = all(all((v < 0) == (k % 2 == 1) for k, v in enumerate(vals)) for vals in seen.values())
print("program order on each device", alternate)
'''


def test_migrated_taps_run_one_at_a_time_in_program_order_on_8_devices(tmp_path):
    new, report = migrate_source(_TAPS_ON_8_DEVICES)
    # x's 8 rows written as a number: the site's mesh is that many devices,
    # written out (every site maps that size); the body is written in place
    assert report.left == [] and sorted(report.helpers) == ["_device_index", "_id_tap"]
    assert "jax.local_devices()[:8]" in new, new
    script = tmp_path / "taps.py"
    script.write_text(new)
    proc = subprocess.run([sys.executable, "-P", "-W", "error::DeprecationWarning", str(script)],
                          capture_output=True, text=True, timeout=300, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "overlaps 0 devices [0, 1, 2, 3, 4, 5, 6, 7] taps 2400",
        "program order on each device True"]


def test_taps_and_calls_receive_numpy_arrays_as_classic_did():
    # A tap that reads its value through numpy's own API (.ctypes: a jax.Array
    # has none) and builds a timedelta from an element.
    seen = []

    def tap(value, transforms):
        seen.append((type(value["a"]), type(value["b"]), value["b"].ctypes.data != 0,
                     datetime.timedelta(seconds=value["a"][1].item()).total_seconds()))

    def host(v):
        seen.append(type(v))
        return v * 2
    ns, _new, report = _run('''\
        import jax
        import jax.numpy as jnp
        from jax.experimental import host_callback as hcb

        @jax.jit
        def f(x):
            hcb.id_tap(tap, {"a": x, "b": x + 1})
            return hcb.call(host, x, result_shape=x)
        out = f(jnp.arange(3.0))
        hcb.barrier_wait()
        ''', tap=tap, host=host)
    assert report.left == [] and ns["out"].tolist() == [0.0, 2.0, 4.0]
    assert seen == [(np.ndarray, np.ndarray, True, 1.0), np.ndarray]


def test_a_raising_tap_is_logged_and_the_program_goes_on(tmp_path):
    # As under pmapkit run: the tap's error is logged with its traceback, the
    # computation and the program go on, later taps still run.
    source = textwrap.dedent('''\
        import jax
        import jax.numpy as jnp
        from jax.experimental import host_callback as hcb

        def tap(value, transforms):
            if value[0] == 1.0:
                raise ValueError("bad step")
            print("tapped", value.tolist(), flush=True)

        @jax.jit
        def step(x):
            return hcb.id_tap(tap, x) * 2
        for k in range(3):
            print("out", step(jnp.full((2,), float(k))).tolist(), flush=True)
        jax.effects_barrier()
        print("done")
        ''')
    new, report = migrate_source(source)
    script = tmp_path / "taps.py"
    script.write_text(new)
    proc = subprocess.run([sys.executable, "-P", str(script)], capture_output=True, text=True,
                          timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["tapped [0.0, 0.0]", "out [0.0, 0.0]", "out [2.0, 2.0]",
                                        "tapped [2.0, 2.0]", "out [4.0, 4.0]", "done"]
    assert "ValueError: bad step" in proc.stderr and "the tap <function tap" in proc.stderr


_CHAINS = '''\
import jax
import jax.numpy as jnp

n_chains = 2

def chain(key):
    return jax.random.normal(key, (3,)).sum()

keys = jax.random.split(jax.random.key(0), n_chains)
out = jax.pmap(chain)(keys)
'''


def test_a_mapped_size_from_a_variable_runs_on_that_many_devices():
    # 2 chains on 8 devices: the mesh follows the argument (2 devices), as classic
    # pmap ran on the first 2; a mesh of all 8 failed "not evenly divisible".
    ns, new, report = _run(_CHAINS)
    assert report.left == [] and "_first_devices" in report.helpers
    assert ns["out"].shape == (2,)
    keys = jax.random.split(jax.random.key(0), 2)
    np.testing.assert_allclose(ns["out"], [jax.random.normal(k, (3,)).sum() for k in keys],
                               rtol=1e-6)
    assert ns["out"].sharding.mesh.devices.tolist() == jax.local_devices()[:2]
    # the device count, through a name, is proof enough: no helper
    counted = _CHAINS.replace("n_chains = 2", "n_chains = jax.local_device_count()")
    new, report = migrate_source(counted)
    assert "_first_devices" not in report.helpers and report.left == []


@pytest.mark.parametrize("name", ["0", "1.5", "(0, 1)", "-1"])
def test_a_literal_non_string_axis_name_is_translated(name):
    ns, new, report = _run(f'''\
        import jax
        import numpy as np
        out = jax.pmap(lambda v: v * 2, axis_name={name})(np.arange(8.0))
        ''')
    assert report.kept == report.left == [] and "jax.pmap(" not in new
    assert ns["out"].tolist() == [2.0 * k for k in range(8)]


def test_a_call_runs_and_keeps_its_result_whether_used_or_not():
    calls = []

    def host(v):
        calls.append(np.asarray(v).tolist())
        return np.asarray(v) * 10
    ns, new, report = _run('''\
        import jax
        import jax.numpy as jnp
        from jax.experimental import host_callback as hcb

        @jax.jit
        def f(x):
            hcb.call(host, x + 1, result_shape=x)      # result unused: still called
            return hcb.call(host, x, result_shape=x) + 1
        out = f(jnp.arange(3.0))
        ''', host=host)
    assert ns["out"].tolist() == [1.0, 11.0, 21.0]
    assert calls == [[1.0, 2.0, 3.0], [0.0, 1.0, 2.0]]      # in program order
    assert sorted(report.helpers) == ["_device_index", "_host_call"] and report.left == []


def test_call_with_device_used_only_for_its_id_is_translated_with_axis_index():
    ns, new, report = _run('''\
        import numpy as np
        import jax
        from jax.experimental import host_callback as hcb

        def by_device(v, *, device):
            return np.asarray(v) + 100 * device.id

        out = jax.pmap(lambda v: hcb.call(by_device, v, result_shape=v,
                                          call_with_device=True))(np.zeros((8, 2), np.float32))
        ''')
    assert ns["out"][:, 0].tolist() == [100.0 * k for k in range(8)]
    assert "_host_call(by_device, v, v, with_device=True)" in new and report.left == []
    # a device used for more than its id: left, with the reason
    _new, report = migrate_source(textwrap.dedent('''\
        from jax.experimental import host_callback as hcb

        def needs_the_device(v, *, device):
            return v + len(device.platform)

        other = hcb.call(needs_the_device, 1.0, result_shape=1.0, call_with_device=True)
        '''))
    assert [(k.line, k.name) for k in report.left] == [(6, "jax.experimental.host_callback.call")]
    assert "uses the device for more than its id" in report.left[0].why
    # a file mapping a pmap over devices it chooses: an index is no local device there
    _new, report = migrate_source(textwrap.dedent('''\
        import jax
        from jax.experimental import host_callback as hcb

        def by_device(v, *, device):
            return v + device.id

        g = jax.pmap(lambda v: hcb.call(by_device, v, result_shape=v, call_with_device=True),
                     devices=jax.devices()[4:])
        t = jax.pmap(lambda v: hcb.id_tap(tap, v, tap_with_device=True))
        '''))
    assert [k.line for k in report.left] == [7, 9]
    assert all("devices= it chooses" in k.why for k in report.left)
