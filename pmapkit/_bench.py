"""The dispatch benchmark cases, defined once.

Used by ``python -m pmapkit bench`` (``pmapkit/_bench_cli.py``) and by the
pytest-benchmark suite (``bench/test_dispatch_bench.py``). Case names follow
JAX's ``benchmarks/api_benchmark.py``: ``pmap_trivial_8_devices`` blocks on
every call, ``pmap_trivial_dispatch_8_devices`` makes N calls and blocks only
now and then (every ``BLOCK_EVERY`` calls and at the end).

Implementations ("impls") of every case:

``jax.pmap``  jax's own pmap (a Python wrapper over ``jit(shard_map)`` in 0.10)
``jax.jit``   ``jax.jit`` of the same body on the global arrays, with
              ``NamedSharding(Mesh(devices, ('i',)), P('i'))`` in and out
``pmapkit``   ``pmapkit.pmap``
``raw``       the floor: ``executable.execute_sharded(arrays)
              .consume_with_handlers(handlers)`` + ``out_treedef.unflatten`` on
              pmapkit's own compiled program for the case (from
              ``pmapped._cache_miss``), fed arrays that already carry the
              compiled sharding (host input: the same per-device slicing and
              one ``batched_device_put``, inline)

``pjit_*`` cases (jax.jit, pmapkit, raw) exist only when pmapkit has ``pjit``
(classic signature ``pjit(fun, in_axis_resources, out_axis_resources)``,
called under ``with pmapkit.Mesh(...)``); otherwise they are reported as
unavailable.

Steady state: every impl is fed arrays already sharded the way it wants (its
own outputs of a warm-up call), fixed across calls; only the numpy case feeds
the same host array every call. No case body has collectives: XLA:CPU on a
small host can deadlock with thousands of collective programs in flight.

Nothing here touches jax's device state at import time: devices are looked up
when a runner is built, so callers configure the device count first.
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


# -- bodies (no collectives) ---------------------------------------------------
def add_one(x):
    return x + 1


def simple(a, b):
    return a + b, a - b


def add_one_each(*args):
    return tuple(a + 1 for a in args)


def add_one_tree(xs):
    return [x + 1 for x in xs]


def _fresh_body():
    # A new function object per call: every impl traces, lowers and compiles.
    def first_call_body(x):
        return x * 2 + 1
    return first_call_body


# -- cases ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    family: str           # "pmap" | "pjit" | "first_call"
    mode: str             # "blocking" | "dispatch" | "first_call"
    ndev: int
    fun: Callable
    make_inputs: Callable  # ndev -> tuple of host (numpy) positional args
    impls: tuple
    numpy_input: bool = False
    requires_pjit: bool = False
    # Cases registered by other modules build their own runners:
    # ``build(case, impl, devices) -> Runner`` (may raise Unavailable).
    build: Callable | None = None
    origin: str | None = None  # what a built case varies (input origin, call form)

    @property
    def blocking(self):
        return self.mode != "dispatch"

    @property
    def setup_key(self):
        """Cases with equal keys (a case and its ``_dispatch`` twin) can share
        runners: same function, inputs and devices, another timing loop."""
        if self.build is not None:
            return ("built", self.name)
        return (self.family, self.fun, self.make_inputs, self.ndev,
                self.numpy_input)

    def unavailable_reason(self, impl=None):
        """None if the case (and impl) can run in this process, else why not."""
        if self.requires_pjit and not hasattr(pmapkit, "pjit"):
            return "pmapkit has no pjit"
        if impl is not None and impl not in self.impls:
            return f"{impl} is not an impl of {self.name}"
        return None


def _trivial_inputs(n):
    return (np.arange(n, dtype=np.float32),)


def _simple_inputs(n):
    return (np.arange(4 * n, dtype=np.float32).reshape(n, 4),
            np.ones((n, 4), np.float32))


def _hundred_inputs(n):
    return tuple(np.arange(i, i + n, dtype=np.float32) for i in range(100))


def _numpy_inputs(n):
    return (np.random.default_rng(0).normal(size=(n, 16)).astype(np.float32),)


def _pjit_inputs(nargs):
    def make(n):
        return ([np.arange(n, dtype=np.float32) for _ in range(nargs)],)
    return make


def _both(prefix, suffix, **kw):
    """The blocking case and its ``_dispatch`` twin, JAX's naming."""
    return [Case(f"{prefix}_{suffix}", mode="blocking", **kw),
            Case(f"{prefix}_dispatch_{suffix}", mode="dispatch", **kw)]


