"""Running probes: the worker subprocesses that run them and the classification of outcomes.

A probe is a small function that does what a demanding user might (a bad
argument, a corrupted file, many threads) and returns, or raises. Its
outcome is one of:

  clean    the documented error type with a message naming the argument or
           the problem, or a correct result
  unclear  an exception of another type, or an internal message
           ("'NoneType' has no len()", "has no attribute", ...), or one that
           does not name what it should
  wrong    silent garbage: a result that differs from the reference, or a
           bad input accepted without a word
  crash    the process died (signal, abort, exit) while running the probe
  hang     the probe did not finish within its timeout
  leak     (memory section) resident memory kept growing

Probes run in worker subprocesses (``python -m stress --worker``)
that write one JSON line when a probe starts and one when it ends. The
parent watches the lines: a worker that dies mid-probe is a crash of that
probe, one that stays in a probe past its timeout is killed and the probe is
a hang; either way the rest of the batch goes on in a fresh worker, and a
crash seen in a batch is confirmed by running that probe alone. Probes that
leave process-wide state behind (interrupts, donation, signals) are marked
``isolated`` and get a worker of their own.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback

from stress.catalog import build_registry
from stress.common import check_equal, summarize
from stress.probes import Result, Verdict, Wrong

#: Text that only an internal failure produces: Python's own messages about
#: objects the user never handed over.
INTERNAL_MARKERS = (
    "'NoneType' object", "of type 'NoneType'", "has no attribute", "object is not subscriptable",
    "index out of range", "unhashable type", "object is not iterable",
    "not enough values to unpack", "too many values to unpack",
    "object is not callable", "referenced before assignment",
    "maximum recursion depth")

#: How long a worker may go without starting or ending a probe.
IDLE_LIMIT_S = 120.0
#: The most probes one worker runs before the next gets a fresh process.
BATCH_SIZE = 80
#: The devices every worker simulates.
WORKER_DEVICES = 8


# -- classification -------------------------------------------------------------------
def _message(exc):
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify_exception(probe, exc):
    """``(outcome, message)`` of a probe that raised ``exc``."""
    message = _message(exc)
    if isinstance(exc, Verdict):
        return exc.outcome, str(exc)
    if not isinstance(exc, probe.expect):
        wanted = "/".join(t.__name__ for t in probe.expect)
        return "unclear", f"{message}  [expected {wanted}]"
    text = str(exc)
    marker = next((m for m in INTERNAL_MARKERS if m in text), None)
    if marker is not None:
        return "unclear", f"{message}  [internal message: {marker!r}]"
    if probe.names and not any(n.lower() in text.lower() for n in probe.names):
        return "unclear", f"{message}  [does not name {' or '.join(map(repr, probe.names))}]"
    if probe.match is not None and not re.search(probe.match, text):
        return "unclear", f"{message}  [expected a message matching {probe.match!r}]"
    return "clean", message


def run_probe(probe):
    """Run one probe in this process: ``(outcome, message, details)``."""
    try:
        out = probe.body()
    except BaseException as exc:  # noqa: BLE001 — an interrupt is an outcome too
        outcome, message = classify_exception(probe, exc)
        details = {}
        if outcome == "unclear" and not isinstance(exc, Verdict):
            details["traceback"] = "".join(traceback.format_exception(exc)[-6:])[-3000:]
        return outcome, message, details
    if isinstance(out, Result):
        return "clean", out.note, out.details
    if probe.ref is not None:
        try:
            check_equal(out, probe.ref())
        except Wrong as exc:
            return "wrong", str(exc), {}
        return "clean", "correct result", {}
    return "wrong", f"bad input accepted without an error; returned {summarize(out)}", {}


# -- the worker ---------------------------------------------------------------------------
def worker_environment():
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={WORKER_DEVICES}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env["PYTHONFAULTHANDLER"] = "1"   # a segfault leaves a Python traceback in the log
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (checkout, env.get("PYTHONPATH")) if p)
    return env


def worker_main(mode, batch_path, results_path):
    """Run the probes named in ``batch_path``, one JSON line each to
    ``results_path`` when it starts and when it ends."""
    import faulthandler
    faulthandler.enable()
    reg = build_registry(mode)
    with open(batch_path) as f:
        names = json.load(f)
    with open(results_path, "a", buffering=1) as out:
        for name in names:
            out.write(json.dumps({"start": name}) + "\n")
            out.flush()
            start = time.perf_counter()
            outcome, message, details = run_probe(reg[name])
            record = {"done": name, "outcome": outcome, "message": message,
                      "seconds": round(time.perf_counter() - start, 3),
                      "details": _jsonable(details)}
            out.write(json.dumps(record) + "\n")
            out.flush()
    return 0


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


# -- the parent ---------------------------------------------------------------------------
class Runner:
    """Runs probes in workers and collects one record per probe."""

    def __init__(self, reg, workdir, script, log=None):
        self.reg = reg
        self.workdir = workdir
        self.script = script
        self.log = log or (lambda line: None)
        self._serial = 0

    def run(self, probes, batch_size=BATCH_SIZE):
        records = []
        for batch in self._batches(probes, batch_size):
            records += self._run_batch(batch)
        return records

    def _batches(self, probes, batch_size):
        batch = []
        for probe in probes:
            if probe.isolated:
                if batch:
                    yield batch
                    batch = []
                yield [probe]
            else:
                batch.append(probe)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def _run_batch(self, batch):
        records = {}
        remaining = list(batch)
        while remaining:
            done, failed = self._run_worker(remaining)
            records.update(done)
            if failed is not None:
                name, record = failed
                if len(remaining) > 1 and record["outcome"] == "crash":
                    # Confirm alone that this probe, not an earlier one, crashed.
                    self.log(f"  (running {name} alone to confirm)")
                    alone, alone_failed = self._run_worker([self.reg[name]])
                    if alone_failed is None:
                        again = alone[name]
                        record = dict(record, message=(
                            f"{record['message']}  [it crashed only after the probes "
                            f"before it in one worker; alone it is {again['outcome']}: "
                            f"{again['message'][:200]}]"))
                    else:
                        record = alone_failed[1]
                records[name] = record
            remaining = [p for p in remaining if p.name not in records]
        return [records[p.name] for p in batch]

    def _run_worker(self, probes):
        """Run ``probes`` in one worker until it ends or one crashes or hangs.

        Returns ``(records of finished probes, (name, record) of the probe
        that crashed or hung, or None)``."""
        self._serial += 1
        tag = f"w{self._serial:04d}"
        batch_path = os.path.join(self.workdir, f"{tag}.batch.json")
        results_path = os.path.join(self.workdir, f"{tag}.results.jsonl")
        log_path = os.path.join(self.workdir, f"{tag}.log")
        with open(batch_path, "w") as f:
            json.dump([p.name for p in probes], f)
        # ``python -m stress`` from the folder holding the package, whatever
        # the worker's own working directory.
        command = [sys.executable, "-m", "stress", "--worker", self.reg.mode,
                   batch_path, results_path]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=worker_environment(),
                                    cwd=self.workdir, start_new_session=True)
        done, current, started_at, offset = {}, None, None, 0
        idle_since = time.monotonic()
        try:
            while True:
                offset, lines = _read_lines(results_path, offset)
                for line in lines:
                    idle_since = time.monotonic()
                    event = json.loads(line)
                    if "start" in event:
                        current, started_at = event["start"], time.monotonic()
                    else:
                        name = event.pop("done")
                        done[name] = self._record(name, **event)
                        self.log(_progress(done[name]))
                        current = None
                code = proc.poll()
                if code is not None:
                    offset, lines = _read_lines(results_path, offset)
                    if lines:
                        continue   # read what it wrote before it ended
                    break
                if current is not None:
                    limit = self.reg[current].timeout
                    if time.monotonic() - started_at > limit:
                        _kill_group(proc)
                        record = self._record(current, outcome="hang", seconds=limit,
                                              message=f"no result after {limit:g} s; "
                                                      f"killed. {_log_tail(log_path)}")
                        self.log(_progress(record))
                        return done, (current, record)
                elif time.monotonic() - idle_since > IDLE_LIMIT_S:
                    # Stuck outside any probe: starting, between two, or exiting.
                    _kill_group(proc)
                    if not done:
                        raise RuntimeError(f"worker did not start: {_log_tail(log_path)}")
                    if len(done) == len(probes):
                        self.log(f"  (worker {tag} did not exit after its last probe; killed)")
                        return done, None
                    return self._blame_last(done, "hang", (
                        f"the worker hung right after this probe returned (nothing for "
                        f"{IDLE_LIMIT_S:g} s). {_log_tail(log_path)}"))
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                _kill_group(proc)
        if current is not None:
            record = self._record(current, outcome="crash",
                                  seconds=round(time.monotonic() - started_at, 3),
                                  message=f"{_exit_description(code)}. {_log_tail(log_path)}")
            self.log(_progress(record))
            return done, (current, record)
        if len(done) < len(probes):
            if not done:
                raise RuntimeError(f"worker ended ({_exit_description(code)}) before "
                                   f"starting a probe: {_log_tail(log_path)}")
            # It died between two probes: a late effect of the last one.
            return self._blame_last(done, "crash", (
                f"the worker died right after this probe returned "
                f"({_exit_description(code)}). {_log_tail(log_path)}"))
        return done, None

    def _blame_last(self, done, outcome, message):
        """The last probe that returned takes the blame for what the worker
        did after it: ``(done without it, (its name, its record))``."""
        last = next(reversed(done))
        record = dict(done.pop(last), outcome=outcome, message=message)
        self.log(_progress(record))
        return done, (last, record)

    def _record(self, name, outcome, message, seconds, details=None):
        probe = self.reg[name]
        return {"name": name, "section": probe.section, "group": probe.group,
                "reference": probe.reference, "outcome": outcome,
                "message": message, "seconds": seconds, "details": details or {}}


def _read_lines(path, offset):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset, []
    end = data.rfind(b"\n") + 1
    return offset + end, [line for line in data[:end].decode().splitlines() if line]


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _exit_description(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _log_tail(path, chars=900):
    """What the worker's log says about how it ended: the fatal error, XLA's
    error lines, the innermost probe and pmapkit frames, the last lines."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 50000))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    picked = []

    def pick(line):
        if line not in picked:
            picked.append(line)
    for line in lines:
        if re.match(r"[EF]\d{4} ", line) or "Fatal Python error" in line \
                or "Check failed" in line or "terminate called" in line:
            pick(line)
    frames = [line for line in lines if line.startswith("File ")]
    for marker in ("/bench/stress/", "/pmapkit/"):
        first = next((line for line in frames if marker in line), None)
        if first:
            pick(first)
    if not picked:
        for line in [line for line in lines if not line.startswith("File ")][-4:]:
            pick(line)
    tail = " | ".join(picked[:6])
    return ("log: " + tail[:chars]) if tail else ""


def _progress(record):
    text = record["message"].replace("\n", " ")
    if len(text) > 110:
        text = text[:107] + "..."
    return f"  {record['outcome']:<7} {record['name']}: {text}"
