"""Wrappers built afresh: the cost of code that does not keep its pmap.

``pmap_fresh_wrapper_*``: ``pmap(f, axis_name='i')(x)`` with a new wrapper
of the same ``f`` every call (inline in a loop, inside a helper); the
``jax.jit`` column builds a fresh ``jax.jit(f, in_shardings=..,
out_shardings=..)`` per call. ``pjit_fresh_wrapper_*``: ``pjit(f, P('x'),
P('x'))(x)`` built per call under a mesh, against a fresh ``jax.jit`` with
those shardings. ``grad_of_pmap_built_inside_*``: ``jax.grad`` (outside
jit) of a loss that builds ``pmap(loss, in_axes=(None, 0))`` inside it.

Every call blocks on its result (mode "blocking"); inputs are each impl's
own output of a warm-up call, so only the wrapper's cost differs.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.tools.bench import engine as bench

FRESH_IMPLS = ("jax.pmap", "jax.jit", "pmapkit")
FRESH_PJIT_IMPLS = ("jax.jit", "pmapkit")
GRAD_IMPLS = ("jax.pmap", "pmapkit")


def scale_shift(x):
    return x * 2.0 + 1.0


def _host(n):
    return (np.arange(n * 16, dtype=np.float32).reshape(n, 16),)


def _pmap_fresh(case, impl, devices):
    (host,) = case.make_inputs(case.ndev)
    fun = case.fun
    if impl == "jax.jit":
        s = NamedSharding(Mesh(np.array(devices), ("i",)), P("i"))

        def call(x):
            return jax.jit(fun, in_shardings=s, out_shardings=s)(x)
    else:
        pm = jax.pmap if impl == "jax.pmap" else pmapkit.pmap

        def call(x):
            return pm(fun, axis_name="i", devices=devices)(x)
    runner = bench.Runner(case, impl, call, (call(host),))
    bench.warm(runner)
    return runner


def _pjit_fresh(case, impl, devices):
    (host,) = case.make_inputs(case.ndev)
    fun = case.fun
    context = bench.pjit_mesh(devices)
    if impl == "jax.jit":
        s = NamedSharding(Mesh(np.array(devices), ("x",)), P("x"))
        context = bench.contextlib.nullcontext

        def call(x):
            return jax.jit(fun, in_shardings=s, out_shardings=s)(x)
    else:
        def call(x):
            return pmapkit.pjit(fun, in_axis_resources=P("x"),
                                out_axis_resources=P("x"))(x)
    with context():
        x = call(host)
    runner = bench.Runner(case, impl, call, (x,), context)
    bench.warm(runner)
    return runner


def per_device_loss(w, b):
    return jax.numpy.sum(jax.numpy.tanh(b @ w) ** 2)


def _grad_inputs(n):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(16, 4)).astype(np.float32),
            rng.normal(size=(n, 8, 16)).astype(np.float32))


def _grad_inside(case, impl, devices):
    w, b = case.make_inputs(case.ndev)
    pm = jax.pmap if impl == "jax.pmap" else pmapkit.pmap
    fun = case.fun

    def total(w, b):
        # The pmap is built inside the differentiated function, every call.
        return pm(fun, in_axes=(None, 0), devices=devices)(w, b).sum()

    grad = jax.grad(total)
    sharding = NamedSharding(Mesh(np.array(devices), ("i",)), P("i"))
    args = (jax.numpy.asarray(w), jax.device_put(b, sharding))
    runner = bench.Runner(case, impl, grad, args)
    bench.warm(runner)
    return runner


def _cases():
    cases = []
    for n in (1, 8):
        suffix = "1_device" if n == 1 else f"{n}_devices"
        cases.append(bench.Case(
            f"pmap_fresh_wrapper_{suffix}", family="pmap_fresh", mode="blocking",
            ndev=n, fun=scale_shift, make_inputs=_host, impls=FRESH_IMPLS,
            build=_pmap_fresh))
        cases.append(bench.Case(
            f"pjit_fresh_wrapper_{suffix}", family="pjit_fresh", mode="blocking",
            ndev=n, fun=scale_shift, make_inputs=_host, impls=FRESH_PJIT_IMPLS,
            requires_pjit=True, build=_pjit_fresh))
        cases.append(bench.Case(
            f"grad_of_pmap_built_inside_{suffix}", family="grad_inside",
            mode="blocking", ndev=n, fun=per_device_loss, make_inputs=_grad_inputs,
            impls=GRAD_IMPLS, build=_grad_inside))
    return cases


bench.register_cases(_cases())
