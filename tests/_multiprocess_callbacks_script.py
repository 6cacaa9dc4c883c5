"""Run by tests/test_multiprocess_callbacks.py under ``pmapkit launch``:
host_callback, export and colocated_python in every process of a run.

    script.py OUT_DIR MODE     MODE: ok | tap-raises | export-raises |
                                     whole-mesh-call-raises

Each process writes what it saw to OUT_DIR/rank<R>.json; the test compares
that with what the global program computes. ``tap-raises`` and
``export-raises`` make process 1 fail (a host ``call`` that raises, an
exported call with a wrong argument) to check that the launcher stops the run;
``whole-mesh-call-raises`` fails the ``call`` of a whole-mesh jit on the
process owning its device_index, which fails every process's run.
"""
import io
import json
import os
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import pmapkit
import pmapkit.distributed
from pmapkit import export as pe
from pmapkit import host_callback as hcb
from pmapkit.colocated_python import colocated_python, colocated_python_class

out_dir, mode = sys.argv[1], sys.argv[2]
pmapkit.distributed.initialize()
me, nproc = jax.process_index(), jax.process_count()
L, G = jax.local_device_count(), jax.device_count()
glob = np.arange(G * 2, dtype=np.float32).reshape(G, 2)
local = glob[me * L:(me + 1) * L]
report = {"rank": me, "local_device_ids": [d.id for d in jax.local_devices()],
          "global_device_ids": [d.id for d in jax.devices()]}
lock = threading.Lock()
taps = []


def tap(x, transforms, device):
    with lock:
        taps.append([device.id, device.process_index, np.asarray(x).tolist()])


def plus_one_on_host(x, device):
    if mode == "tap-raises" and me == 1:
        raise RuntimeError(f"tap failure on process {me}, device {device.id}")
    return np.asarray(x) + np.float32(device.id)


def body(x):
    y = hcb.id_tap(tap, x * 2, tap_with_device=True)
    y = hcb.id_print(y, where="pmap", tap_with_device=True, output_stream=printed)
    z = hcb.call(plus_one_on_host, y, call_with_device=True,
                 result_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))
    return jax.lax.psum(z, "i")


# -- host_callback under a pmap spanning every process ---------------------------
printed = io.StringIO()
out = pmapkit.pmap(body, "i")(local)
hcb.barrier_wait("pmap")
report["pmap_taps"] = sorted(taps)
report["pmap_printed"] = printed.getvalue()
report["pmap_call_psum"] = np.asarray(out).tolist()
print(f"taps fired on process {me}: {len(taps)}")

# jax.jit on one local device, and pmapkit.pjit on a mesh of local devices only.
taps.clear()
jax.jit(lambda v: hcb.id_tap(tap, v + 1, tap_with_device=True))(jnp.ones(3) * me)
local_mesh = pmapkit.Mesh(np.array(jax.local_devices()), ("l",))
with local_mesh:
    pjit_out = pmapkit.pjit(
        lambda v: hcb.id_tap(tap, v * 3, tap_with_device=True, device_index=1),
        in_shardings=pmapkit.PartitionSpec("l"),
        out_shardings=pmapkit.PartitionSpec("l"))(np.arange(L, dtype=np.float32))
eager_printed = io.StringIO()
hcb.id_print(jnp.arange(3) + me, what="eager", output_stream=eager_printed)
hcb.barrier_wait("local")
report["local_taps"] = sorted(taps)
report["eager_printed"] = eager_printed.getvalue()
report["local_pjit_out"] = np.asarray(pjit_out).tolist()

# A whole-mesh jit over every process's devices: the tap runs on the process
# owning device_index (global position 5 of the mesh).
taps.clear()
global_mesh = Mesh(np.array(jax.devices()), ("d",))
sharded = NamedSharding(global_mesh, PartitionSpec("d"))
garr = jax.make_array_from_process_local_data(sharded, local)
jax.jit(lambda v: hcb.id_tap(tap, v * 1, tap_with_device=True, device_index=5),
        out_shardings=sharded)(garr)
hcb.barrier_wait("global jit")
report["whole_mesh_taps"] = sorted(taps)


# A whole-mesh call: device_index 5 runs the function, every process gets its
# result; with ``whole-mesh-call-raises`` it raises there and every process's
# computation fails (none is left in a collective, none gets zeros).
def times_ten(v):
    if mode == "whole-mesh-call-raises":
        raise RuntimeError(f"whole-mesh call failure on process {me}")
    return np.asarray(v) * 10


called = jax.jit(lambda v: (hcb.call(times_ten, v, result_shape=v, device_index=5)
                            + 1).sum(0) + v, out_shardings=sharded)(garr)
report["whole_mesh_call"] = {str(s.device.id): np.asarray(s.data).tolist()
                             for s in called.addressable_shards}
hcb.barrier_wait("global call")

# barrier_wait waits for this process's own callbacks only. Process 0's taps
# stay pending until every other process has returned from its barrier_wait
# (each then writes a file): a barrier_wait that waited for process 0 would
# hold them all until the taps give up (TAP_HOLD_S in all), and they record that.
TAP_HOLD_S = 20
others_returned = [os.path.join(out_dir, f"barrier_returned{r}")
                   for r in range(nproc) if r != me]
