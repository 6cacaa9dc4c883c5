"""``pmapkit launch``: real local processes, bounded by timeouts."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import jax
import pytest

from pmapkit.distributed import launch
from _subprocess_env import sigint_as_default

LAUNCH = [sys.executable, "-m", "pmapkit", "launch"]


def _script(tmp_path, body, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launch(args, tmp_path, timeout=120):
    return subprocess.run(LAUNCH + args, cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout)


_alive = launch.process_alive  # a zombie counts as ended

# A rank's PID, written whole (a temporary file renamed) before it says so.
_WRITE_PID = """
    def write_pid(directory, name):
        path = os.path.join(directory, name)
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
"""


def _pid_files(pids):
    return sorted(f for f in pids.iterdir() if not f.name.endswith(".tmp"))


class _LauncherOutput:
    """A launcher's merged output, read line by line on a thread, so that a
    test waits for the line its script prints rather than sleeping."""

    def __init__(self, launcher):
        self.lines, self._ended = [], False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(launcher.stdout,),
                                        daemon=True)
        self._reader.start()

    def _read(self, stream):
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, *lines, timeout):
        """Until every one of ``lines`` was printed; fails, showing the
        output, if the launcher ends or ``timeout`` seconds pass first."""
        def seen():
            return all(line in self.lines for line in lines)
        with self._changed:
            self._changed.wait_for(lambda: seen() or self._ended, timeout)
            assert seen(), (f"not printed within {timeout} s"
                            f"{' (the launcher ended)' if self._ended else ''}: "
                            f"{[line for line in lines if line not in self.lines]}\n"
                            + "\n".join(self.lines[-60:]))

    def text(self, timeout=30):
        """Everything printed, once the launcher has closed its output."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "the launcher's output never ended"
        return "\n".join(self.lines) + "\n"


def _wait_until_ended(pids, timeout=10):
    """The PIDs still alive after ``timeout`` s (a killed process may take a
    moment to go): a bounded wait in place of a fixed pause."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def test_process_environment_sets_rank_count_coordinator_and_devices():
    env = launch.process_environment(
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_foo=1"},
        rank=1, num_processes=3, coordinator="127.0.0.1:1234", devices_per_process=2)
    assert env[launch.ENV_PROCESS_ID] == "1"
    assert env[launch.ENV_NUM_PROCESSES] == "3"
    assert env[launch.ENV_COORDINATOR] == "127.0.0.1:1234"
    assert env[launch.ENV_LOCAL_DEVICES] == "2"
    assert env["XLA_FLAGS"].split() == ["--xla_foo=1",
                                        "--xla_force_host_platform_device_count=2"]
    assert env["JAX_NUM_CPU_DEVICES"] == "2"


def test_free_loopback_port_is_bindable():
    import socket
    port = launch.free_loopback_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _every_rank_says(argv, tmp_path, said):
    """Launch ``argv``: it succeeds and every rank prints ``said(rank)``'s
    lines, each prefixed with the rank."""
    proc = _launch(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for rank in range(int(argv[argv.index("-n") + 1])):
        for line in said(rank):
            assert f"[{rank}] {line}" in lines, (rank, line, proc.stdout)


def test_output_is_prefixed_with_the_rank(tmp_path):
    script = _script(tmp_path, """
        import os, sys
        print("hello from", os.environ["PMAPKIT_PROCESS_ID"], "of",
              os.environ["PMAPKIT_NUM_PROCESSES"], sys.argv[1:])
        print("to stderr", file=sys.stderr)
    """)
    _every_rank_says(["-n", "3", "--devices-per-process", "2", script, "a", "--b"],
                     tmp_path, lambda rank: [f"hello from {rank} of 3 ['a', '--b']",
                                             "to stderr"])


def test_a_rank_runs_its_script_as_python_would(tmp_path):
    """Each rank runs through pmapkit/tools/run.py: __main__, sys.argv,
    __file__ and the script's directory first on sys.path (a module beside
    it imports; none of pmapkit's own modules shadows a top-level name)."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "helper.py").write_text("VALUE = 'beside the script'\n")
    (app / "specs.py").write_text("WHERE = 'the script directory'\n")
    script = _script(app, """
        import sys
        import helper, specs
        print(__name__, sys.argv[1:], __file__, sys.path[0] == __file__.rsplit("/", 1)[0])
        print(helper.VALUE, specs.WHERE)
    """)
    _every_rank_says(["-n", "2", "--devices-per-process", "1", script, "x", "-m", "y"],
                     tmp_path, lambda rank: [f"__main__ ['x', '-m', 'y'] {script} True",
                                             "beside the script the script directory"])


