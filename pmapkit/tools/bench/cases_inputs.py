"""Benchmark cases that feed what real programs feed.

The dispatch cases (``cases_dispatch``) feed every impl its own outputs.
A training loop feeds more: batches placed by ``jax.device_put`` on a mesh of
flax's (``replicate`` / ``prefetch_to_device``), ``jax.pmap``'s outputs,
``jit`` outputs, host arrays, arrays of the classic placement helpers; pjit
is called with keywords, with its specs omitted, with static keywords, and
ahead of time through ``lower().compile()``. These cases measure those, each
impl fed the same thing:

``pmap_input_<origin>_{1,8}_devices``
    ``f = pmap(lambda a: a + 1, axis_name='i')`` fed an array of ``origin``
    (pmapkit pmap outputs with the same / another axis name, jax.pmap
    outputs, ``device_put`` on a ``NamedSharding``, a ``jit`` output,
    ``SingleDeviceSharding`` (one device), numpy (16 floats a device; 4 MiB
    a device: ``numpy_4mib``), ``device_put_replicated``).
    jax.jit: ``jax.jit(f)`` fed the same array (it keeps its sharding).
``pmap_input_{single_device,committed_other_device,numpy_blocking}_8_devices``
    inputs that must move into an 8-device pmap, each call blocking (wall):
    an uncommitted array on device 0 (``jnp.asarray``), one committed to
    device 3 (``jax.device_put(x, devices[3])``), numpy. jax.pmap refuses a
    committed array on another device: its column is fed the device-0 array
    there (the same bytes from device 0), as is jax.jit's (which refuses it
    too, with in_shardings); raw is the floor: the program run on inputs
    already placed (no move). The table says so under these rows
    (``MOVED_NOTES``).
``pjit_<form>_{1,4}_device``
    pjit under ``with mesh:`` called with explicit specs, omitted specs,
    keyword arguments, ``static_argnames``, and compiled ahead (``lower().compile()``);
    jax.jit is the equivalent jit (same shardings, same call form).
``pmap_aot_{1,8}_devices``, ``pmap_out_axes_none_dispatch_{1,8}_devices``
    a pmap's ``lower().compile()`` called; ``out_axes=None``.
``pmap_scalar_arg_{1,8}_devices``
    ``pmap(lambda a, n: a * n, in_axes=(0, None))`` fed a placed array and a
    Python float each call (a learning rate): jax.jit is ``jax.jit`` of the
    same function fed the same; raw puts the float by the program's host
    spec, then runs it.
``pmap_train_loop_{1,8}_devices``
    a tiny MLP step (``value_and_grad``, ``pmean`` of the gradients) on state
    placed by ``device_put`` on a NamedSharding, each batch prefetched by
    ``device_put``: caller CPU of each step's call, the loss waited for
    (untimed) after it. XLA:CPU may run such a small program on the caller's
    thread, so its execution can count in the caller's CPU too.
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pmapkit
from pmapkit.tools.bench import engine as bench

FLAX_AXIS = "_device_put_sharded"  # flax's replicate/prefetch mesh axis name
ORIGINS = ("pmapkit_same_axis", "pmapkit_other_axis", "jax_pmap",
           "device_put_named", "jit_output", "single_device", "numpy",
           "device_put_replicated")
# Inputs that must move into an 8-device pmap (blocking cases).
MOVED_ORIGINS = ("single_device", "committed_other_device", "numpy_blocking")
PJIT_FORMS = ("explicit", "omitted_specs", "kwargs", "static_argnames", "aot")
TRAIN_IMPLS = ("jax.pmap", "pmapkit", "raw")


def add_one(a):
    return a + 1


def add(a, b):
    return a + b


def scaled(a, n):
    return a * n


def _host(n):
    return np.arange(n * 16, dtype=np.float32).reshape(n, 16)


def _origin_input(origin, devices):
    """An input of shape (n, 16) made the way ``origin`` makes it."""
    n = len(devices)
    host = _host(n)
    identity = lambda a: a  # noqa: E731
    if origin == "pmapkit_same_axis":
        return pmapkit.pmap(identity, axis_name="i", devices=devices)(host)
    if origin == "pmapkit_other_axis":
        return pmapkit.pmap(identity, axis_name="j", devices=devices)(host)
    if origin == "jax_pmap":
        return jax.pmap(identity, axis_name="j", devices=devices)(host)
    if origin == "device_put_named":
        mesh = Mesh(np.array(devices), (FLAX_AXIS,))
        return jax.device_put(host, NamedSharding(mesh, P(FLAX_AXIS)))
    if origin == "jit_output":
        s = NamedSharding(Mesh(np.array(devices), ("x",)), P("x"))
        return jax.jit(identity, out_shardings=s)(host)
    if origin == "single_device":
        if n != 1:
            return jnp.asarray(host)  # uncommitted, on the default device
        return jax.device_put(host, devices[0])
    if origin == "committed_other_device":
        return jax.device_put(host, devices[min(3, n - 1)])
    if origin in ("numpy", "numpy_blocking"):
        return host
    if origin == "numpy_4mib":
        # A batch as data loaders feed it: 4 MiB per device.
        return np.ones((n, 1 << 20), np.float32)
    if origin == "device_put_replicated":
        return pmapkit.device_put_replicated(host[0], devices)
    raise ValueError(f"unknown input origin {origin!r}")


def _pmap_sharding(devices, axis="i"):
    return NamedSharding(Mesh(np.array(devices), (axis,)), P(axis))


def _raw(fp, arrays):
    """The floor: bare execute + handlers + unflatten on pmapkit's program,
    fed the very arrays (equivalent layouts need no re-view)."""
    execute = fp.executable.execute_sharded
    handlers = list(fp.out_handlers)
    unflatten = fp.out_treedef.unflatten

    def raw(arrays):
        return unflatten(execute(arrays).consume_with_handlers(handlers))
    return raw, (list(arrays),)


def _fastpath(fn, args, kwargs=None):
    fp = fn._cache_miss(*args, **(kwargs or {}))[1]
    if fp is None:
        raise bench.Unavailable("no fast-path data for this call")
    return fp


def _kept(fp, flat):
    return flat if fp.kept is None else [flat[i] for i in fp.kept]


def _raw_runner(case, fn, args, kwargs=None, context=contextlib.nullcontext):
    with context():
        fp = _fastpath(fn, args, kwargs)
    # The program's inputs: the dynamic leaves (static keywords are not).
    static = getattr(fn, "_static_names", frozenset())
    dynamic = {k: v for k, v in (kwargs or {}).items() if k not in static}
    flat = jax.tree_util.tree_leaves((args, dynamic))
    if any(isinstance(x, np.ndarray) for x in flat):
        (spec,) = fp.host_specs
        raw, _ = _raw(fp, [])

        def raw_host(x):
            return raw([spec.put(x)])
        return raw_host, args
    return _raw(fp, _kept(fp, flat))


def _pmap_runner(case, impl, fn, x):
    """The warmed-up runner of ``fn(x)`` (raw: pmapkit's program bare)."""
    args = (x,)
    if impl == "raw":
        fn, args = _raw_runner(case, fn, args)
    runner = bench.Runner(case, impl, fn, args)
    bench.warm(runner)
    return runner


# -- pmap fed inputs of every origin ---------------------------------------------
def _build_input(case, impl, devices):
    x = _origin_input(case.origin, devices)
    if impl == "jax.pmap":
        fn = jax.pmap(add_one, axis_name="i", devices=devices)
    elif impl == "jax.jit":
        if isinstance(x, np.ndarray):
            s = _pmap_sharding(devices)
            fn = jax.jit(add_one, in_shardings=s, out_shardings=s)
        else:
            fn = jax.jit(add_one)  # keeps the input's (equivalent) sharding
    else:
        fn = pmapkit.pmap(add_one, axis_name="i", devices=devices)
    return _pmap_runner(case, impl, fn, x)


def _add_one_over(impl, devices):
    """``add_one`` over ``devices`` as each impl runs it (jax.jit: with the
    pmap's sharding in and out)."""
    if impl == "jax.pmap":
        return jax.pmap(add_one, axis_name="i", devices=devices)
    if impl == "jax.jit":
        s = _pmap_sharding(devices)
        return jax.jit(add_one, in_shardings=s, out_shardings=s)
    return pmapkit.pmap(add_one, axis_name="i", devices=devices)


_RAW_PLACED = ("raw (the floor) is fed the same values already placed on the 8 "
               "devices: no move")
# What the table says of each moved-input case's columns (engine.Case.note).
MOVED_NOTES = {
    "single_device": _RAW_PLACED,
    "committed_other_device": (
        "jax.pmap and jax.jit refuse an array committed to device 3, so they are "
        "fed the same values uncommitted on device 0 (as in "
        "pmap_input_single_device_8_devices); " + _RAW_PLACED),
    "numpy_blocking": _RAW_PLACED,
}


def _build_moved_input(case, impl, devices):
    """An input that must move; ``MOVED_NOTES`` says what each column is fed."""
    origin = case.origin
    if origin == "committed_other_device" and impl in ("jax.pmap", "jax.jit"):
        origin = "single_device"
    x = _origin_input(origin, devices)
    if impl == "raw":
        x = jax.device_put(_host(len(devices)), _pmap_sharding(devices))
    fn = _add_one_over(impl, devices)
    return _pmap_runner(case, impl, fn, x)


def _out_axes_none(case, impl, devices):
    x = _origin_input("device_put_named", devices)
    pm = jax.pmap if impl == "jax.pmap" else pmapkit.pmap
    fn = pm(add_one, axis_name="i", out_axes=None, devices=devices)
    return _pmap_runner(case, impl, fn, x)


def _pmap_aot(case, impl, devices):
    x = _origin_input("device_put_replicated", devices)
    fn = _add_one_over(impl, devices)
    compiled = fn.lower(x).compile()
    x = compiled(x)  # its own output: the steady state
    args = (x,)
    if impl == "raw":
        fn, args = _raw_runner(case, fn, args)
        runner = bench.Runner(case, impl, fn, args)
    else:
        runner = bench.Runner(case, impl, compiled, args)
    bench.warm(runner)
    return runner


def _scalar_arg(case, impl, devices):
    x = _origin_input("device_put_named", devices)
    if impl == "jax.pmap":
        fn = jax.pmap(scaled, axis_name="i", in_axes=(0, None), devices=devices)
    elif impl == "jax.jit":
        fn = jax.jit(scaled)  # the array keeps its sharding; the float is replicated
    else:
        fn = pmapkit.pmap(scaled, axis_name="i", in_axes=(0, None), devices=devices)
    args = (x, 0.5)
    if impl == "raw":
        fp = _fastpath(fn, args)
        raw, _ = _raw(fp, [])
        spec = fp.host_specs[1]

        def raw_scalar(a, n):
            return raw([a, spec.put(np.asarray(n, spec.dtype))])
        fn = raw_scalar
    runner = bench.Runner(case, impl, fn, args)
    bench.warm(runner)
    return runner


def _numpy_beside_array(case, impl, devices):
    """A device array and a numpy input, 1 device (pmapkit: the express
    call takes it, the numpy input copied at each call: read at the call,
    where JAX's calls may read an aligned array later)."""
    x = _origin_input("device_put_named", devices)
    batch = _host(len(devices))
    if impl == "jax.pmap":
        fn = jax.pmap(add, axis_name="i", devices=devices)
    elif impl == "jax.jit":
        fn = jax.jit(add)  # the array keeps its sharding; the numpy follows it
    else:
        fn = pmapkit.pmap(add, axis_name="i", devices=devices)
    runner = bench.Runner(case, impl, fn, (x, batch))
    bench.warm(runner)
    return runner


# -- pjit's call forms -----------------------------------------------------------
def _pjit_setup(form, impl, devices):
    """``(fn, args, kwargs)`` for one call form; ``fn`` is the pjit'd (or
    jitted) function, called as ``fn(*args, **kwargs)``."""
    mesh = pmapkit.Mesh(np.array(devices), ("x",))
    s = NamedSharding(mesh, P("x"))
    a = jax.device_put(np.arange(len(devices) * 32, dtype=np.float32)
                       .reshape(len(devices) * 2, 16), s)
    jit = impl == "jax.jit"
    if form in ("explicit", "aot"):
        fn = (jax.jit(add_one, in_shardings=s, out_shardings=s) if jit
              else pmapkit.pjit(add_one, P("x"), P("x")))
        return fn, (a,), {}
    if form == "omitted_specs":
        return (jax.jit(add_one) if jit else pmapkit.pjit(add_one)), (a,), {}
    if form == "kwargs":
        b = jax.device_put(np.ones(a.shape, np.float32), s)
        return (jax.jit(add) if jit else pmapkit.pjit(add)), (a,), {"b": b}
    if form == "static_argnames":
        fn = (jax.jit(scaled, static_argnames="n") if jit
              else pmapkit.pjit(scaled, static_argnames="n"))
        return fn, (a,), {"n": 2}
    raise ValueError(f"unknown pjit call form {form!r}")


def _build_pjit_form(case, impl, devices):
    fn, args, kwargs = _pjit_setup(case.origin, impl, devices)
    context = contextlib.nullcontext if impl == "jax.jit" else bench.pjit_mesh(devices)
    with context():
        if case.origin == "aot":
            fn = fn.lower(*args).compile()
        out = fn(*args, **kwargs)
        args = (out,) + args[1:]  # fed its own output: the steady state
    if impl == "raw":
        pjitted, _, _ = _pjit_setup(case.origin, "pmapkit", devices)
        fn, args = _raw_runner(case, pjitted, args, kwargs, context)
        kwargs, context = {}, contextlib.nullcontext
    runner = bench.Runner(case, impl, fn, args, context, kwargs)
    bench.warm(runner)
    return runner


# -- a training loop -------------------------------------------------------------
def _mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def _train_step(params, x, y):
    loss, grads = jax.value_and_grad(_mlp_loss)(params, x, y)
    grads = jax.lax.pmean(grads, "batch")
    params = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)
    return params, jax.lax.pmean(loss, "batch")