taps.clear()
hold_until = time.monotonic() + TAP_HOLD_S


def held_tap(x, transforms):
    while not all(map(os.path.exists, others_returned)) and time.monotonic() < hold_until:
        time.sleep(0.01)
    with lock:
        taps.append([all(map(os.path.exists, others_returned)),
                     float(np.asarray(x).sum())])


if me == 0:
    for k in range(3):
        jax.jit(lambda v: hcb.id_tap(held_tap, v))(jnp.full(2, float(k)))
hcb.barrier_wait("local only")
if me != 0:
    open(os.path.join(out_dir, f"barrier_returned{me}"), "w").close()
report["barrier_taps"] = sorted(taps)   # as they were when barrier_wait returned
multihost_utils.sync_global_devices("callbacks done")

# -- export on process 0, load and run everywhere --------------------------------
single_path = os.path.join(out_dir, "single.bin")
pmap_path = os.path.join(out_dir, "pmap.bin")
jit_path = os.path.join(out_dir, "sharded_jit.bin")


def normalize(v):
    return (v - jax.lax.pmean(v, "i")) * (jax.lax.axis_index("i") + 1).astype(v.dtype)


if me == 0:
    single = pe.export(jax.jit(lambda v: jnp.sin(v) * 2))(
        jax.ShapeDtypeStruct((3,), jnp.float32))
    pmapped = pe.export(pmapkit.pmap(normalize, "i"))(jax.ShapeDtypeStruct((L, 2), jnp.float32))
    jitted = pe.export(jax.jit(lambda v: jnp.cumsum(v, 0) * 2, in_shardings=sharded,
                               out_shardings=sharded))(
        jax.ShapeDtypeStruct((G, 2), jnp.float32))
    for path, exp in ((single_path, single), (pmap_path, pmapped), (jit_path, jitted)):
        with open(path + ".tmp", "wb") as f:
            f.write(pe.serialize(exp))
        os.replace(path + ".tmp", path)
multihost_utils.sync_global_devices("exported")


def load(path):
    with open(path, "rb") as f:
        return f.read()


loaded_single = pe.deserialize(load(single_path))
report["single"] = np.asarray(loaded_single.call(jnp.arange(3.0, dtype=jnp.float32))).tolist()
loaded_pmap = pe.deserialize(load(pmap_path))
report["pmap_nr_devices"] = loaded_pmap.nr_devices
if mode == "export-raises" and me == 1:
    loaded_pmap.call(local)   # this process's slice: the artifact takes global shapes
results = {}
for label, arg in (("global_array", garr), ("host_value", glob)):
    res = loaded_pmap.call(arg)
    results[label] = {str(s.device.id): np.asarray(s.data).tolist()
                      for s in res.addressable_shards}
# The same pmap, run directly with this process's slice.
direct = pmapkit.pmap(normalize, "i")(local)
results["direct"] = {str(s.device.id): np.asarray(s.data).tolist()
                     for s in direct.addressable_shards}
report["pmap_artifact"] = results
loaded_jit = pe.deserialize(load(jit_path))
res = loaded_jit.call(garr)
report["jit_artifact"] = {str(s.device.id): np.asarray(s.data).tolist()
                          for s in res.addressable_shards}
corrupted = bytearray(load(pmap_path))
corrupted[len(corrupted) // 2] ^= 0xFF
try:
    pe.deserialize(bytes(corrupted))
    report["corrupted"] = "accepted"
except pe.DeserializationError as exc:
    report["corrupted"] = str(exc)
print(f"export loaded on process {me}")
multihost_utils.sync_global_devices("export done")


# -- colocated_python: each process for its own devices --------------------------
@colocated_python
def doubled(x):
    return jax.tree_util.tree_map(lambda a: a * 2, x)


@colocated_python_class
class Counter:
    def __init__(self, start):
        self.count = start

    def bump(self, x):
        self.count += 1
        return x + self.count


on_second = jax.device_put(jnp.arange(4.0) + me, jax.local_devices()[1])
res = doubled(on_second)
report["colocated_local"] = [np.asarray(res).tolist(), [d.id for d in res.sharding.device_set]]
local_sharded = jax.device_put(jnp.arange(2.0 * L), NamedSharding(
    Mesh(np.array(jax.local_devices()), ("l",)), PartitionSpec("l")))
report["colocated_local_sharded"] = np.asarray(doubled(local_sharded)).tolist()
counter = Counter(100 * me)
first = jax.device_put(jnp.ones(2), jax.local_devices()[0])
counter.bump(first)
report["colocated_object"] = np.asarray(counter.bump(first)).tolist()
elsewhere = [d for d in jax.devices() if d.process_index != me][:1]
try:
    colocated_python(lambda: jnp.ones(2)).specialize(devices=elsewhere)()
    report["colocated_other_process"] = "ran"
except ValueError as exc:
    report["colocated_other_process"] = str(exc)
print(f"colocated ran on process {me}")

with open(os.path.join(out_dir, f"rank{me}.json"), "w") as f:
    json.dump(report, f)
multihost_utils.sync_global_devices("end")
pmapkit.distributed.shutdown()
print(f"done {me}")