def test_pmapkit_run_under_the_launcher(tmp_path):
    script = _script(tmp_path, """
        import os
        from jax.experimental.maps import Mesh
        print("rank", os.environ["PMAPKIT_PROCESS_ID"], Mesh.__module__)
    """)
    proc = _launch(["-n", "2", "--devices-per-process", "1", "-m", "pmapkit", "run", script],
                   tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1] rank 1 pmapkit.mesh" in proc.stdout.splitlines()


def test_jax_sees_the_requested_devices_and_joins_the_run(tmp_path):
    script = _script(tmp_path, """
        import jax
        import pmapkit.distributed
        pmapkit.distributed.initialize()
        print("process", jax.process_index(), jax.process_count(),
              jax.local_device_count(), jax.device_count())
        pmapkit.distributed.shutdown()
    """)
    proc = _launch(["-n", "2", "--devices-per-process", "3", "--timeout", "100", script],
                   tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "[0] process 0 2 3 6" in proc.stdout.splitlines()
    assert "[1] process 1 2 3 6" in proc.stdout.splitlines()


def test_a_failing_process_stops_the_others_and_shows_its_traceback(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    # Rank 1 fails once the other two are running (their PIDs written).
    script = _script(tmp_path, _WRITE_PID + f"""
    import os, time
    rank = int(os.environ["PMAPKIT_PROCESS_ID"])
    write_pid({str(pids)!r}, str(rank))
    if rank == 1:
        deadline = time.monotonic() + 60
        while sorted(os.listdir({str(pids)!r})) != ["0", "1", "2"]:
            if time.monotonic() > deadline:
                raise SystemExit("ranks 0 and 2 never started")
            time.sleep(0.01)
        raise RuntimeError("rank one gives up")
    time.sleep(300)
    """)
    start = time.monotonic()
    proc = _launch(["-n", "3", "--timeout", "100", script], tmp_path)
    assert time.monotonic() - start < 80, proc.stdout[-3000:]
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "[1] RuntimeError: rank one gives up" in proc.stdout, proc.stdout[-3000:]
    assert "[1] Traceback (most recent call last):" in proc.stdout
    assert "[launch] process 1 exited with status 1; stopped the others" in proc.stdout
    pid_files = _pid_files(pids)
    assert [f.name for f in pid_files] == ["0", "1", "2"]
    for pidfile in pid_files:
        assert not _alive(int(pidfile.read_text())), f"rank {pidfile.name} left running"


def test_exit_status_of_the_failing_process_is_kept(tmp_path):
    script = _script(tmp_path, """
        import os, sys
        sys.exit(7 if os.environ["PMAPKIT_PROCESS_ID"] == "0" else 0)
    """)
    proc = _launch(["-n", "2", script], tmp_path)
    assert proc.returncode == 7
    assert "process 0 exited with status 7" in proc.stdout


def test_timeout_stops_everything(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _script(tmp_path, _WRITE_PID + f"""
    import os, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # only SIGKILL stops it
    write_pid({str(pids)!r}, os.environ["PMAPKIT_PROCESS_ID"])
    print("sleeping", flush=True)
    time.sleep(300)
    """)
    start = time.monotonic()
    proc = _launch(["-n", "2", "--timeout", "3", script], tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode == launch.EXIT_TIMEOUT
    assert elapsed < 60
    # Both ranks were running (asleep) when the timeout stopped them.
    assert "[0] sleeping" in proc.stdout and "[1] sleeping" in proc.stdout, proc.stdout
    assert "[launch] timeout after 3 s; stopped processes [0, 1]" in proc.stdout
    pid_files = _pid_files(pids)
    assert [f.name for f in pid_files] == ["0", "1"]
    for pidfile in pid_files:
        assert not _alive(int(pidfile.read_text()))


def test_module_mode(tmp_path):
    _script(tmp_path, "import os; print('module', os.environ['PMAPKIT_PROCESS_ID'])",
            name="launched_module.py")
    proc = subprocess.run(LAUNCH + ["-n", "2", "-m", "launched_module"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1] module 1" in proc.stdout.splitlines()


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "x.py"], "-n must be a positive number of processes, got 0"),
    (["-n", "2", "--devices-per-process", "0", "x.py"],
     "--devices-per-process must be positive, got 0"),
    (["-n", "2"], "a script to run is required"),
    (["-n", "2", "no_such_script.py"], "no such script: 'no_such_script.py'"),
    (["script.py"], "the following arguments are required: -n"),
])
def test_bad_arguments_are_usage_errors(tmp_path, args, message):
    proc = _launch(args, tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0", "1e999"])
def test_a_timeout_that_is_not_a_positive_finite_number_starts_nothing(tmp_path, timeout):
    marker = tmp_path / "started"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').close()")
    proc = _launch(["-n", "2", "--timeout", timeout, script], tmp_path)
    assert proc.returncode == 2
    assert "--timeout must be a positive, finite number of seconds, got " in proc.stderr
    assert proc.stderr.rstrip().endswith(f"got {float(timeout):g}")
    assert not marker.exists()


@pytest.mark.parametrize("n", [launch.MAX_PROCESSES + 1, 100000])
def test_more_processes_than_the_bound_starts_nothing(tmp_path, n):
    marker = tmp_path / "started"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').close()")
    proc = _launch(["-n", str(n), script], tmp_path)
    assert proc.returncode == 2
    assert (f"-n must be at most {launch.MAX_PROCESSES} (every process runs on this "
            f"machine), got {n}") in proc.stderr
    assert not marker.exists()


def test_the_process_bound_is_documented_in_help(tmp_path):
    proc = _launch(["--help"], tmp_path)
    assert proc.returncode == 0
    assert f"number of processes (1 to {launch.MAX_PROCESSES}" in " ".join(proc.stdout.split())


# Two ranks over 2 devices each: rank 1 waits in a psum that rank 0 never
# joins (rank 0 sleeps, with a child process of its own), or rank 1 exits
# with status 3 once rank 0 is entering the psum (a file rank 0 writes).
# Each writes its PIDs, then prints a line, once it is about to block.
_BLOCKED_IN_A_COLLECTIVE = """
    import os, subprocess, sys, time
    import jax, jax.numpy as jnp
    import pmapkit, pmapkit.distributed
    pmapkit.distributed.initialize()
    rank, mode, pids = jax.process_index(), sys.argv[1], sys.argv[2]
    psum = pmapkit.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
    x = jnp.ones((jax.local_device_count(),))
    psum(x).block_until_ready()                 # both ranks compiled and joined
    mine = [os.getpid()]
    if rank == 0 and mode == "sleep":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        mine.append(child.pid)
    with open(os.path.join(pids, f"{rank}.tmp"), "w") as f:
        f.write(" ".join(map(str, mine)))
    os.rename(os.path.join(pids, f"{rank}.tmp"), os.path.join(pids, str(rank)))
    entering = os.path.join(pids, "entering psum")
    if mode == "sleep" and rank == 0:
        print("sleeping", flush=True)
        time.sleep(300)
    elif mode == "exit3" and rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(entering):
            if time.monotonic() > deadline:
                sys.exit("rank 0 never reached the psum")
            time.sleep(0.01)
        sys.exit(3)
    else:
        open(entering + ".tmp", "w").close()
        print("entering psum", flush=True)
        os.rename(entering + ".tmp", entering)
        psum(x).block_until_ready()
    print("unreachable: the psum returned", flush=True)
"""


def _rank_pids(pids):
    return [int(pid) for f in _pid_files(pids) if f.name in ("0", "1")
            for pid in f.read_text().split()]


def _kill_leftovers(pids):
    for pid in _rank_pids(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_signal_to_the_launcher_stops_every_rank_blocked_in_a_collective(tmp_path, sig):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _script(tmp_path, _BLOCKED_IN_A_COLLECTIVE)
    launcher = subprocess.Popen(
        LAUNCH + ["-n", "2", "--devices-per-process", "2", "--timeout", "200",
                  script, "sleep", str(pids)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=sigint_as_default)
    output = _LauncherOutput(launcher)
    try:
        # Each rank prints its line after writing its PIDs, just before blocking.
        output.wait_for("[0] sleeping", "[1] entering psum", timeout=120)
        rank_pids = _rank_pids(pids)
        assert len(rank_pids) == 3 and all(_alive(pid) for pid in rank_pids)
        sent = time.monotonic()
        launcher.send_signal(sig)
        launcher.wait(timeout=60)
        elapsed = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        survivors = _wait_until_ended(_rank_pids(pids))
        _kill_leftovers(pids)
    output = output.text()
    assert launcher.returncode == 128 + sig, output
    assert elapsed < 15, f"the launcher took {elapsed:.1f} s to stop"
    assert f"[launch] got {sig.name}; stopped processes [0, 1]" in output
    assert "unreachable" not in output
    assert survivors == [], f"left running: {survivors}"


def test_a_signal_the_launcher_was_started_ignoring_stays_ignored(tmp_path):
    """Under ``nohup`` (SIGHUP ignored) a hangup does not stop the run."""
    # The ranks run until the test releases them, after the hangup: a
    # launcher that caught it would have stopped them (status 129).
    released = tmp_path / "released"
    script = _script(tmp_path, f"""
        import os, time
        print("started", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists({str(released)!r}):
            if time.monotonic() > deadline:
                raise SystemExit("never released")
            time.sleep(0.01)
        print("finished")
    """)
    launcher = subprocess.Popen(
        LAUNCH + ["-n", "2", "--timeout", "100", script], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    output = _LauncherOutput(launcher)
    try:
        output.wait_for("[0] started", "[1] started", timeout=60)
        launcher.send_signal(signal.SIGHUP)
        released.touch()
        launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    output = output.text()
    assert launcher.returncode == 0, output
    assert "[0] finished" in output and "[1] finished" in output


def test_a_rank_exiting_with_a_status_is_reported_at_once_not_at_the_timeout(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = _script(tmp_path, _BLOCKED_IN_A_COLLECTIVE)
    start = time.monotonic()
    try:
        proc = _launch(["-n", "2", "--devices-per-process", "2", "--timeout", "200",
                        script, "exit3", str(pids)], tmp_path, timeout=150)
    finally:
        _kill_leftovers(pids)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stdout[-3000:]
    assert "[launch] process 1 exited with status 3; stopped the others" in proc.stdout
    assert elapsed < 100, f"reported after {elapsed:.0f} s, as if at the timeout"
    assert "unreachable" not in proc.stdout


def test_a_rank_exiting_with_a_message_has_status_1_and_prints_it(tmp_path):
    script = _script(tmp_path, """
        import os, sys
        import pmapkit.distributed
        pmapkit.distributed.initialize()
        if os.environ["PMAPKIT_PROCESS_ID"] == "1":
            sys.exit("rank one: bad configuration")
        pmapkit.distributed.shutdown()
    """)
    proc = _launch(["-n", "2", "--devices-per-process", "1", "--timeout", "100", script],
                   tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "[1] rank one: bad configuration" in proc.stdout.splitlines()
    assert "[launch] process 1 exited with status 1; stopped the others" in proc.stdout


def test_initialize_outside_the_launcher_defers_to_jax(monkeypatch):
    from pmapkit import distributed
    for name in (launch.ENV_COORDINATOR, launch.ENV_NUM_PROCESSES, launch.ENV_PROCESS_ID):
        monkeypatch.delenv(name, raising=False)
    seen = {}
    monkeypatch.setattr(jax.distributed, "initialize",
                        lambda **kw: seen.update(kw))
    distributed.initialize(initialization_timeout=5)
    assert seen == {"coordinator_address": None, "num_processes": None,
                    "process_id": None, "local_device_ids": None,
                    "initialization_timeout": 5}


def test_initialize_under_the_launcher_reads_its_environment(monkeypatch):
    from pmapkit import distributed
    monkeypatch.setenv(launch.ENV_COORDINATOR, "127.0.0.1:4321")
    monkeypatch.setenv(launch.ENV_NUM_PROCESSES, "4")
    monkeypatch.setenv(launch.ENV_PROCESS_ID, "2")
    seen = {}
    monkeypatch.setattr(jax.distributed, "initialize",
                        lambda **kw: seen.update(kw))
    distributed.initialize(process_id=3)     # an explicit argument wins
    assert seen["coordinator_address"] == "127.0.0.1:4321"
    assert seen["num_processes"] == 4 and seen["process_id"] == 3


def test_initialize_rejects_a_malformed_environment(monkeypatch):
    from pmapkit import distributed
    monkeypatch.setenv(launch.ENV_COORDINATOR, "127.0.0.1:4321")
    monkeypatch.setenv(launch.ENV_NUM_PROCESSES, "two")
    monkeypatch.setenv(launch.ENV_PROCESS_ID, "0")
    with pytest.raises(ValueError, match="PMAPKIT_NUM_PROCESSES must be an integer, got 'two'"):
        distributed.initialize()


def test_the_demo_from_a_checkout_root_runs_the_installed_build(tmp_path):
    # README's `pmapkit launch -n 2 ... -m pmapkit demo`, typed in a checkout
    # whose pmapkit/ is not built: the ranks run the installed pmapkit (with
    # python -P), not the checkout's pure build.
    import importlib.machinery
    import shutil
    from pmapkit.core.hitpath import _pure_notice
    installed = _pure_notice.installed_package_dir()
    if installed is None or not _pure_notice.compiled_in(installed):
        pytest.skip("no compiled pmapkit installed")
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    shutil.copytree(installed, tmp_path / "pmapkit", ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or n.endswith(suffixes)])
    (tmp_path / "setup.py").write_text("raise SystemExit('not run here')\n")
    proc = subprocess.run([sys.executable, "-P", "-m", "pmapkit", "launch", "-n", "2",
                           "--devices-per-process", "2", "-m", "pmapkit", "demo"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    heads = [line for line in proc.stdout.splitlines() if "compiled dispatch core" in line]
    assert len(heads) == 2 and all("compiled dispatch core: True" in h for h in heads), heads
    assert "pure-Python build" not in proc.stdout + proc.stderr


def test_only_pmapkits_own_modules_skip_the_current_folder():
    assert launch.rank_command("s.py", None, ["a"])[1:] == [launch._RANK_MAIN, "s.py", "a"]
    assert launch.rank_command(None, "mine", [])[1:] == [launch._RANK_MAIN, "-m", "mine"]
    own = launch.rank_command(None, "pmapkit", ["demo"])
    assert own[1:] == ["-P", launch._RANK_MAIN, "-m", "pmapkit", "demo"] or \
        launch._pure_notice.installed_package_dir() is None
