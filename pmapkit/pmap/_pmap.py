"""``pmapkit.pmap``: the classic ``jax.pmap`` on pmapkit's compiled dispatch core.

The user-facing wrapper validates options once, at decoration, and builds a
``DispatchFunction`` whose Python ``cache_miss`` (here) validates the call,
traces the per-device body, and then either binds ``pmap_p`` (under a JAX
trace) or compiles and runs it, handing the fast-path data back to the core.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from pmapkit import _jax_private as jp
from pmapkit.core.keys import _cache_keys
from pmapkit.core.misses import calls
from pmapkit.core.programs import compiling
from pmapkit.core.lowering import kinds
from pmapkit.core.sharding import specs
from pmapkit.core.aot import stages
from pmapkit.core.sharding.axis_names import check_axis_name
from pmapkit.core.keys import wrapper_cache
from pmapkit.core.hitpath._compiled import dispatch as _dispatch_mod
from pmapkit.core.lowering.nested_pmaps import nested_pmap_axes
from pmapkit.core.rules.primitives import (in_pmap_body, per_device_context, plain_avals,
                                 pmap_bodies, pmap_p, remove_axis)

if TYPE_CHECKING:  # annotations only; they are never evaluated
    from jaxlib import xla_client as xc

AxisName = Hashable

INTERNAL_AXIS_NAME = specs.INTERNAL_AXIS_NAME

def pmap(
    fun: Callable,
    axis_name: AxisName | None = None,
    *,
    in_axes: int | None | Sequence[Any] = 0,
    out_axes: Any = 0,
    static_broadcasted_argnums: int | Iterable[int] = (),
    devices: Sequence[xc.Device] | None = None,  # noqa: F811
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Iterable[int] = (),
  ) -> Any:
    """Map ``fun`` over a leading array axis, one program instance per device.

    The classic ``jax.pmap``: same arguments, same semantics, with a compiled
    per-call fast path. ``fun`` runs once per device on its slice of the
    mapped arguments (``in_axes``; keyword arguments are always mapped over
    axis 0) and may use collectives (``jax.lax.psum`` ...) over ``axis_name``.
    Results carry the mapped axis at ``out_axes`` and are arrays (``jax.Array``)
    sharded over the devices. ``static_broadcasted_argnums`` are compile-time
    constants (hashable) given to every device; ``devices`` picks and orders
    the devices; ``donate_argnums`` lets the program reuse input buffers.
    """
    # Wrappers of one function with equal parameters share the validated
    # options, the traced bodies and the compiled entries: a fresh wrapper's
    # first call is a cached call (see pmapkit.core.keys.wrapper_cache).
    key = _cache_keys.params_key(axis_name, in_axes, out_axes,
                                   static_broadcasted_argnums, devices, backend,
                                   axis_size, donate_argnums)
    spec, shared = wrapper_cache.spec_and_caches(
        fun, key, _PmapSpec, fun, axis_name, in_axes, out_axes,
        static_broadcasted_argnums, devices, backend, axis_size, donate_argnums)
    return _make_dispatch(spec, shared)


class _PmapSpec:
    """The validated decoration-time options of one pmapped function."""

    def __init__(self, fun, axis_name, in_axes, out_axes,
                 static_broadcasted_argnums, devices, backend, axis_size,
                 donate_argnums):
        if not callable(fun):
            raise TypeError(f"pmap requires a callable 'fun', got {fun!r} of "
                            f"type {type(fun).__name__}.")
        if devices is not None:
            # An empty list is refused at the call (``_prepare``), as the
            # classic pmap did: building the wrapper succeeds.
            devices = _check_devices(devices)
            if len(set(devices)) != len(devices):
                raise ValueError(
                    "'devices' argument to pmap must not list a device more "
                    f"than once, got {list(devices)}.")
        if axis_size is not None and (type(axis_size) is not int or axis_size < 1):
            raise TypeError(
                f"pmap axis_size must be a positive int or None, got {axis_size!r}.")
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)  # a list prefix means the same as a tuple
        specs.check_axes_leaves(in_axes, "in_axes")
        specs.check_axes_leaves(out_axes, "out_axes")
        self.fun = fun
        self.user_axis_name = axis_name
        # Any hashable names the axis, as in classic pmap: bodies are traced
        # with it; the mesh gets a str for it (core.sharding.axis_names).
        check_axis_name(axis_name)
        self.axis_name = INTERNAL_AXIS_NAME if axis_name is None else axis_name
        if self.axis_name == "":
            raise ValueError("pmap axis_name must be a non-empty str (or any "
                             "other hashable, or None for an unnamed axis), "
                             "got ''.")
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"pmap backend must be a platform name such as 'cpu' "
                            f"or None, got {backend!r} of type {type(backend).__name__}.")
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.static = calls.argnum_tuple(fun, static_broadcasted_argnums,
                                         "static_broadcasted_argnums", "pmap")
        donate = calls.argnum_tuple(fun, donate_argnums, "donate_argnums", "pmap")
        overlap = set(donate) & set(self.static)
        if overlap:
            raise ValueError(
                "pmap donate_argnums and static_broadcasted_argnums must not "
                f"overlap, but both contain {sorted(overlap)}.")
        self.donate = donate
        self.devices = devices
        self.backend = backend
        self.axis_size = axis_size
        self.name = getattr(fun, "__name__", None) or type(fun).__name__
        self.trace_cache = calls.TraceCache()
        try:
            self.signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self.signature = None

    def pickle_state(self):
        return {
            "version": _dispatch_mod.PICKLE_VERSION,
            "fun": self.fun,
            "axis_name": self.user_axis_name,
            "in_axes": self.in_axes,
            "out_axes": self.out_axes,
            "static_broadcasted_argnums": self.static,
            "devices": None if self.devices is None else
                       [(d.platform, d.id) for d in self.devices],
            "backend": self.backend,
            "axis_size": self.axis_size,
            "donate_argnums": self.donate,
        }


def _check_devices(devices):
    """``devices`` as a tuple of ``jax.Device``, or a TypeError saying what
    was passed instead (ids, strings and the like are not devices)."""
    if isinstance(devices, jax.Device):
        raise TypeError(
            "pmap 'devices' must be a sequence of jax.Device objects (such as "
            f"jax.devices()[:2]), got a single device {devices!r}; pass "
            f"[{devices!r}] to run on it alone.")
    try:
        devices = tuple(devices)
    except TypeError:
        raise TypeError(
            "pmap 'devices' must be a sequence of jax.Device objects (such as "
            f"jax.devices()[:2]), got {devices!r} of type "
            f"{type(devices).__name__}.") from None
    for k, d in enumerate(devices):
        if not isinstance(d, jax.Device):
            raise TypeError(
                "pmap 'devices' must be a sequence of jax.Device objects (such "
                f"as jax.devices()[:2]), got {list(devices)!r}: element {k} is "
                f"{d!r} of type {type(d).__name__}.")
    return devices


# -- per call (miss path) ------------------------------------------------------
def _prepare(spec, args, kwargs):
    """Validate one call and trace the per-device body (once per miss)."""
    if spec.devices is not None and not spec.devices:
        raise ValueError("'devices' argument to pmap must be non-empty, or None.")
    nargs = len(args)
    if spec.static and spec.static[-1] >= nargs:
        raise ValueError(
            f"pmapped function has static_broadcasted_argnums={spec.static} "
            f"but was called with only {nargs} positional "
            f"argument{'s' if nargs != 1 else ''}. All static broadcasted "
            "arguments must be passed positionally.")
    statics, dyn_positions, dyn_args = calls.split_static(spec.static, args, spec.name)
    flat, in_tree = jax.tree_util.tree_flatten((dyn_args, kwargs))
    describe = calls.LeafNames(spec.signature, dyn_positions, dyn_args, kwargs)

    in_axes = spec.in_axes
    if spec.static and isinstance(in_axes, tuple) and len(in_axes) == nargs:
        in_axes = tuple(in_axes[i] for i in dyn_positions)
    in_axes_flat = specs.flatten_in_axes(in_axes, dyn_args, kwargs, in_tree)

    in_avals = calls.abstractify(flat, describe, "pmap", "static_broadcasted_argnums")

    axes = []
    for k, (aval, ax) in enumerate(zip(in_avals, in_axes_flat)):
        if ax is not None:
            ndim = len(aval.shape)
            norm = specs.normalize_axis(ax, ndim)
            if not 0 <= norm < ndim:
                raise ValueError(
                    f"pmap was requested to map its {describe(k)} along axis "
                    f"{ax}, which implies that its rank should be at least "
                    f"{(ax + 1) if ax >= 0 else -ax}, but is only {ndim} "
                    f"(its shape is {aval.shape}).")
            ax = norm
        axes.append(ax)
    in_axes_flat = tuple(axes)
    size = _mapped_size(in_avals, in_axes_flat, describe)
    if (spec.axis_size is not None and spec.axis_size != size
            and jp.process_count(spec.backend) == 1):
        raise ValueError(f"Specified axis_size {spec.axis_size} doesn't match "
                         f"received axis_size {size}.")
    if in_pmap_body() and spec.devices is not None:
        raise ValueError(
            "Nested pmap with explicit devices argument. pmapkit: nested pmaps "
            "with 'devices' specified are not supported (as in classic pmap); "
            "give devices to the outermost pmap only.")

    if spec.donate and not jp.debug_nans.value:
        donated_positions = set(spec.donate)
        donated = []
        for pos, arg in zip(dyn_positions, dyn_args):
            n_leaves = len(jax.tree_util.tree_leaves(arg))
            donated += [pos in donated_positions] * n_leaves
        donated += [False] * (len(flat) - len(donated))
    else:
        donated = [False] * len(flat)

    global_size = size
    across = not in_pmap_body() and _across_processes(spec, flat)
    if across:
        # Each process passes its local slice; the program spans every
        # process's devices and its mapped axis is the global one.
        global_size = _global_axis_size(spec, size)
    local_avals = [a if ax is None else remove_axis(a, ax)
                   for a, ax in zip(in_avals, in_axes_flat)]
    axis_name = _call_axis_name(spec)
    jaxpr, consts, out_tree = _trace_body(spec, axis_name, statics, nargs,
                                          dyn_positions, in_tree, local_avals,
                                          global_size, describe)
    out_axes_flat = _out_axes_flat(spec, out_tree, jaxpr)
    if in_pmap_body():
        devices = None  # lowered on the mesh of the enclosing pmap
    else:
        inner = nested_pmap_axes(jaxpr, pmap_p)
        if across:
            devices = _global_devices(spec, size, global_size, inner)
            in_avals = [a if ax is None else
                        a.update(shape=a.shape[:ax] + (global_size,) + a.shape[ax + 1:])
                        for a, ax in zip(in_avals, in_axes_flat)]
        else:
            devices = _resolve_devices(spec, size, inner)
    size = global_size
    with per_device_context(spec.axis_name, size):  # checks retype the body
        jaxpr, hoisted = calls.close_jaxpr(jaxpr, consts)
    if hoisted:
        flat = hoisted + list(flat)
        in_avals = [jp.get_aval(c) for c in hoisted] + in_avals
        in_axes_flat = (None,) * len(hoisted) + in_axes_flat
        donated = [False] * len(hoisted) + donated

    prepared = calls.Prepared()
    prepared.flat_args = flat
    prepared.in_avals = tuple(in_avals)
    prepared.out_tree = out_tree
    prepared.params = dict(
        jaxpr=jaxpr, axis_name=axis_name, axis_size=size,
        devices=devices, in_axes=in_axes_flat, out_axes=out_axes_flat,
        donated_invars=tuple(donated), name=spec.name)
    return prepared


def _call_axis_name(spec):
    """The axis name of this call's equation. An unnamed pmap nested in
    another needs a name of its own: each level is a mesh axis."""
    if spec.user_axis_name is not None or not in_pmap_body():
        return spec.axis_name
    return f"{INTERNAL_AXIS_NAME}_{len(pmap_bodies.axes)}"


def _trace_body(spec, axis_name, statics, nargs, dyn_positions, in_tree,
                local_avals, size, describe):
    pmap_bodies.axes.append((axis_name, size))
    try:
        with per_device_context(axis_name, size):
            jaxpr, consts, out_tree = calls.trace_user_fun(
                "pmap", spec.fun, spec.static, statics, nargs, in_tree,
                plain_avals(local_avals), describe)
    finally:
        pmap_bodies.axes.pop()
    # The pmap binds its axis name: collectives over it are not effects of ours.
    jaxpr = jp.remove_named_axis_effects(jaxpr, {axis_name})
    return jaxpr, consts, out_tree


def _out_axes_flat(spec, out_tree, jaxpr):
    out_shape_tree = jax.tree_util.tree_unflatten(
        out_tree, [object()] * out_tree.num_leaves)
    flat = specs.flatten_out_axes(spec.out_axes, out_tree, out_shape_tree)
    axes = []
    for k, (ax, v) in enumerate(zip(flat, jaxpr.outvars)):
        if ax is not None:
            ndim = len(v.aval.shape)
            norm = ax + ndim + 1 if ax < 0 else ax
            if not 0 <= norm <= ndim:
                raise ValueError(
                    f"pmap out_axes={ax} is out of range for output {k} of "
                    f"{spec.name}, a per-device value of rank {ndim} (out_axes "
                    f"must be in [-{ndim + 1}, {ndim}]).")
            ax = norm
        axes.append(ax)
    return tuple(axes)


class EmptyMappedAxisError(ValueError, ZeroDivisionError):
    """A pmap over a mapped axis of size 0. A ValueError naming the argument,
    and the ZeroDivisionError classic pmap raised there (its C++ dispatch
    divided by the axis size), which classic code and tests catch."""


def _mapped_size(in_avals, in_axes_flat, describe):
    sizes = {}
    for k, (aval, ax) in enumerate(zip(in_avals, in_axes_flat)):
        if ax is not None:
            sizes.setdefault(aval.shape[ax], []).append(k)
    if not sizes:
        raise ValueError("pmap requires at least one argument with a mapped axis.")
    if len(sizes) > 1:
        lines = []
        for size, ks in sizes.items():
            for k in ks[:3]:
                lines.append(f"  * {describe(k)} has axis {in_axes_flat[k]} of "
                             f"size {size} (type {in_avals[k].str_short()})")
            if len(ks) > 3:
                lines.append(f"  * ... and {len(ks) - 3} more of size {size}")
        raise ValueError("pmap got inconsistent sizes for array axes to be "
                         "mapped:\n" + "\n".join(lines))
    size = next(iter(sizes))
    if size == 0:
        k = sizes[0][0]
        raise EmptyMappedAxisError(
            f"pmap got a mapped axis of size 0 ({describe(k)} has axis "
            f"{in_axes_flat[k]} of size 0, type {in_avals[k].str_short()}): a "
            "pmap runs one program instance per element of the mapped axis, "
            "so it needs at least one.")
    return size


def _resolve_devices(spec, size, inner=()):
    """One device per program instance: ``size`` times the sizes of the
    pmaps nested in the body. Given ``devices`` must be exactly that many,
    as in classic pmap."""
    needed = size
    for _, inner_size in inner:
        needed *= inner_size
    if spec.devices is not None:
        if needed != len(spec.devices):
            shown = ", ".join(map(str, spec.devices))
            if not inner:
                raise ValueError(
                    "Leading axis size of input to pmapped function must equal "
                    "the number of local devices passed to pmap. Got axis_size="
                    f"{size}, num_local_devices={len(spec.devices)}.\n"
                    f"(Local devices available to pmap: {shown})")
            raise ValueError(
                f"pmapped function requires {needed} local devices to run due "
                "to nested pmapped or other parallel functions, but only "
                f"{len(spec.devices)} are available.\n(outer axis size: {size}, "
                f"local devices available to pmap: {shown})")
        return spec.devices
    available = jax.local_devices(backend=spec.backend)
    if needed > len(available):
        platform = available[0].platform if available else spec.backend
        what = (f"an axis of size {size}" if not inner else
                f"axes of sizes {[size, *[s for _, s in inner]]} (nested pmaps)")
        raise ValueError(
            f"compiling computation that requires {needed} logical devices, "
            f"but only {len(available)} XLA devices are available "
            f"(num_replicas={needed}): pmapped function {spec.name} maps "
            f"{what}, so it requires {needed} replicas, but only "
            f"{len(available)} XLA devices are available (platform {platform!r})."
            + (_cpu_devices_hint(needed) if platform == "cpu" else ""))
    return tuple(available[:needed])


def _cpu_devices_hint(needed):
    # A one-device machine meets this first with examples written for 8:
    # say how to get more CPU devices (only before JAX starts its backend).
    return (f" To simulate {needed} CPU devices, set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={needed} in the "
            "environment, or call jax.config.update('jax_num_cpu_devices', "
            f"{needed}) before JAX first uses a device.")


def _across_processes(spec, flat):
    """A top-level, eager call in a multi-process run spans every process
    (classic multi-host pmap). Under an outer trace (jit, grad) a pmap runs
    on this process's devices, as jax.pmap does."""
    if jp.process_count(spec.backend) == 1:
        return False
    return jp.trace_state_clean() and not any(isinstance(x, jp.Tracer) for x in flat)