def _build_cases():
    cases = []
    for n in (1, 2, 8):
        cases += _both("pmap_trivial", f"{n}_devices", family="pmap", ndev=n,
                       fun=add_one, make_inputs=_trivial_inputs, impls=PMAP_IMPLS)
    for n in (2, 8):
        cases += _both("pmap_simple", f"{n}_devices", family="pmap", ndev=n,
                       fun=simple, make_inputs=_simple_inputs, impls=PMAP_IMPLS)
    cases += _both("pmap_simple", "8_devices_100_args", family="pmap", ndev=8,
                   fun=add_one_each, make_inputs=_hundred_inputs, impls=PMAP_IMPLS)
    cases += _both("pmap_numpy_input", "8_devices", family="pmap", ndev=8,
                   fun=add_one, make_inputs=_numpy_inputs, impls=PMAP_IMPLS,
                   numpy_input=True)
    cases.append(Case("pmap_first_call_8_devices", family="first_call",
                      mode="first_call", ndev=8, fun=_fresh_body,
                      make_inputs=_trivial_inputs, impls=FIRST_CALL_IMPLS))
    for n in (1, 4):
        dev = f"{n}_device"
        for nargs in (1, 10, 100):
            suffix = dev if nargs == 1 else f"{dev}_{nargs}_args"
            cases += _both("pjit_simple", suffix, family="pjit", ndev=n,
                           fun=add_one_tree, make_inputs=_pjit_inputs(nargs),
                           impls=PJIT_IMPLS, requires_pjit=True)
    return tuple(cases)


#: Every case, available here or not (see ``Case.unavailable_reason``): the
#: dispatch cases above, then those of ``CASE_MODULES`` (``load_cases``).
CASES = list(_build_cases())
CASES_BY_NAME = {c.name: c for c in CASES}
#: Modules that register more cases with ``register_cases`` on import.
CASE_MODULES = ("pmapkit._bench_inputs",)


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


def select_cases(substring=None, include_unavailable=False):
    out = []
    for c in load_cases():
        if substring and substring not in c.name:
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


def _devices(n):
    devices = jax.devices()
    if len(devices) < n:
        raise Unavailable(
            f"needs {n} devices, have {len(devices)} (set XLA_FLAGS="
            f"--xla_force_host_platform_device_count={NUM_DEVICES} before jax "
            "starts, or run `python -m pmapkit bench`)")
    return devices[:n]


def _feed(case, out, nargs):
    """The positional args a case's function takes, from its own outputs."""
    if case.family == "pjit" or nargs == 1:
        return (out,)
    return tuple(out)


def _pmap_jit(fun, devices, axis="i"):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    s = NamedSharding(Mesh(np.array(devices), (axis,)), P(axis))
    return jax.jit(fun, in_shardings=s, out_shardings=s)


def _raw_fn(fp, numpy_input):
    """The floor: bare execute + handlers + unflatten on pmapkit's program."""
    execute = fp.executable.execute_sharded
    handlers = list(fp.out_handlers)
    unflatten = fp.out_treedef.unflatten
    if not numpy_input:
        def raw(arrays):
            return unflatten(execute(arrays).consume_with_handlers(handlers))
        return raw
    (spec,) = fp.host_specs
    aval, sharding, indices = spec.aval, spec.sharding, spec.indices
    devices, device_put = list(spec.devices), spec.device_put

    def raw_host(x):
        arr = device_put(aval, sharding, [x[idx] for idx in indices], devices, True)
        return unflatten(execute([arr]).consume_with_handlers(handlers))
    return raw_host


