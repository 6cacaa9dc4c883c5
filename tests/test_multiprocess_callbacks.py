"""host_callback, export and colocated_python across real processes.

Each run launches ``tests/_multiprocess_callbacks_script.py`` with
``pmapkit launch`` on loopback (bounded timeouts); every process writes what
it saw to ``rank<R>.json``, compared here with the global computation.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "_multiprocess_callbacks_script.py")
LAUNCH_TIMEOUT_S = 120      # the launcher's own limit
SUBPROCESS_TIMEOUT_S = 150  # ours, in case the launcher itself hangs


def _launch(tmp_path, nproc, per_process, mode):
    cmd = [sys.executable, "-m", "pmapkit", "launch", "-n", str(nproc),
           "--devices-per-process", str(per_process),
           "--timeout", str(LAUNCH_TIMEOUT_S), SCRIPT, str(tmp_path), mode]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)
    return proc, time.monotonic() - start


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=1e-6, atol=1e-6)


def _check_rank(rep, rank, nproc, per_process):
    n = nproc * per_process
    glob = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    gids = rep["global_device_ids"]
    owner = [p // per_process for p in range(n)]   # process-major
    mine = [p for p in range(n) if owner[p] == rank]
    assert rep["local_device_ids"] == [gids[p] for p in mine]

    # Taps fire on the owning process, once per local device, with its slice.
    assert rep["pmap_taps"] == [[gids[p], rank, (glob[p] * 2).tolist()] for p in mine]
    for p in mine:
        assert f"device: cpu:{gids[p]} where: pmap\n{glob[p] * 2}" in rep["pmap_printed"]
    assert rep["pmap_printed"].count("device:") == per_process
    want_psum = sum(glob[p] * 2 + gids[p] for p in range(n))
    _close(rep["pmap_call_psum"], np.broadcast_to(want_psum, (per_process, 2)))

    # jax.jit on a local device and pmapkit.pjit on a local mesh.
    locals_ = rep["local_device_ids"]
    assert rep["local_taps"] == [[locals_[0], rank, [rank + 1.0] * 3],
                                 [locals_[1], rank,
                                  (np.arange(per_process) * 3.0).tolist()]]
    _close(rep["local_pjit_out"], np.arange(per_process) * 3.0)
    assert rep["eager_printed"] == f"what: eager\n{np.arange(3) + rank}\n"

    # A whole-mesh program taps on the process owning mesh position 5 only.
    want = [[gids[5], rank, glob.tolist()]] if owner[5] == rank else []
    assert rep["whole_mesh_taps"] == want

    # A whole-mesh call: the caller's result, summed over the mesh, on every device.
    whole = (glob * 10 + 1).sum(0)
    assert sorted(rep["whole_mesh_call"]) == sorted(str(gids[p]) for p in mine)
    for p in mine:
        _close(rep["whole_mesh_call"][str(gids[p])], [whole + glob[p]])

    # barrier_wait: process 0's returned only once its 3 taps had run, and
    # each of them ran after every other process had returned from its own.
    want = [[True, 2.0 * k] for k in range(3)] if rank == 0 else []
    assert rep["barrier_taps"] == want, (
        f"[returned-first, value] of process {rank}'s taps: {rep['barrier_taps']}; "
        "a False means another process's barrier_wait waited for process 0's taps")

    # Artifacts exported on process 0 run on every process.
    _close(rep["single"], np.sin(np.arange(3, dtype=np.float32)) * 2)
    assert rep["pmap_nr_devices"] == n
    normalized = {str(gids[p]): [((glob[p] - glob.mean(0)) * (p + 1)).tolist()]
                  for p in mine}
    for label in ("global_array", "host_value", "direct"):
        got = rep["pmap_artifact"][label]
        assert sorted(got) == sorted(normalized), label
        for dev, value in normalized.items():
            _close(got[dev], value)
    cumsum = np.cumsum(glob, 0) * 2
    assert sorted(rep["jit_artifact"]) == sorted(str(gids[p]) for p in mine)
    for p in mine:
        _close(rep["jit_artifact"][str(gids[p])], [cumsum[p]])
    assert "payload checksum mismatch" in rep["corrupted"]

    # colocated_python: this process's devices and arrays.
    value, devices = rep["colocated_local"]
    _close(value, (np.arange(4.0) + rank) * 2)
    assert devices == [locals_[1]]
    _close(rep["colocated_local_sharded"], np.arange(2.0 * per_process) * 2)
    _close(rep["colocated_object"], [100.0 * rank + 2 + 1] * 2)
    assert f"but this is process {rank}" in rep["colocated_other_process"]


@pytest.mark.parametrize("nproc,per_process", [(2, 4), (4, 2)])
def test_callbacks_export_and_colocated_in_every_process(tmp_path, nproc, per_process):
    proc, _ = _launch(tmp_path, nproc, per_process, "ok")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    lines = proc.stdout.splitlines()
    for rank in range(nproc):
        assert f"[{rank}] taps fired on process {rank}: {per_process}" in lines
        assert f"[{rank}] export loaded on process {rank}" in lines
        assert f"[{rank}] colocated ran on process {rank}" in lines
        assert f"[{rank}] done {rank}" in lines
        with open(tmp_path / f"rank{rank}.json") as f:
            rep = json.load(f)
        assert rep["rank"] == rank
        _check_rank(rep, rank, nproc, per_process)


@pytest.mark.parametrize("mode,message", [
    ("tap-raises", "RuntimeError: tap failure on process 1"),
    ("export-raises", "takes global shapes"),
])
def test_a_process_raising_in_a_callback_or_exported_call_stops_the_run(
        tmp_path, mode, message):
    proc, elapsed = _launch(tmp_path, 2, 4, mode)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-6000:]
    assert elapsed < LAUNCH_TIMEOUT_S
    assert "[1] Traceback (most recent call last):" in output, output[-6000:]
    assert any(line.startswith("[1] ") and message in line
               for line in output.splitlines()), output[-6000:]
    assert "exited with status" in output
    assert not (tmp_path / "rank0.json").exists()


def test_a_failing_whole_mesh_call_fails_every_process(tmp_path):
    # device_index 5 lives on process 1 of 2 x 4: its failure reaches process 0
    # through the checks (neither waits in a collective, neither gets zeros).
    proc, elapsed = _launch(tmp_path, 2, 4, "whole-mesh-call-raises")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-6000:]
    assert elapsed < LAUNCH_TIMEOUT_S
    lines = output.splitlines()
    assert any(line.startswith("[1] ") and "RuntimeError: whole-mesh call failure on process 1"
               in line for line in lines), output[-6000:]
    assert any(line.startswith("[0] ") and "failed on 1 other device(s)" in line
               for line in lines), output[-6000:]
    assert "Termination timeout" not in output and "rendezvous" not in output
    assert not (tmp_path / "rank0.json").exists()
