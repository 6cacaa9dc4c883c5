"""``pmapkit launch``: N local processes of one script over 127.0.0.1.

Each process gets its rank, the process count, a coordinator address on a
free loopback port and K simulated CPU devices through environment variables
(``ENV_*`` below) that ``pmapkit.distributed.initialize()`` reads. Output
lines are prefixed with the rank. If one process fails, the timeout passes,
or the launcher gets SIGINT, SIGTERM or SIGHUP (Ctrl-C, ``timeout``, SLURM's
``scancel``, ``docker stop``, a closed terminal), every process is stopped
(its whole process group) and the launcher exits non-zero (the failing
process's status, 124, or 128 + the signal; a signal the launcher was
started ignoring, as SIGHUP under ``nohup``, stays ignored): no orphans, no
hang.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from pmapkit.core.hitpath import _pure_notice

ENV_COORDINATOR = "PMAPKIT_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "PMAPKIT_NUM_PROCESSES"
ENV_PROCESS_ID = "PMAPKIT_PROCESS_ID"
ENV_LOCAL_DEVICES = "PMAPKIT_LOCAL_DEVICE_COUNT"

EXIT_TIMEOUT = 124
MAX_PROCESSES = 64      # every process is a JAX runtime on this one machine
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# SIGTERM, then SIGKILL after this long. A rank that joined jax.distributed
# catches SIGTERM (JAX's preemption notifier) and only SIGKILL ends it.
_GRACE_S = 3.0
# Each rank runs its script through this file (standard library only), which
# ends a failing rank at once instead of in JAX's shutdown barrier.
_RANK_MAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "tools", "run.py")


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_environment(base, *, rank, num_processes, coordinator, devices_per_process):
    """The environment of process ``rank``: launcher variables and K CPU devices."""
    env = dict(base)
    env[ENV_COORDINATOR] = coordinator
    env[ENV_NUM_PROCESSES] = str(num_processes)
    env[ENV_PROCESS_ID] = str(rank)
    env[ENV_LOCAL_DEVICES] = str(devices_per_process)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONUNBUFFERED"] = "1"   # lines reach the prefixer as they are printed
    return env


def _parse(argv, prog="pmapkit launch"):
    import argparse  # only the command line needs it (not ``import pmapkit``)

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run SCRIPT in N local processes joined by jax.distributed "
                    "over 127.0.0.1.")
    parser.add_argument("-n", "--num-processes", type=int, required=True,
                        metavar="N",
                        help=f"number of processes (1 to {MAX_PROCESSES}: all run "
                             "on this machine)")
    parser.add_argument("--devices-per-process", type=int, default=4, metavar="K",
                        help="simulated CPU devices per process (default 4)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="stop everything after S seconds, a positive finite "
                             "number (default 600)")
    parser.add_argument("-m", dest="module", default=None,
                        help="run a module (like python -m) instead of a script")
    parser.add_argument("script", nargs="?", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="arguments passed to the script")
    opts = parser.parse_args(argv)
    if opts.num_processes < 1:
        parser.error(f"-n must be a positive number of processes, got {opts.num_processes}")
    if opts.num_processes > MAX_PROCESSES:
        parser.error(f"-n must be at most {MAX_PROCESSES} (every process runs on this "
                     f"machine), got {opts.num_processes}")
    if opts.devices_per_process < 1:
        parser.error("--devices-per-process must be positive, "
                     f"got {opts.devices_per_process}")
    if not (math.isfinite(opts.timeout) and opts.timeout > 0):
        parser.error("--timeout must be a positive, finite number of seconds, "
                     f"got {opts.timeout:g}")
    if opts.module is None:
        if opts.script is None:
            parser.error("a script to run is required (or -m MODULE)")
        if not os.path.isfile(opts.script):
            parser.error(f"no such script: {opts.script!r}")
    elif opts.script is not None:
        opts.args = [opts.script] + opts.args
    return opts


def _relay(stream, rank, out, lock):
    """Copies ``stream`` to ``out`` line by line, each line prefixed with the rank."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        if not line.endswith("\n"):
            line += "\n"
        with lock:
            out.write(f"[{rank}] {line}")
            out.flush()
    stream.close()


