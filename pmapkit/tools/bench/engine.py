"""The benchmark engine: cases, runners, measurement, the memory check.

A ``Case`` names one measurement (JAX's ``benchmarks/api_benchmark.py`` names
where JAX has one) and says how to build its ``Runner`` under each impl
(``build(case, impl, devices)``); modules of ``CASE_MODULES`` define and
register the cases (``register_cases``), one module per system:

``cases_dispatch``  JAX's api_benchmark dispatch cases (pmap, pjit, first call)
``cases_inputs``    what real programs feed: input origins, pjit call forms,
                    AOT calls, ``out_axes=None``, a training loop
``cases_wrappers``  wrappers built afresh per call (pmap, pjit, a pmap built
                    inside a loss under grad)

Impls ("columns") of a case: ``jax.pmap``, ``jax.jit`` (the equivalent jit),
``pmapkit``, ``raw`` (the floor: bare ``execute_sharded`` + result handlers
on pmapkit's own compiled program). Feature benchmarks (taps per second,
export round trips, ...) have their own registry in ``features``.

Measurements are caller-thread CPU (``time.thread_time``) and wall time per
call. Nothing here touches jax's device state at import time: devices are
looked up when a runner is built, so callers configure the device count first.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import os
import statistics
import time
import warnings
from collections.abc import Callable

import jax
import numpy as np

import pmapkit

#: Impl columns, in display order.
IMPLS = ("jax.pmap", "jax.jit", "pmapkit", "raw")
PMAP_IMPLS = IMPLS
PJIT_IMPLS = ("jax.jit", "pmapkit", "raw")
FIRST_CALL_IMPLS = ("jax.pmap", "jax.jit", "pmapkit")

#: Non-blocking loops block at least this often (XLA:CPU deadlock guard).
BLOCK_EVERY = 200

#: How many CPU devices the suite expects (the 8-device cases need them).
NUM_DEVICES = 8


class Unavailable(Exception):
    """This case/impl combination cannot run here (reason in the message)."""


# -- cases ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    family: str           # "pmap", "pjit", "first_call", "pmap_input", ...
    mode: str             # "blocking" | "dispatch" | "step" | "first_call"
    ndev: int
    fun: Callable
    make_inputs: Callable  # ndev -> tuple of host (numpy) positional args
    impls: tuple
    build: Callable        # (case, impl, devices) -> Runner; may raise Unavailable
    numpy_input: bool = False
    requires_pjit: bool = False
    origin: str | None = None  # what a case varies (input origin, call form)
    # What the table must say beside the case: impls not fed the same input,
    # and why (printed under the table, kept in the JSON rows).
    note: str | None = None

    @property
    def blocking(self):
        return self.mode != "dispatch"

    @property
    def setup_key(self):
        """Cases with equal keys (a case and its ``_dispatch`` twin) can share
        runners: same function, inputs, devices and builder, another timing
        loop."""
        return (self.family, self.fun, self.make_inputs, self.ndev,
                self.numpy_input, self.build, self.origin)

    def unavailable_reason(self, impl=None):
        """None if the case (and impl) can run in this process, else why not."""
        if self.requires_pjit and not hasattr(pmapkit, "pjit"):
            return "pmapkit has no pjit"
        if impl is not None and impl not in self.impls:
            return f"{impl} is not an impl of {self.name}"
        return None


#: Every case, available here or not (see ``Case.unavailable_reason``), in
#: registration order: those of ``CASE_MODULES`` once ``load_cases`` ran.
CASES = []
CASES_BY_NAME = {}
#: Modules that register their cases with ``register_cases`` on import.
CASE_MODULES = ("pmapkit.tools.bench.cases_dispatch", "pmapkit.tools.bench.cases_inputs",
                "pmapkit.tools.bench.cases_wrappers")


def register_cases(cases):
    for c in cases:
        if c.name in CASES_BY_NAME:
            raise ValueError(f"benchmark case {c.name!r} registered twice")
        CASES.append(c)
        CASES_BY_NAME[c.name] = c


def load_cases():
    """Import ``CASE_MODULES`` (each registers its cases); returns CASES."""
    for module in CASE_MODULES:
        importlib.import_module(module)
    return CASES


#: The cases ``pmapkit bench --quick`` runs (``--full`` and ``--cases`` run
#: every case): of each family, the forms JAX's api_benchmark names and the
#: 8-device (pjit: 4-device) ones, so every pattern of the summary keeps
#: cases while the run stays under two minutes on two cores.
QUICK_CASES = frozenset({
    "pmap_trivial_1_devices", "pmap_trivial_dispatch_1_devices",
    "pmap_trivial_8_devices", "pmap_trivial_dispatch_8_devices",
    "pmap_simple_dispatch_8_devices", "pmap_simple_dispatch_8_devices_100_args",
    "pmap_numpy_input_8_devices", "pmap_first_call_8_devices",
    "pjit_simple_1_device", "pjit_simple_dispatch_1_device", "pjit_simple_4_device",
    "pjit_simple_dispatch_4_device_100_args",
    "pmap_input_pmapkit_same_axis_8_devices", "pmap_input_pmapkit_other_axis_8_devices",
    "pmap_input_jax_pmap_8_devices", "pmap_input_device_put_named_8_devices",
    "pmap_input_jit_output_8_devices", "pmap_input_numpy_8_devices",
    "pmap_input_device_put_replicated_8_devices",
    "pmap_input_single_device_8_devices", "pmap_input_committed_other_device_8_devices",
    "pmap_input_numpy_blocking_8_devices",
    "pmap_aot_1_devices", "pmap_aot_8_devices", "pmap_out_axes_none_dispatch_8_devices",
    "pmap_scalar_arg_1_devices", "pmap_scalar_arg_8_devices",
    "pmap_numpy_beside_array_1_devices",
    "pjit_explicit_4_device", "pjit_omitted_specs_4_device", "pjit_kwargs_4_device",
    "pjit_static_argnames_4_device", "pjit_aot_4_device",
    "pmap_train_loop_8_devices", "pmap_fresh_wrapper_8_devices",
    "pjit_fresh_wrapper_8_devices", "grad_of_pmap_built_inside_8_devices",
})


def select_cases(substring=None, include_unavailable=False, quick=False):
    """The cases whose name contains ``substring`` (all without one); with
    ``quick``, only those of ``QUICK_CASES``."""
    out = []
    for c in load_cases():
        if substring and substring not in c.name:
            continue
        if quick and c.name not in QUICK_CASES:
            continue
        if not include_unavailable and c.unavailable_reason() is not None:
            continue
        out.append(c)
    return out

# -- runners --------------------------------------------------------------------
@dataclasses.dataclass
class Runner:
    """One case under one impl, ready to call: ``fn(*args, **kwargs)`` is
    one call."""

    case: Case
    impl: str
    fn: Callable
    args: tuple
    context: Callable = contextlib.nullcontext  # entered around every loop
    kwargs: dict = dataclasses.field(default_factory=dict)

    def call(self):
        return self.fn(*self.args, **self.kwargs)


def devices_for(n):
    devices = jax.devices()
    if len(devices) < n:
        raise Unavailable(
            f"needs {n} devices, have {len(devices)} (set XLA_FLAGS="
            f"--xla_force_host_platform_device_count={NUM_DEVICES} before jax "
            "starts, or run `python -m pmapkit bench`)")
    return devices[:n]

def pjit_mesh(devices):
    """A ``with mesh:`` context over ``devices`` (axis ``x``), as classic pjit
    code enters it."""
    mesh_cls = getattr(pmapkit, "Mesh", None)
    if mesh_cls is None:
        from jax.sharding import Mesh as mesh_cls
    mesh = mesh_cls(np.array(devices).reshape(len(devices)), ("x",))

    @contextlib.contextmanager
    def context():
        with warnings.catch_warnings():
            # jax's own Mesh deprecates `with mesh:`; the classic API uses it.
            warnings.simplefilter("ignore", DeprecationWarning)
            with mesh:
                yield
    return context


def make_runner(case: Case, impl: str) -> Runner:
    """Build, compile and warm up ``case`` under ``impl``.

    Raises ``Unavailable`` when the combination cannot run in this process.
    """
    reason = case.unavailable_reason(impl)
    if reason is not None:
        raise Unavailable(reason)
    return case.build(case, impl, devices_for(case.ndev))

class RunnerCache:
    """Reuses the runners of the last setup for the next case with the same
    ``setup_key`` (the blocking case and its dispatch twin are adjacent in
    ``CASES``), halving the compiles; ``Unavailable`` is cached too."""

    def __init__(self):
        self._key = None
        self._runners = {}

    def get(self, case: Case, impl: str) -> Runner:
        if case.setup_key != self._key:
            self._key, self._runners = case.setup_key, {}
        hit = self._runners.get(impl)
        if hit is None:
            try:
                hit = make_runner(case, impl)
            except Unavailable as exc:
                hit = exc
            self._runners[impl] = hit
        if isinstance(hit, Unavailable):
            raise hit
        return dataclasses.replace(hit, case=case)

    def clear(self):
        self._key, self._runners = None, {}


def warm(runner, calls=20):
    with runner.context():
        out = None
        for _ in range(calls):
            out = runner.call()
        jax.block_until_ready(out)

# -- measuring ------------------------------------------------------------------
def measure(runner: Runner, calls: int):
    """``(cpu_us, wall_us)`` per call over ``calls`` calls (gc stays on).

    CPU is caller-thread CPU (``time.thread_time``): the dispatch work, without
    device execution on XLA's threads. Blocking (and first-call) cases time
    call + ``block_until_ready`` each call; dispatch cases time only the calls,
    in chunks of at most ``BLOCK_EVERY``, blocking untimed between chunks;
    step cases time each call alone and block untimed after it.
    """
    fn, args, kwargs = runner.fn, runner.args, runner.kwargs
    block = jax.block_until_ready
    thread_time, perf_counter = time.thread_time, time.perf_counter
    cpu = wall = 0.0
    # Young objects only: a full collection with jax loaded costs ~0.1 s
    # (callers do one per case).
    gc.collect(0)
    with runner.context():
        if runner.case.mode in ("dispatch", "step"):
            # "step": one call timed at a time, its result waited for untimed
            # (a training step: the loop reads the loss, not timed here).
            chunk = 1 if runner.case.mode == "step" else BLOCK_EVERY
            done = 0
            while done < calls:
                k = min(chunk, calls - done)
                w0 = perf_counter()
                c0 = thread_time()
                if kwargs:
                    for _ in range(k):
                        out = fn(*args, **kwargs)
                else:  # the plain call form, as the other impls' users write it
                    for _ in range(k):
                        out = fn(*args)
                c1 = thread_time()
                w1 = perf_counter()
                cpu += c1 - c0
                wall += w1 - w0
                block(out)
                del out
                done += k
        elif runner.case.mode == "first_call":
            w0 = perf_counter()
            c0 = thread_time()
            for _ in range(calls):
                fn(*args, **kwargs)  # blocks itself
            cpu = thread_time() - c0
            wall = perf_counter() - w0
        else:
            w0 = perf_counter()
            c0 = thread_time()
            if kwargs:
                for _ in range(calls):
                    block(fn(*args, **kwargs))
            else:
                for _ in range(calls):
                    block(fn(*args))
            cpu = thread_time() - c0
            wall = perf_counter() - w0
    return cpu / calls * 1e6, wall / calls * 1e6


def calibrate(runner: Runner, target_s: float, lo=10, hi=20000):
    """Calls per measurement so that one takes about ``target_s`` seconds."""
    if runner.case.mode == "first_call":
        return 1
    probe = 20
    start = time.perf_counter()
    with runner.context():
        out = None
        for _ in range(probe):
            out = runner.call()
        jax.block_until_ready(out)
    per_call = max((time.perf_counter() - start) / probe, 1e-7)
    return int(min(hi, max(lo, target_s / per_call)))


class Stepper:
    """One call per ``__call__`` for pytest-benchmark; dispatch cases block
    every ``BLOCK_EVERY`` calls (counted in the timing), blocking cases every
    call. ``drain()`` blocks on the last output."""

    def __init__(self, runner: Runner):
        self._fn = runner.fn
        self._args = runner.args
        self._kwargs = runner.kwargs
        self._blocking = runner.case.blocking
        self._count = 0
        self._last = None

    def __call__(self):
        out = self._fn(*self._args, **self._kwargs)
        if self._blocking:
            return jax.block_until_ready(out)
        self._count += 1
        if self._count % BLOCK_EVERY == 0:
            jax.block_until_ready(out)
        self._last = out
        return out

    def drain(self):
        if self._last is not None:
            jax.block_until_ready(self._last)
            self._last = None


def median_measure(runner, calls, rounds):
    cpu, wall = zip(*(measure(runner, calls) for _ in range(rounds)))
    return statistics.median(cpu), statistics.median(wall)

# -- memory -----------------------------------------------------------------------
def current_rss_bytes():
    """Current resident set size (``/proc/self/statm``), or peak RSS from
    ``getrusage`` where /proc is missing (then growth is an upper bound)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_growth(calls=100_000, warmup=5_000, windows=2):
    """Resident-memory growth over ``calls`` cached ``pmapkit.pmap`` calls of
    ``pmap_trivial_1_devices`` (fed its own output, blocking every
    ``BLOCK_EVERY`` calls), after ``warmup`` calls. ``growth_bytes`` is the
    first window; ``window_growth_bytes`` lists ``windows`` consecutive
    windows of ``calls`` calls each, to tell a steady leak (every window
    grows alike) from allocator warm-up (later windows flat)."""
    case = load_cases() and CASES_BY_NAME["pmap_trivial_dispatch_1_devices"]
    fn = pmapkit.pmap(case.fun, devices=devices_for(1))
    x = fn(*case.make_inputs(1))

    def run(n):
        out = x
        for i in range(n):
            out = fn(out)
            if i % BLOCK_EVERY == BLOCK_EVERY - 1:
                out.block_until_ready()
        out.block_until_ready()

    run(warmup)
    gc.collect()
    rss = [current_rss_bytes()]
    start = time.perf_counter()
    for _ in range(windows):
        run(calls)
        gc.collect()
        rss.append(current_rss_bytes())
    elapsed = (time.perf_counter() - start) / windows
    growth = [b - a for a, b in zip(rss, rss[1:])]
    return {
        "case": "pmap_trivial_1_devices", "impl": "pmapkit", "calls": calls,
        "warmup_calls": warmup, "rss_before_bytes": rss[0],
        "rss_after_bytes": rss[1], "growth_bytes": growth[0],
        "growth_bytes_per_call": growth[0] / calls,
        "window_growth_bytes": growth, "seconds_per_window": elapsed,
        "cache_size": fn._cache_size,
    }
