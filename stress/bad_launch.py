"""``pmapkit launch`` misused: bad options, missing scripts, ranks that fail,
and real signals while ranks are blocked in a collective.

Usage errors must exit 2 with a message naming the option before anything
starts. A failing rank must be reported (its rank and status) at once, not
after ``--timeout``. SIGTERM/SIGHUP/SIGINT must end the launcher with
128 + the signal and leave no rank alive (each rank writes its PID).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from stress.probes import Crash, Hang, Result, Unclear, Wrong

from pmapkit.distributed import launch

SECTION = "bad_inputs"
LAUNCH = [sys.executable, "-m", "pmapkit", "launch"]

RANK_SCRIPT = textwrap.dedent("""\
    import os, pathlib, sys, time
    import jax, numpy as np
    import pmapkit, pmapkit.distributed
    pmapkit.distributed.initialize()
    rank = jax.process_index()
    pathlib.Path(sys.argv[1], f"pid{rank}").write_text(str(os.getpid()))
    mode = sys.argv[2]
    if rank == 1:
        if mode == "exit3":
            sys.exit(3)
        if mode == "raise":
            raise RuntimeError("rank 1 failed on purpose")
        if mode == "sigkill":
            os.kill(os.getpid(), 9)
        time.sleep(3600)   # never joins the collective
    print("rank 0 enters the collective", flush=True)
    pmapkit.pmap(lambda x: jax.lax.psum(x, "i"), "i")(np.ones(1, np.float32)).block_until_ready()
    print("rank 0 left the collective", flush=True)