def _global_axis_size(spec, local_size):
    """The classic rule: ``axis_size`` if given, else the number of
    ``devices`` if given, else the local size times the process count."""
    if spec.axis_size is not None:
        return spec.axis_size
    if spec.devices is not None:
        return len(spec.devices)
    return local_size * jp.process_count(spec.backend)


def _global_devices(spec, local_size, global_size, inner):
    """The devices of a pmap spanning processes, and the check that this
    process owns as many of them as its data has slices."""
    needed = global_size
    for _, inner_size in inner:
        needed *= inner_size
    if spec.devices is not None:
        if inner:
            raise ValueError(
                "pmapkit: nested pmaps cannot run across processes when the "
                "outer pmap is given 'devices' (as in classic pmap); leave "
                "'devices' unset to map over every process's devices.")
        if needed > len(spec.devices):
            raise ValueError(
                f"pmapped function {spec.name} maps an axis of size {needed}, "
                f"but its 'devices' argument lists only {len(spec.devices)}: "
                f"{list(spec.devices)}.")
        devices = spec.devices[:needed]
    else:
        by_process = {}
        for d in jax.devices(spec.backend):
            by_process.setdefault(d.process_index, []).append(d)
        # Process-major: each process holds a contiguous run of the axis.
        devices = tuple(d for p in sorted(by_process) for d in by_process[p])
        if needed > len(devices):
            raise ValueError(
                f"pmapped function {spec.name} requires {needed} devices "
                f"across {len(by_process)} processes, but only {len(devices)} "
                "XLA devices are available.")
        devices = devices[:needed]
    me = jax.process_index(spec.backend)
    local = [d for d in devices if d.process_index == me]
    per_slice = needed // global_size   # devices per slice (nested pmaps)
    if local_size * per_slice != len(local):
        shown = ", ".join(map(str, local))
        if not inner:
            raise ValueError(
                "Leading axis size of input to pmapped function must equal the "
                "number of local devices passed to pmap. Got axis_size="
                f"{local_size}, num_local_devices={len(local)}.\n"
                f"(Local devices available to pmap: {shown})")
        raise ValueError(
            f"pmapped function requires {local_size * per_slice} "
            "local devices to run due to nested pmapped or other parallel "
            f"functions, but only {len(local)} are available.\n"
            f"(outer axis size: {local_size}, local devices available to "
            f"pmap: {shown})")
    return tuple(devices)