def _build_train_loop(case, impl, devices, prefetched=4):
    n = len(devices)
    sharding = NamedSharding(Mesh(np.array(devices), (FLAX_AXIS,)), P(FLAX_AXIS))
    rng = np.random.default_rng(0)
    shapes = {"w1": (16, 32), "b1": (32,), "w2": (32, 4), "b2": (4,)}
    # flax.jax_utils.replicate: every device a copy, placed on flax's mesh.
    params = {k: jax.device_put(np.broadcast_to(
                  rng.normal(size=v).astype(np.float32) * 0.1, (n, *v)), sharding)
              for k, v in shapes.items()}
    # prefetch_to_device: batches placed ahead of the step that consumes them.
    batches = [(jax.device_put(rng.normal(size=(n, 8, 16)).astype(np.float32), sharding),
                jax.device_put(rng.normal(size=(n, 8, 4)).astype(np.float32), sharding))
               for _ in range(prefetched)]
    pm = jax.pmap if impl == "jax.pmap" else pmapkit.pmap
    step = pm(_train_step, axis_name="batch", devices=devices)
    if impl == "raw":
        step = _raw_step(step, params, batches[0])
    state = {"params": params, "i": 0}

    def train_one_step():
        i = state["i"]
        state["i"] = i + 1
        x, y = batches[i % prefetched]
        state["params"], loss = step(state["params"], x, y)
        return loss

    runner = bench.Runner(case, impl, train_one_step, ())
    bench.warm(runner)
    return runner