""")


_alive = launch.process_alive  # a zombie counts as ended


def _usage(args, *, names, code=2, limit=30):
    """The launcher must exit ``code`` quickly, its message naming ``names``."""
    def probe():
        start = time.monotonic()
        try:
            proc = subprocess.run(LAUNCH + args, capture_output=True, text=True,
                                  timeout=limit, cwd=tempfile.gettempdir(),
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            raise Hang(f"`pmapkit launch {' '.join(args)}` still running after "
                       f"{limit} s (it started something)") from None
        elapsed = time.monotonic() - start
        text = (proc.stderr + proc.stdout).strip()
        last = text.splitlines()[-1] if text else ""
        if proc.returncode < 0:
            raise Crash(f"killed by signal {-proc.returncode}: {last}")
        if proc.returncode != code:
            raise Wrong(f"exit status {proc.returncode}, expected {code} "
                        f"({elapsed:.1f} s): {last[:300]}")
        if not any(n.lower() in text.lower() for n in names):
            raise Unclear(f"exit {code} but the message names none of {names}: {last[:300]}")
        return Result(f"exit {proc.returncode} in {elapsed:.1f} s: {last[:200]}")
    return probe


class _Run:
    """A launcher over two ranks running RANK_SCRIPT in ``mode``."""

    def __init__(self, mode, timeout=120):
        self.dir = tempfile.mkdtemp(prefix="stress-launch-")
        script = os.path.join(self.dir, "rank.py")
        with open(script, "w") as f:
            f.write(RANK_SCRIPT)
        self.log = open(os.path.join(self.dir, "launch.log"), "w+")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            LAUNCH + ["-n", "2", "--devices-per-process", "1", "--timeout", str(timeout),
                      script, self.dir, mode],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=self.dir, start_new_session=True)

    def pids(self):
        out = []
        for rank in (0, 1):
            try:
                with open(os.path.join(self.dir, f"pid{rank}")) as f:
                    out.append(int(f.read()))
            except (FileNotFoundError, ValueError):
                pass
        return out

    def wait_for_ranks(self, limit=90):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if len(self.pids()) == 2 and "enters the collective" in self.output():
                return
            if self.proc.poll() is not None:
                raise Wrong(f"the launcher ended ({self.proc.returncode}) before both "
                            f"ranks started: {self.tail()}")
            time.sleep(0.1)
        raise Hang(f"the ranks did not start within {limit} s: {self.tail()}")

    def wait(self, limit):
        try:
            return self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            raise Hang(f"the launcher did not exit within {limit:g} s: {self.tail()}") from None

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def tail(self, n=3):
        lines = [line for line in self.output().splitlines() if line.strip()]
        return " | ".join(lines[-n:])[-400:]

    def survivors(self, grace=5.0):
        deadline = time.monotonic() + grace
        while True:
            alive = [pid for pid in self.pids() if _alive(pid)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)

    def cleanup(self):
        for pid in self.pids():
            if _alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def _signal_probe(sig):
    def probe():
        run = _Run("block")
        try:
            run.wait_for_ranks()
            time.sleep(1.0)   # rank 0 is in the collective, rank 1 asleep
            sent = time.monotonic()
            os.kill(run.proc.pid, sig)
            code = run.wait(20)
            took = time.monotonic() - sent
            alive = run.survivors()
            if alive:
                raise Wrong(f"exit {code} after {sig.name}, but ranks {alive} are still "
                            "running")
            if code != 128 + sig:
                raise Wrong(f"exit {code} after {sig.name}, expected {128 + sig}: {run.tail()}")
            return Result(f"exit {code} {took:.1f} s after {sig.name}, no rank alive")
        finally:
            run.cleanup()
    return probe


def _failing_rank_probe(mode, expected_code, words, launch_timeout=120):
    def probe():
        run = _Run(mode, timeout=launch_timeout)
        try:
            code = run.wait(launch_timeout + 30)
            took = time.monotonic() - run.start
            text = run.output()
            alive = run.survivors()
            if alive:
                raise Wrong(f"exit {code}, but ranks {alive} are still running")
            if code != expected_code:
                raise Wrong(f"exit {code} after {took:.0f} s, expected {expected_code}: "
                            f"{run.tail()}")
            if mode != "block" and took > launch_timeout / 2:
                raise Wrong(f"exit {code} only after {took:.0f} s (--timeout "
                            f"{launch_timeout}): the failure was not seen at once")
            if not all(w in text for w in words):
                raise Unclear(f"exit {code} but the output lacks {words}: {run.tail()}")
            return Result(f"exit {code} after {took:.1f} s: {run.tail(1)}")
        finally:
            run.cleanup()
    return probe


def register(reg):
    add = reg.section(SECTION, "launch", timeout=150)
    script = os.path.abspath(__file__)   # any existing file; never run by usage errors
    for label, args, names in (
            ("-n 0", ["-n", "0"], ("-n",)),
            ("-n -1", ["-n", "-1"], ("-n",)),
            ("-n 100000", ["-n", "100000"], ("-n",)),
            ("-n abc", ["-n", "abc"], ("-n", "invalid int")),
            ("--timeout nan", ["-n", "2", "--timeout", "nan"], ("--timeout",)),
            ("--timeout inf", ["-n", "2", "--timeout", "inf"], ("--timeout",)),
            ("--timeout -1", ["-n", "2", "--timeout", "-1"], ("--timeout",)),
            ("--timeout 0", ["-n", "2", "--timeout", "0"], ("--timeout",)),
            ("--timeout abc", ["-n", "2", "--timeout", "abc"], ("--timeout",)),
            ("--devices-per-process 0", ["-n", "2", "--devices-per-process", "0"],
             ("--devices-per-process",))):
        add(f"launch {label}", _usage(args + [script], names=names))
    add("launch a missing script", _usage(["-n", "2", "/nonexistent/train.py"],
                                          names=("no such script", "train.py")))
    add("launch with no script", _usage(["-n", "2"], names=("script",)))
    add("launch -m a missing module", _usage(
        ["-n", "2", "--devices-per-process", "1", "-m", "no_such_module_xyz"],
        code=1, names=("no_such_module_xyz",), limit=90))
    add("rank 1 sys.exit(3), rank 0 in a collective", _failing_rank_probe(
        "exit3", 3, ("process 1 exited with status 3",)))
    add("rank 1 raises, rank 0 in a collective", _failing_rank_probe(
        "raise", 1, ("rank 1 failed on purpose", "process 1")))
    add("rank 1 SIGKILLs itself", _failing_rank_probe(
        "sigkill", 1, ("process 1",)))
    add("--timeout 8 with ranks blocked", _failing_rank_probe(
        "block", 124, ("timeout",), launch_timeout=8))
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        add(f"{sig.name} while ranks are blocked", _signal_probe(sig))