def _prepare_cached(spec, args, kwargs):
    # The enclosing pmap bodies' axes and debug_nans (donation) shape the trace.
    extra = (tuple(pmap_bodies.axes), jp.debug_nans.value,
             jp.process_count(spec.backend) > 1 and jp.trace_state_clean())
    return calls.prepare_cached(
        spec.trace_cache, lambda: _prepare(spec, args, kwargs), spec.static,
        args, kwargs, extra)


def _cache_miss(spec, *args, **kwargs):
    calls.check_not_deleted(jax.tree_util.tree_leaves((args, kwargs)))
    prepared = _prepare_cached(spec, args, kwargs)
    flat = prepared.flat_args
    if in_pmap_body():
        # Inside an enclosing pmap body: a plain equation, lowered on its mesh.
        outs = pmap_p.bind(*flat, **prepared.params)
        return jax.tree_util.tree_unflatten(prepared.out_tree, outs), None
    if not jp.trace_state_clean() or any(isinstance(x, jp.Tracer) for x in flat):
        outs = compiling.bind_in_outer_trace(pmap_p, prepared.params,
                                            prepared.in_avals, flat)
        return jax.tree_util.tree_unflatten(prepared.out_tree, outs), None
    calls.check_donation_aliases(
        "pmap", spec, prepared, args, kwargs,
        kinds.program_shardings(pmap_p, prepared.params, prepared.in_avals)[0])
    program = compiling.compile_pmap(prepared.params, prepared.in_avals)
    outs = program.run_flat(flat)
    out = jax.tree_util.tree_unflatten(prepared.out_tree, outs)
    return out, program.fastpath(prepared.out_tree)