def _raw_args(case, fp, args):
    if case.numpy_input:
        if fp.kept is not None or len(fp.host_specs) != 1:
            raise Unavailable("raw numpy input expects one kept input")
        return args
    flat = jax.tree_util.tree_leaves(args)
    arrays = flat if fp.kept is None else [flat[i] for i in fp.kept]
    for x, s in zip(arrays, fp.in_shardings):
        if x.sharding != s:
            raise RuntimeError(
                f"{case.name} raw: input sharding {x.sharding} is not the "
                f"compiled {s}")
    return (list(arrays),)


def _fastpath(fn, args):
    miss = getattr(fn, "_cache_miss", None)
    if miss is None:
        raise Unavailable(f"{type(fn).__name__} has no _cache_miss")
    fp = miss(*args)[1]
    if fp is None or not hasattr(fp, "executable"):
        raise Unavailable("no fast-path data for this call")
    return fp


def _pjit_mesh(devices):
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
    devices = _devices(case.ndev)
    if case.build is not None:
        return case.build(case, impl, devices)
    host = case.make_inputs(case.ndev)
    if case.family == "first_call":
        return _first_call_runner(case, impl, devices, host)
    if case.family == "pjit":
        return _pjit_runner(case, impl, devices, host)

    if impl == "jax.pmap":
        fn = jax.pmap(case.fun, devices=devices)
    elif impl == "jax.jit":
        fn = _pmap_jit(case.fun, devices)
    else:  # pmapkit, raw
        fn = pmapkit.pmap(case.fun, devices=devices)
    out = fn(*host)
    args = host if case.numpy_input else _feed(case, out, len(host))
    if impl == "raw":
        fp = _fastpath(fn, args)
        args = _raw_args(case, fp, args)
        fn = _raw_fn(fp, case.numpy_input)
    runner = Runner(case, impl, fn, args)
    _warm(runner)
    return runner


def _pjit_runner(case, impl, devices, host):
    from jax.sharding import PartitionSpec
    P = getattr(pmapkit, "PartitionSpec", PartitionSpec)
    context = contextlib.nullcontext
    if impl == "jax.jit":
        fn = _pmap_jit(case.fun, devices, axis="x")
    else:  # pmapkit, raw
        context = _pjit_mesh(devices)
        fn = pmapkit.pjit(case.fun, P("x"), P("x"))
    with context():
        args = _feed(case, fn(*host), len(host))
        if impl == "raw":
            fp = _fastpath(fn, args)
            args = _raw_args(case, fp, args)
            fn = _raw_fn(fp, False)
            context = contextlib.nullcontext
    runner = Runner(case, impl, fn, args, context)
    _warm(runner)
    return runner


def _first_call_runner(case, impl, devices, host):
    make_body = case.fun
    block = jax.block_until_ready
    if impl == "jax.pmap":
        def first_call(x):
            return block(jax.pmap(make_body(), devices=devices)(x))
    elif impl == "jax.jit":
        def first_call(x):
            return block(_pmap_jit(make_body(), devices)(x))
    else:
        def first_call(x):
            return block(pmapkit.pmap(make_body(), devices=devices)(x))
    runner = Runner(case, impl, first_call, host)
    runner.call()  # one-time process warm-up (jax internals), not measured
    return runner


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


def _warm(runner, calls=20):
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
    in chunks of at most ``BLOCK_EVERY``, blocking untimed between chunks.
    """
    fn, args, kwargs = runner.fn, runner.args, runner.kwargs
    block = jax.block_until_ready
    thread_time, perf_counter = time.thread_time, time.perf_counter
    cpu = wall = 0.0
    # Young objects only: a full collection with jax loaded costs ~0.1 s
    # (callers do one per case).
    gc.collect(0)
    with runner.context():
        if runner.case.mode == "dispatch":
            done = 0
            while done < calls:
                k = min(BLOCK_EVERY, calls - done)
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
    case = CASES_BY_NAME["pmap_trivial_dispatch_1_devices"]
    fn = pmapkit.pmap(case.fun, devices=_devices(1))
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
