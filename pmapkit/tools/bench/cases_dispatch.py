"""JAX's api_benchmark dispatch cases: ``pmap_trivial``, ``pmap_simple``
(2 and 8 devices, 100 arguments, numpy input), ``pmap_first_call`` and
``pjit_simple`` (1 and 4 devices, 1/10/100 arguments).

``pmap_trivial_8_devices`` blocks on every call, ``pmap_trivial_dispatch_8_devices``
makes N calls and blocks only now and then (every ``BLOCK_EVERY`` calls and at
the end). Steady state: every impl is fed arrays already sharded the way it
wants (its own outputs of a warm-up call), fixed across calls; only the
numpy case feeds the same host array every call. No case body has
collectives. ``jax.jit`` runs the same body on the global arrays with
``NamedSharding(Mesh(devices, ('i',)), P('i'))`` in and out.
"""
from __future__ import annotations

import contextlib
import itertools

import jax
import numpy as np

import pmapkit
from pmapkit.tools.bench import engine
from pmapkit.tools.bench.engine import (FIRST_CALL_IMPLS, PJIT_IMPLS, PMAP_IMPLS, Case,
                                  Runner, Unavailable, pjit_mesh, warm)


# -- bodies (no collectives) ---------------------------------------------------
def add_one(x):
    return x + 1


def simple(a, b):
    return a + b, a - b


def add_one_each(*args):
    return tuple(a + 1 for a in args)


def add_one_tree(xs):
    return [x + 1 for x in xs]


_fresh_bodies = itertools.count(1)


def _fresh_body():
    # A new function object per call: every impl traces, lowers and compiles.
    # Its constant differs per body, so the program does too: pmapkit shares
    # the compile of a program lowered before, whichever function it came
    # from, and this row times a compile.
    k = float(next(_fresh_bodies))

    def first_call_body(x):
        return x * 2 + k
    return first_call_body


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
                       fun=add_one, make_inputs=_trivial_inputs, impls=PMAP_IMPLS,
                       build=_build_pmap)
    for n in (2, 8):
        cases += _both("pmap_simple", f"{n}_devices", family="pmap", ndev=n,
                       fun=simple, make_inputs=_simple_inputs, impls=PMAP_IMPLS,
                       build=_build_pmap)
    cases += _both("pmap_simple", "8_devices_100_args", family="pmap", ndev=8,
                   fun=add_one_each, make_inputs=_hundred_inputs, impls=PMAP_IMPLS,
                   build=_build_pmap)
    cases += _both("pmap_numpy_input", "8_devices", family="pmap", ndev=8,
                   fun=add_one, make_inputs=_numpy_inputs, impls=PMAP_IMPLS,
                   numpy_input=True, build=_build_pmap)
    cases.append(Case("pmap_first_call_8_devices", family="first_call",
                      mode="first_call", ndev=8, fun=_fresh_body,
                      make_inputs=_trivial_inputs, impls=FIRST_CALL_IMPLS,
                      build=_build_first_call))
    for n in (1, 4):
        dev = f"{n}_device"
        for nargs in (1, 10, 100):
            suffix = dev if nargs == 1 else f"{dev}_{nargs}_args"
            cases += _both("pjit_simple", suffix, family="pjit", ndev=n,
                           fun=add_one_tree, make_inputs=_pjit_inputs(nargs),
                           impls=PJIT_IMPLS, requires_pjit=True, build=_build_pjit)
    return tuple(cases)


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


def _build_pmap(case, impl, devices):
    host = case.make_inputs(case.ndev)
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
    warm(runner)
    return runner


def _build_pjit(case, impl, devices):
    host = case.make_inputs(case.ndev)
    from jax.sharding import PartitionSpec
    P = getattr(pmapkit, "PartitionSpec", PartitionSpec)
    context = contextlib.nullcontext
    if impl == "jax.jit":
        fn = _pmap_jit(case.fun, devices, axis="x")
    else:  # pmapkit, raw
        context = pjit_mesh(devices)
        fn = pmapkit.pjit(case.fun, P("x"), P("x"))
    with context():
        args = _feed(case, fn(*host), len(host))
        if impl == "raw":
            fp = _fastpath(fn, args)
            args = _raw_args(case, fp, args)
            fn = _raw_fn(fp, False)
            context = contextlib.nullcontext
    runner = Runner(case, impl, fn, args, context)
    warm(runner)
    return runner


def _build_first_call(case, impl, devices):
    host = case.make_inputs(case.ndev)
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


engine.register_cases(_build_cases())