def _raw_step(pmapped, params, batch):
    """The floor of a step: bare execute of pmapkit's program on the flat
    arguments (arrays already laid out as it takes them), then the outputs'
    pytree."""
    fp = _fastpath(pmapped, (params, *batch))
    execute = fp.executable.execute_sharded
    handlers = list(fp.out_handlers)
    unflatten = fp.out_treedef.unflatten
    flatten = jax.tree_util.tree_leaves
    kept = fp.kept

    def raw(params, x, y):
        flat = flatten((params, x, y))
        arrays = flat if kept is None else [flat[i] for i in kept]
        return unflatten(execute(arrays).consume_with_handlers(handlers))
    return raw


def _cases():
    cases = []
    for n in (1, 8):
        for origin in ORIGINS:
            if origin == "single_device" and n != 1:
                continue
            cases.append(bench.Case(
                f"pmap_input_{origin}_{n}_devices", family="pmap_input",
                mode="dispatch", ndev=n, fun=add_one, make_inputs=_host,
                impls=bench.PMAP_IMPLS, numpy_input=origin == "numpy",
                build=_build_input, origin=origin))
        cases.append(bench.Case(
            f"pmap_input_numpy_4mib_{n}_devices", family="pmap_input",
            mode="dispatch", ndev=n, fun=add_one, make_inputs=_host,
            impls=bench.PMAP_IMPLS, numpy_input=True,
            build=_build_input, origin="numpy_4mib"))
    for origin in MOVED_ORIGINS:
        cases.append(bench.Case(
            f"pmap_input_{origin}_8_devices", family="pmap_input_moved",
            mode="blocking", ndev=8, fun=add_one, make_inputs=_host,
            impls=bench.PMAP_IMPLS, numpy_input=origin == "numpy_blocking",
            build=_build_moved_input, origin=origin, note=MOVED_NOTES[origin]))
    for n in (1, 8):
        cases.append(bench.Case(
            f"pmap_aot_{n}_devices", family="pmap_aot", mode="dispatch", ndev=n,
            fun=add_one, make_inputs=_host, impls=bench.PMAP_IMPLS, build=_pmap_aot))
        cases.append(bench.Case(
            f"pmap_out_axes_none_dispatch_{n}_devices", family="pmap_out_axes_none",
            mode="dispatch", ndev=n, fun=add_one, make_inputs=_host,
            impls=("jax.pmap", "pmapkit", "raw"), build=_out_axes_none))
        cases.append(bench.Case(
            f"pmap_scalar_arg_{n}_devices", family="pmap_scalar_arg",
            mode="dispatch", ndev=n, fun=scaled, make_inputs=_host,
            impls=bench.PMAP_IMPLS, build=_scalar_arg))
    # The express call runs on the host route, one device only.
    cases.append(bench.Case(
        "pmap_numpy_beside_array_1_devices", family="pmap_numpy_beside_array",
        mode="dispatch", ndev=1, fun=add, make_inputs=_host,
        impls=("jax.pmap", "jax.jit", "pmapkit"), numpy_input=True,
        build=_numpy_beside_array))
    for n in (1, 4):
        for form in PJIT_FORMS:
            cases.append(bench.Case(
                f"pjit_{form}_{n}_device", family="pjit_form", mode="dispatch",
                ndev=n, fun=add_one, make_inputs=_host, impls=bench.PJIT_IMPLS,
                requires_pjit=True, build=_build_pjit_form, origin=form))
    for n in (1, 8):
        cases.append(bench.Case(
            f"pmap_train_loop_{n}_devices", family="train_loop", mode="step",
            ndev=n, fun=_train_step, make_inputs=_host, impls=TRAIN_IMPLS,
            build=_build_train_loop))
    return cases


bench.register_cases(_cases())