def _lower(spec, *args, **kwargs):
    return stages.lower_prepared(pmap_p, "pmap", spec, _prepare(spec, args, kwargs),
                                 args, kwargs)


def _make_dispatch(spec, shared=None):
    fn = calls.make_dispatch(
        spec.fun, functools.partial(_cache_miss, spec), spec.static,
        functools.partial(_lower, spec), functools.partial(_reduce, spec),
        spec.signature, shared=shared)
    fn._on_clear = spec.trace_cache.clear
    return fn


def _reduce(spec):
    return (_unpickle_pmap, (spec.pickle_state(),))


def _unpickle_pmap(state):
    version = state.get("version")
    if version != _dispatch_mod.PICKLE_VERSION:
        raise ValueError(
            f"Cannot unpickle a pmapkit.pmap function of pickle version "
            f"{version!r}; this pmapkit reads version "
            f"{_dispatch_mod.PICKLE_VERSION}.")
    devices = state["devices"]
    if devices is not None:
        by_key = {(d.platform, d.id): d for d in jax.devices()}
        devices = [by_key[k] for k in devices]
    return pmap(state["fun"], state["axis_name"], in_axes=state["in_axes"],
                out_axes=state["out_axes"],
                static_broadcasted_argnums=state["static_broadcasted_argnums"],
                devices=devices, backend=state["backend"],
                axis_size=state["axis_size"],
                donate_argnums=state["donate_argnums"])