def _stop_all(procs):
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def process_alive(pid) -> bool:
    """Whether process ``pid`` still runs. A zombie (ended, not yet reaped by
    its new parent, PID 1, once its own parent is gone) is not alive: what
    a supervisor checks to see that no rank of a stopped run is left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class _StopSignals:
    """While active (main thread only), SIGINT, SIGTERM and SIGHUP are noted
    rather than ending the launcher, so the supervisor stops every process
    first. The handler only records: nothing is interrupted mid-start or
    mid-cleanup, and a repeated signal changes nothing."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def _note(self, signum, frame):
        if self.received is None:
            self.received = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:
                    continue   # ignored on purpose (nohup, a background job): stays so
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def rank_command(script, module, args):
    """What each rank runs. pmapkit's own modules (``-m pmapkit demo``) run
    the installed pmapkit with ``python -P``: from a checkout's root the
    current folder, first on a rank's ``sys.path``, would give the ranks the
    checkout's ``pmapkit/``, uncompiled until built. Without an installed
    pmapkit they import the current folder's (whose notice says so)."""
    command = [sys.executable]
    if (module is not None and module.split(".")[0] == "pmapkit"
            and _pure_notice.installed_package_dir() is not None):
        command.append("-P")
    command.append(_RANK_MAIN)
    command += ["-m", module] if module is not None else [script]
    return command + list(args)


def launch(num_processes, script=None, args=(), *, module=None,
           devices_per_process=4, timeout=600.0, out=None):
    """Runs the processes; returns the launcher's exit status."""
    out = sys.stdout if out is None else out
    coordinator = f"127.0.0.1:{free_loopback_port()}"
    command = rank_command(script, module, args)
    lock = threading.Lock()
    procs, relays = [], []
    with _StopSignals() as signals:
        try:
            for rank in range(num_processes):
                if signals.received is not None:
                    break
                env = process_environment(
                    os.environ, rank=rank, num_processes=num_processes,
                    coordinator=coordinator, devices_per_process=devices_per_process)
                proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)   # its own group: killpg
                procs.append(proc)
                relay = threading.Thread(target=_relay, args=(proc.stdout, rank, out, lock),
                                         daemon=True)
                relay.start()
                relays.append(relay)
            status, message = _supervise(procs, timeout, signals)
        except BaseException:
            _stop_all(procs)
            raise
        finally:
            for relay in relays:   # the failing process's last lines come first
                relay.join(timeout=5)
    if message:
        out.write(f"[launch] {message}\n")
        out.flush()
    return status


def _supervise(procs, timeout, signals):
    """Waits for all processes: (exit status, message or None)."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [proc.poll() for proc in procs]
        running = [rank for rank, code in enumerate(codes) if code is None]
        if signals.received is not None:
            _stop_all(procs)
            name = signal.Signals(signals.received).name
            return 128 + signals.received, f"got {name}; stopped processes {running}"
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank, code = failed[0]
            _stop_all(procs)
            return (code if code > 0 else 1,
                    f"process {rank} exited with status {code}; stopped the others")
        if all(code == 0 for code in codes):
            return 0, None
        if time.monotonic() > deadline:
            _stop_all(procs)
            return EXIT_TIMEOUT, f"timeout after {timeout:g} s; stopped processes {running}"
        time.sleep(0.05)


def main(argv, prog="pmapkit launch"):
    """``pmapkit launch``; ``prog``: the command as typed, for messages."""
    opts = _parse(argv, prog)
    try:
        return launch(opts.num_processes, opts.script, opts.args, module=opts.module,
                      devices_per_process=opts.devices_per_process, timeout=opts.timeout)
    except KeyboardInterrupt:   # before the launcher's own handlers were in place
        return 128 + signal.SIGINT
