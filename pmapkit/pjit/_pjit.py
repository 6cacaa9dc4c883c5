"""``pmapkit.pjit``: the classic pjit on pmapkit's compiled dispatch core.

``pjit(fun, in_axis_resources, out_axis_resources, static_argnums,
donate_argnums)`` partitions ``fun`` over the mesh active *at the call site*
(``with pmapkit.Mesh(...)``, ``jax.set_mesh`` or JAX's deprecated
``with jax_mesh:``): arguments are placed as ``in_axis_resources`` says (a
pytree prefix of ``None | PartitionSpec``), results come back as arrays
(``jax.Array``) with shardings (``NamedSharding``) of that mesh. The modern spelling
``in_shardings=`` / ``out_shardings=`` (NamedSharding or PartitionSpec) is
accepted too. As in 0.4-era pjit, a leaf may also be a ``Sharding``
(``NamedSharding``, ``SingleDeviceSharding``): it carries its devices, so no
mesh context is needed. ``with_sharding_constraint`` pins intermediate values.

As in later classic releases both may be omitted: an omitted
``in_axis_resources`` keeps a committed array's sharding (host values and
uncommitted arrays are replicated), an omitted ``out_axis_resources`` takes
the partitioner's choice. ``static_argnames``, ``device``/``backend`` (one
device, no shardings, no mesh context), ``keep_unused`` and ``inline`` are
the keywords those releases added.
"""
from __future__ import annotations

import functools
import inspect
import threading


import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.keys import _cache_keys, caches
from pmapkit.core.misses import calls, committed_inputs
from pmapkit.core.programs import compiling
from pmapkit.core.sharding import axis_names, specs
from pmapkit.pjit import _across as pjit_across
from pmapkit.core.misses import pmap_layouts, stages
from pmapkit.core.keys import wrapper_cache
from pmapkit.core.hitpath._compiled import dispatch as _dispatch_mod
from pmapkit.core.sharding.mesh import active_mesh
from pmapkit.core.sharding.sharding_specs import classic_spec_repr
from pmapkit.core.rules.primitives import in_pmap_body, no_mesh, pjit_p, plain_avals

_UNSET = object()
# The pmapkit_pjit ``out_shardings`` entry of an output whose sharding the
# partitioner chooses (``out_axis_resources`` omitted).
_CHOSEN = None
_DEVICE_AXIS = "_pmapkit_device"


def pjit(fun, in_axis_resources=_UNSET, out_axis_resources=_UNSET,
         static_argnums=None, donate_argnums=None, *, in_shardings=_UNSET,
         out_shardings=_UNSET, static_argnames=None, device=None, backend=None,
         keep_unused=False, inline=False):
    """Compile ``fun`` and partition it over the mesh active at each call.

    Args:
      fun: the function to compile; pure, taking and returning pytrees of
        arrays (static arguments excepted).
      in_axis_resources: a pytree prefix of the positional arguments tuple
        with ``None`` (replicated) or ``PartitionSpec`` leaves; a single spec
        applies to every argument. Omitted: each argument keeps a committed
        array's sharding; host values are replicated.
      out_axis_resources: the same for the outputs. Omitted: the partitioner
        chooses.
      static_argnums: positional arguments that are compile-time constants.
      donate_argnums: positional arguments whose buffers may be reused.
      in_shardings: the modern spelling of ``in_axis_resources``. Leaves of
        either spelling may also be ``Sharding`` objects (NamedSharding,
        SingleDeviceSharding), which need no mesh context.
      out_shardings: the modern spelling of ``out_axis_resources``.
      static_argnames: parameter names that are compile-time constants (by
        keyword or, for positional parameters, by position).
      device: run on this one device; excludes shardings and a mesh context.
      backend: run on this backend's first device; the same exclusions.
      keep_unused: keep arguments the computation does not use.
      inline: under an enclosing trace, inline ``fun`` instead of staging a
        pjit equation.
    """
    # Wrappers of one function with equal parameters share the validated
    # options, the traced bodies and the compiled entries (the mesh is the
    # call's: it keys the entries, see pmapkit.core.keys.wrapper_cache).
    key = _cache_keys.params_key(
        in_axis_resources, out_axis_resources, static_argnums, donate_argnums,
        in_shardings, out_shardings, static_argnames, device, backend,
        keep_unused, inline)
    spec, shared = wrapper_cache.spec_and_caches(
        fun, key, _PjitSpec, fun, in_axis_resources, out_axis_resources,
        static_argnums, donate_argnums, in_shardings, out_shardings,
        static_argnames, device, backend, keep_unused, inline)
    # Every call form runs on the dispatch core: static keywords are signed by
    # value and, with in_axis_resources omitted, committed arrays by their
    # sharding (the program places them as they come).
    fn = calls.make_dispatch(
        fun, functools.partial(_cache_miss, spec), spec.static,
        functools.partial(_lower, spec), functools.partial(_reduce, spec),
        spec.signature, static_argnames=spec.static_names,
        sign_shardings=spec.placement_matters,
        # JAX's trace context holds pmapkit's mesh state and JAX's classic
        # resource env, but of jax.set_mesh only the abstract mesh (which
        # meshes over other devices share): the concrete one selects too.
        context_state=jp.device_context, shared=shared)
    fn._on_clear = spec.clear_caches
    return fn


def _pick(classic, modern, classic_name, modern_name):
    if classic is not _UNSET and modern is not _UNSET:
        raise ValueError(f"pjit got both {classic_name} and {modern_name}; "
                         "they are two spellings of one option, give one.")
    return (classic, classic_name) if classic is not _UNSET else (modern, modern_name)


def _static_names(fun, signature, static_argnames, static, argnums_given):
    """``(static positions, static names)``: where only one of the two
    options is given (``argnums_given``: static_argnums is not None), each
    completed from the other through the signature, as classic jit did;
    given both, they are taken as given, even where they disagree (0.4 pjit:
    ``static_argnums=1, static_argnames=()`` makes the second parameter
    static by position only)."""
    names = () if static_argnames is None else calls.one_or_many(
        static_argnames, str, "static_argnames", "pjit")
    if signature is None:
        return static, frozenset(names)
    params = list(signature.parameters.values())
    positional = [p.name for p in params if p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    by_keyword = {p.name for p in params if p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    unknown = [n for n in names if n not in by_keyword and not takes_kwargs]
    if unknown:
        raise ValueError(
            f"pjit'd function {getattr(fun, '__name__', fun)} has invalid "
            f"argnames {unknown} in static_argnames; it takes no such "
            "keyword parameters.")
    if argnums_given and static_argnames is not None:
        return static, frozenset(names)
    positions = set(static) | {positional.index(n) for n in names
                               if n in positional and n in by_keyword}
    names = set(names) | {positional[i] for i in static
                          if i < len(positional) and positional[i] in by_keyword}
    return tuple(sorted(positions)), frozenset(names)


def _one_device(device, backend):
    if device is not None:
        if not isinstance(device, jax.Device):
            raise TypeError(f"pjit device must be a jax.Device, got {device!r} "
                            f"of type {type(device).__name__}.")
        return device
    return jax.local_devices(backend=backend)[0]


class _PjitSpec:
    """The validated decoration-time options of one pjit'd function."""

    def __init__(self, fun, in_axis_resources, out_axis_resources,
                 static_argnums, donate_argnums, in_shardings, out_shardings,
                 static_argnames, device, backend, keep_unused, inline):
        if not callable(fun):
            raise TypeError(f"pjit requires a callable 'fun', got {fun!r} of "
                            f"type {type(fun).__name__}.")
        in_tree, self.in_what = _pick(in_axis_resources, in_shardings,
                                      "in_axis_resources", "in_shardings")
        out_tree, self.out_what = _pick(out_axis_resources, out_shardings,
                                        "out_axis_resources", "out_shardings")
        if device is not None and backend is not None:
            raise ValueError("can't specify both a device and a backend for "
                             f"jit (pjit), got device={device!r} and backend={backend!r}")
        if device is not None or backend is not None:
            for tree, what in ((in_tree, self.in_what), (out_tree, self.out_what)):
                if tree is not _UNSET:
                    raise ValueError("If backend or device is specified on jit, "
                                     f"then {what} should not be specified.")
        self.device = (None if device is None and backend is None
                       else _one_device(device, backend))
        self.in_unspecified = in_tree is _UNSET
        self.out_unspecified = out_tree is _UNSET
        # Committed arguments keep their sharding (in_axis_resources omitted,
        # no device=): their placement is part of the program.
        self.placement_matters = self.in_unspecified and self.device is None
        self.user_in = in_tree
        self.user_out = out_tree
        self.in_resources = (None if self.in_unspecified else
                             specs.prepare_axis_resources(in_tree, self.in_what,
                                                          tupled_args=True))
        self.out_resources = (None if self.out_unspecified else
                              specs.prepare_axis_resources(out_tree, self.out_what))
        for tree, what in ((self.in_resources, self.in_what),
                           (self.out_resources, self.out_what)):
            _refuse_pmap_layouts(tree, what)
        self.fun = fun
        self.signature = calls.signature_of(fun)
        static = calls.argnum_tuple(fun, static_argnums, "static_argnums", "pjit")
        self.static, self.static_names = _static_names(
            fun, self.signature, static_argnames, static, static_argnums is not None)
        self.static_argnames_given = static_argnames
        self.donate = calls.argnum_tuple(fun, donate_argnums, "donate_argnums", "pjit")
        overlap = set(self.static) & set(self.donate)
        if overlap:
            raise ValueError("pjit donate_argnums and static_argnums must not "
                             f"overlap, but both contain {sorted(overlap)}.")
        self.keep_unused = bool(keep_unused)
        self.inline = bool(inline)
        self.name = getattr(fun, "__name__", None) or type(fun).__name__
        self.trace_cache = calls.TraceCache()
        # On a mesh over several processes: traced calls by global avals.
        self.global_traces = calls.TraceCache()

    def clear_caches(self):
        self.trace_cache.clear()
        self.global_traces.clear()

    def pickle_state(self):
        return {"version": _dispatch_mod.PICKLE_VERSION, "fun": self.fun,
                "in": None if self.in_unspecified else _picklable(self.user_in),
                "out": None if self.out_unspecified else _picklable(self.user_out),
                "in_unspecified": self.in_unspecified,
                "out_unspecified": self.out_unspecified,
                "in_what": self.in_what, "out_what": self.out_what,
                "static_argnums": self.static, "donate_argnums": self.donate,
                "static_argnames": self.static_argnames_given,
                "device_id": None if self.device is None else self.device.id,
                "keep_unused": self.keep_unused,
                "inline": self.inline}


def _refuse_pmap_layouts(tree, what):
    """A pmap output's sharding is not one of pjit's (classic pjit refused
    its ``PmapSharding``; pass a PartitionSpec or a NamedSharding)."""
    if tree is None:
        return
    for leaf in jax.tree_util.tree_leaves(tree, is_leaf=specs.is_spec_leaf):
        if isinstance(leaf, jax.sharding.Sharding) and pmap_layouts.is_pmap_output(leaf):
            raise ValueError(
                f"One of {what} leaf specifications got sharding {leaf} which is "
                "not allowed. (It is a pmap output's layout; give pjit a "
                "PartitionSpec, or a NamedSharding of your own.)")


def _device_mesh(device):
    return jax.sharding.Mesh(np.array([device], dtype=object), (_DEVICE_AXIS,))


def _sharding_mesh(sharding):
    """The mesh a ``Sharding`` leaf or a committed array's sharding runs
    on: a NamedSharding's own, else one over its devices (a one-device mesh
    for a SingleDeviceSharding)."""
    if isinstance(sharding, NamedSharding):
        return sharding.mesh
    devices = list(sharding._device_assignment)
    return jax.sharding.Mesh(np.array(devices, dtype=object), (_DEVICE_AXIS,))


def _one_device_mesh(mesh):
    """Whether ``mesh`` is pjit's own mesh of one device (``device=``, or
    SingleDeviceSharding leaves/arguments): results come back as
    SingleDeviceShardings there, as from ``jax.jit``."""
    return mesh.axis_names == (_DEVICE_AXIS,) and mesh.devices.size == 1


def _declared_mesh(spec):
    for tree in (spec.in_resources, spec.out_resources):
        if tree is None:
            continue
        for leaf in jax.tree_util.tree_leaves(tree, is_leaf=specs.is_spec_leaf):
            if isinstance(leaf, jax.sharding.Sharding):
                return _sharding_mesh(leaf)
    return None


def _active_mesh(spec, flat_args=()):
    if spec.device is not None:
        if active_mesh() is not None:
            raise ValueError(
                "Mesh context manager should not be used with jit when backend "
                "or device is also specified as an argument to jit: pjit with "
                "device or backend runs on that one device; it must not be "
                "called under a mesh context (with mesh: / jax.set_mesh).")
        return _device_mesh(spec.device)
    current = active_mesh()
    if current is not None:
        return current
    # Without a mesh context, Sharding leaves still name their devices (0.4
    # pjit), and so do committed arguments where in_axis_resources is omitted.
    declared = _declared_mesh(spec)
    if declared is not None:
        return declared
    if spec.in_unspecified:
        for x in flat_args:
            if _committed(x):
                return _sharding_mesh(x.sharding)
        if spec.out_unspecified:
            # 0.4-era pjit without a mesh and without specs is jax.jit: on the
            # default device, results with SingleDeviceShardings.
            return _device_mesh(_default_device())
    raise RuntimeError("pjit requires a non-empty mesh! Are you sure that it's "
                       "defined at the call site? (enter one with "
                       "`with pmapkit.Mesh(devices, axis_names):`) Alternatively, "
                       "provide a XLACompatibleSharding to pjit and then the mesh "
                       "context manager is not required.")


def _default_device():
    chosen = jax.config.jax_default_device
    if isinstance(chosen, jax.Device):
        return chosen
    return jax.devices(chosen)[0] if isinstance(chosen, str) else jax.devices()[0]


def _to_sharding(leaf, mesh):
    if isinstance(leaf, NamedSharding):
        return leaf
    if isinstance(leaf, jax.sharding.Sharding):
        # A SingleDeviceSharding, or another kind replicated over its devices.
        return NamedSharding(_sharding_mesh(leaf), PartitionSpec())
    if leaf is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, leaf.to_partition_spec())


def _device_ids(devices):
    return [d.id for d in devices]


def _platform(devices):
    return devices[0].platform.upper() if devices else "?"


def _devices_mismatch(pjit_devices, array_devices, what):
    """Classic 0.4 pjit's message for an argument committed to devices the
    computation does not run on."""
    return (
        "Pjit's devices and Array's devices should be equal. Got Pjit's "
        f"device ids {_device_ids(pjit_devices)} on platform "
        f"{_platform(pjit_devices)} and Array's device ids "
        f"{_device_ids(array_devices)} on platform {_platform(array_devices)} "
        f"({what}; move it with jax.device_put first).")


def _arrays_mismatch(first_devices, array_devices, what):
    """Classic pjit's message for committed arguments on different devices
    (the computation runs where the first of them is)."""
    return (
        "Received incompatible devices for pjitted computation. Devices of all "
        "`Array` inputs and outputs should be the same. Got array device ids "
        f"{_device_ids(first_devices)} on platform {_platform(first_devices)} "
        f"and another array's device ids {_device_ids(array_devices)} on "
        f"platform {_platform(array_devices)} ({what}; move it with "
        "jax.device_put first).")


def _kept_sharding(x, mesh, describe, k, device_mode, mesh_from_arguments):
    """Where an argument goes when in_axis_resources is omitted: a committed
    array keeps its sharding, anything else is replicated over the mesh
    (``mesh_from_arguments``: the first committed argument's devices)."""
    replicated = NamedSharding(mesh, PartitionSpec())
    if device_mode or isinstance(x, jp.Tracer):
        return replicated  # a traced value has no committed placement to keep
    if not isinstance(x, jax.Array) or pmap_layouts.is_pmap_output(x.sharding):
        # A pmap's output is moved, as an uncommitted value (classic).
        return replicated
    if not x.committed:
        if len(x.sharding.device_set) > 1:
            # Classic pjit's and jax.jit's refusal (neither keeps nor moves it).
            raise NotImplementedError(
                "Having uncommitted Array sharded on multiple devices is not "
                f"supported. ({describe(k)} of pjit is uncommitted on devices "
                f"{sorted(_device_ids(x.sharding.device_set))}; commit it with "
                "jax.device_put(x, sharding) or pass in_axis_resources.)")
        return replicated
    sharding = x.sharding
    mesh_devices = list(mesh.devices.flat)
    if sharding.device_set != set(mesh_devices):
        have = sorted(sharding.device_set, key=lambda d: d.id)
        if mesh_from_arguments:
            raise ValueError(_arrays_mismatch(
                mesh_devices, list(sharding._device_assignment),
                f"{describe(k)} is committed to devices {_device_ids(have)}, but "
                "an earlier argument to devices "
                f"{sorted(_device_ids(mesh_devices))}, and with in_axis_resources "
                "omitted pjit runs where its committed arguments are"))
        raise ValueError(_devices_mismatch(
            mesh_devices, list(sharding._device_assignment),
            f"{describe(k)} is committed to devices {_device_ids(have)}, but "
            "the computation runs on the mesh's devices "
            f"{sorted(_device_ids(mesh_devices))}"))
    if isinstance(sharding, NamedSharding):
        return sharding
    if sharding.is_fully_replicated:
        return replicated
    raise ValueError(
        f"pjit: {describe(k)} has a {type(sharding).__name__}; with "
        "in_axis_resources omitted, committed arguments must have a "
        "NamedSharding (or be replicated).")


def _check_against(what, resources, avals, mesh, describe, even=True):
    for k, (leaf, aval) in enumerate(zip(resources, avals)):
        if isinstance(leaf, NamedSharding):
            parsed = specs.ParsedPartitionSpec.from_user_input(leaf.spec, what)
            parsed.check_shape(aval.shape, leaf.mesh, what,
                               describe(k) if describe else None, sharding=leaf,
                               even=even)
        elif isinstance(leaf, specs.ParsedPartitionSpec):
            leaf.check_shape(aval.shape, mesh, what,
                             describe(k) if describe else None, even=even)


def _check_same_devices(spec, in_shardings, out_shardings, describe):
    """Every sharding of one program is over the same devices, in one order
    (0.4 pjit's device-assignment check), before anything compiles."""
    def label(what, k):
        if what == "in":
            return f"{spec.in_what} of {describe(k)}"
        return f"{spec.out_what} of output {k}"

    first = None
    for what, shardings in (("in", in_shardings), ("out", out_shardings)):
        for k, s in enumerate(shardings):
            if s is None:
                continue
            devices = tuple(s._device_assignment)
            if first is None:
                first = (what, k, devices)
                continue
            if devices == first[2]:
                continue
            ids = first[2]
            # jax.jit's words, and 0.4 pjit's (which said it of any clash).
            raise ValueError(
                "Received incompatible devices for pjitted computation (Pjit's "
                "devices and Array's devices should be equal). Got "
                f"{label(first[0], first[1])} with device ids "
                f"{_device_ids(ids)} on platform {_platform(ids)} and "
                f"{label(what, k)} with device ids {_device_ids(devices)} on "
                f"platform {_platform(devices)}: every sharding of one pjit "
                "must be over the same devices, in the same order.")


def _trace_context(mesh):
    """Trace the body under the pjit's abstract mesh, so JAX's own
    ``with_sharding_constraint(x, P(...))`` inside it finds the mesh; where
    an enclosing trace holds another mesh size, trace with none."""
    if mesh.axis_names == (_DEVICE_AXIS,) or in_pmap_body():
        # One device, or a pmap body (its axes are manual there): no mesh.
        return no_mesh()
    try:
        ctx = jax.sharding.use_abstract_mesh(mesh.abstract_mesh)
        ctx.__enter__()
    except ValueError:
        return no_mesh()
    return _Entered(ctx)


class _Entered:
    """A context already entered: leaving it on ``__exit__``."""

    def __init__(self, ctx):
        self._ctx = ctx

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


class MeshChangedError(RuntimeError, ValueError):
    """A pjit inside the body of another pjit, under a mesh context over
    other devices: classic pjit raised RuntimeError ("Changing the physical
    mesh is not allowed inside pjit."), jax.jit (and pmapkit before) a
    ValueError ("Received incompatible devices for jitted computation");
    code written for either catches this."""


# Per thread: the meshes of the pjit bodies being traced, innermost last.
_tracing = threading.local()


def _tracing_meshes():
    meshes = getattr(_tracing, "meshes", None)
    if meshes is None:
        meshes = _tracing.meshes = []
    return meshes


def _check_enclosing_mesh(spec, prepared):
    """A pjit traced inside another pjit's body, under a mesh context over
    devices other than the enclosing pjit's mesh: refused before binding."""
    stack = getattr(_tracing, "meshes", None)
    if not stack or spec.device is not None or active_mesh() is None:
        return
    outer = set(stack[-1].devices.flat)
    inner = {d for s in prepared.params["in_shardings"] + tuple(
        s for s in prepared.params["out_shardings"] if s is not None)
        for d in s.device_set}
    if not inner or inner == outer:
        return
    raise MeshChangedError(
        "Changing the physical mesh is not allowed inside pjit. (Received "
        f"incompatible devices for jitted computation: pjit {spec.name} runs on "
        f"the mesh context's device ids {sorted(_device_ids(inner))}, inside a pjit "
        f"whose mesh has device ids {sorted(_device_ids(outer))}; call it under "
        "the enclosing mesh, or outside the enclosing pjit.)")


class KwargsError(ValueError, NotImplementedError):
    """Keyword arguments to a pjit whose in_axis_resources are given: the
    seed's pjit raised NotImplementedError, 0.4 pjit ValueError."""


def _split_kwargs(spec, kwargs):
    static_kw = {k: v for k, v in kwargs.items() if k in spec.static_names}
    dyn_kw = {k: v for k, v in kwargs.items() if k not in spec.static_names}
    if dyn_kw and not spec.in_unspecified:
        raise KwargsError(
            f"pjit does not support kwargs when {spec.in_what} is specified. "
            f"Pass {sorted(dyn_kw)} positionally, omit {spec.in_what}, or name "
            "them in static_argnames.")
    for name, value in static_kw.items():
        try:
            hash(value)
        except TypeError:
            raise ValueError(
                "Non-hashable static arguments are not supported. Static "
                f"argument '{name}' of type {type(value)} for function "
                f"{spec.name} is non-hashable.") from None
    return static_kw, dyn_kw


def _prepare(spec, args, kwargs):
    static_kw, dyn_kw = _split_kwargs(spec, kwargs)
    nargs = len(args)
    static = tuple(i for i in spec.static if i < nargs)
    needed = max(spec.donate, default=-1)
    # A static position the call leaves out is an error, unless static names
    # are in play or its parameter comes by keyword (dynamic, then, if not
    # named static: 0.4 pjit's explicit ``static_argnames=()``).
    absent = [i for i in spec.static
              if i >= nargs and _parameter_name(spec, i) not in kwargs]
    if absent and not spec.static_names:
        needed = max(needed, *absent)
    if needed >= nargs:
        raise ValueError(
            f"pjit'd function {spec.name} has static_argnums={spec.static}, "
            f"donate_argnums={spec.donate} but was called with only {nargs} "
            "positional arguments.")
    statics, dyn_positions, dyn_args = calls.split_static(static, args, spec.name)
    flat, in_tree = jax.tree_util.tree_flatten((dyn_args, dyn_kw))
    mesh = _active_mesh(spec, flat)
    describe = calls.LeafNames(spec.signature, dyn_positions, dyn_args, dyn_kw)
    in_avals = calls.abstractify(flat, describe, "pjit", "static_argnums")
    # A top-level call on a mesh over several processes takes each process's
    # local view (classic positional semantics); under a trace, values are
    # already global.
    across = pjit_across.spans_processes(mesh) and not _traced(flat)
    if spec.in_unspecified:
        in_flat = None
        from_arguments = (spec.device is None and active_mesh() is None
                          and _declared_mesh(spec) is None)
        in_shardings = [_kept_sharding(x, mesh, describe, k, spec.device is not None,
                                       from_arguments)
                        for k, x in enumerate(flat)]
    else:
        in_flat = _flat_in_resources(spec, nargs, dyn_positions, dyn_args)
        if not across:
            _check_against("pjit arguments", in_flat, in_avals, mesh, describe)
        in_shardings = [_to_sharding(leaf, mesh) for leaf in in_flat]
    if across:
        local_avals = in_avals
        in_avals = pjit_across.agreed_global_avals(
            mesh, lambda: pjit_across.global_avals(flat, local_avals, in_flat,
                                                   in_shardings, describe))

    donated = []
    for pos, arg in zip(dyn_positions, dyn_args):
        n_leaves = len(jax.tree_util.tree_leaves(arg))
        donated += [pos in spec.donate and not jp.debug_nans.value] * n_leaves
    donated += [False] * (len(flat) - len(donated))  # keyword leaves

    if across:
        # Local data and global arrays of one global shape are one program:
        # the trace (and so the compiled program) is shared by global avals.
        global_key = _cache_keys.global_trace_key(
            in_tree, in_avals, in_shardings, static, statics, nargs, static_kw,
            donated, mesh)
        hit = spec.global_traces.get(global_key) if global_key is not None else None
        if hit is not None:
            return hit.with_flat_args(flat)

    fun = functools.partial(spec.fun, **static_kw) if static_kw else spec.fun
    tracing = _tracing_meshes()
    tracing.append(mesh)  # what a pjit in the body checks its mesh against
    try:
        with _trace_context(mesh):
            jaxpr, consts, out_tree = calls.trace_user_fun(
                "pjit", fun, static, statics, nargs, in_tree,
                plain_avals(in_avals), describe)
    finally:
        tracing.pop()
    if spec.out_unspecified:
        out_shardings = (_CHOSEN,) * len(jaxpr.outvars)
    else:
        out_shape_tree = jax.tree_util.tree_unflatten(
            out_tree, [object()] * out_tree.num_leaves)
        out_flat = specs.flatten_axis_resources(spec.out_what, spec.out_resources,
                                                out_shape_tree, False)
        _check_against("pjit outputs", out_flat,
                       [v.aval for v in jaxpr.outvars], mesh, None)
        out_shardings = tuple(_to_sharding(leaf, mesh) for leaf in out_flat)
    _check_same_devices(spec, in_shardings, out_shardings, describe)
    if spec.device is not None or _one_device_mesh(mesh):
        out_shardings = (NamedSharding(mesh, PartitionSpec()),) * len(jaxpr.outvars)

    with _trace_context(mesh):  # as traced: checks retype the body
        jaxpr, hoisted = calls.close_jaxpr(jaxpr, consts)
    if hoisted:
        flat = hoisted + list(flat)
        in_avals = [jp.get_aval(c) for c in hoisted] + in_avals
        in_shardings = [NamedSharding(mesh, PartitionSpec())] * len(hoisted) + in_shardings
        donated = [False] * len(hoisted) + donated

    prepared = calls.Prepared()
    prepared.flat_args = flat
    prepared.in_avals = tuple(in_avals)
    prepared.out_tree = out_tree
    prepared.params = dict(
        jaxpr=jaxpr, in_shardings=tuple(in_shardings),
        out_shardings=out_shardings, donated_invars=tuple(donated), name=spec.name)
    if across and global_key is not None and not hoisted:
        spec.global_traces.put(global_key, prepared, len(flat))
    return prepared


def _parameter_name(spec, position):
    """The name of the positional parameter at ``position``, or None."""
    if spec.signature is None:
        return None
    params = [p for p in spec.signature.parameters.values() if p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if position < len(params) and params[position].kind is not inspect.Parameter.POSITIONAL_ONLY:
        return params[position].name
    return None


def _traced(flat):
    return not jp.trace_state_clean() or any(isinstance(x, jp.Tracer) for x in flat)


def _prepare_cached(spec, args, kwargs):
    """``_prepare`` through the traced-call cache. Besides avals, tracing
    depends on the mesh, static keyword values, the placement of committed
    arguments (in_axis_resources omitted) and, across processes, which
    arguments are global arrays."""
    static_kw, dyn_kw = _split_kwargs(spec, kwargs)
    leaves = jax.tree_util.tree_leaves((args, dyn_kw))
    extra = (active_mesh(), jp.debug_nans.value,
             _cache_keys.static_keywords_key(static_kw))
    if spec.placement_matters:
        extra += (tuple(_placement(x) for x in leaves),)
    if jp.process_count() > 1:
        # A global array and a local one of one shape trace differently.
        extra += (pjit_across.global_flags(leaves),)
    return calls.prepare_cached(spec.trace_cache, lambda: _prepare(spec, args, kwargs),
                                spec.static, args, dyn_kw, extra)


def _placement(x):
    """What an argument's placement adds to the program when
    in_axis_resources is omitted: a committed array's sharding, else None."""
    if _committed(x):
        return x.sharding
    return None


def _committed(x):
    """Whether ``x`` is a committed array whose placement pjit keeps: a
    pmap's output is not (classic jit and pjit took it as an uncommitted
    value, moved where the computation runs)."""
    return (isinstance(x, jax.Array) and not isinstance(x, jp.Tracer) and x.committed
            and not pmap_layouts.is_pmap_output(x.sharding))


def _cache_miss(spec, *args, **kwargs):
    if jp.jit_disabled():
        # As classic pjit and jax.jit under jax.disable_jit(): the function
        # runs eagerly on the arguments as given (value-dependent Python
        # works; specs and meshes place nothing). The disabled context has
        # its own cache, whose entries all come back here (no fast path).
        return spec.fun(*args, **kwargs), None
    calls.check_not_deleted(jax.tree_util.tree_leaves((args, kwargs)))
    prepared = _prepare_cached(spec, args, kwargs)
    flat = prepared.flat_args
    if _traced(flat):
        _check_enclosing_mesh(spec, prepared)
        return _bind_traced(spec, prepared), None
    _check_committed_devices(spec, prepared, args, kwargs)
    strict = _strict_inputs(spec, args, len(flat))
    if strict is not None:
        committed_inputs.check(flat, prepared.params["in_shardings"], strict,
                               _input_names(spec, prepared, args, kwargs))
    calls.check_donation_aliases("pjit", spec, prepared, args, kwargs,
                                 prepared.params["in_shardings"])
    program = _compile(spec, prepared)
    out_shardings, committed = _results_placement(spec, prepared, flat)
    outs = stages.place_results(program.run_flat(flat), out_shardings, committed)
    out = jax.tree_util.tree_unflatten(prepared.out_tree, outs)
    fastpath = program.fastpath(prepared.out_tree, out_shardings, committed)
    if _refuses_other_devices(spec):
        in_shardings = prepared.params["in_shardings"]
        name = spec.name  # (the check lives in the entry: not the spec)
        devices_check = _other_devices_check(
            in_shardings, lambda i: f"flat argument {i} of {name}")
        layout_check = committed_inputs.leaf_check(in_shardings, strict, spec.name)
        fastpath = committed_inputs.guard(fastpath, _both(devices_check, layout_check))
    return out, fastpath


def _results_placement(spec, prepared, flat):
    """``(out_shardings or None, committed)`` of a call's results (flat
    arguments ``flat``): as jax.jit on one device (device=, a one-device
    mesh), SingleDeviceShardings; run as jax.jit on uncommitted inputs (0.4
    pjit without mesh and specs), uncommitted, as jit's. The call and its
    ``lower().compile()`` alike."""
    device = _result_device(prepared)
    if device is None:
        return None, True
    single = jax.sharding.SingleDeviceSharding(device)
    return (single,) * len(prepared.params["out_shardings"]), not _runs_as_jit(spec, flat)


def _compiled_results_placement(prepared, as_jit, flat):
    """``_results_placement`` for a ``lower().compile()`` object: a mesh-less
    pjit without specs compiled as jax.jit gives uncommitted results
    whatever its inputs' placement (classic 0.4 pjit's compiled object and
    jax.jit's did)."""
    del flat
    device = _result_device(prepared)
    if device is None:
        return None, True
    single = jax.sharding.SingleDeviceSharding(device)
    return (single,) * len(prepared.params["out_shardings"]), not as_jit


def _both(first, second):
    """``check(x, i)`` running ``first`` then ``second`` (None: ``first`` alone)."""
    if second is None:
        return first

    def check(x, i):
        first(x, i)
        second(x, i)

    return check


def _runs_as_jit(spec, flat):
    """Whether this call is a 0.4-era mesh-less pjit run as jax.jit: no
    specs, no device=, no mesh context and no committed argument."""
    return _mesh_less_jit(spec) and not any(_placement(x) is not None for x in flat)


def _mesh_less_jit(spec):
    """A 0.4-era pjit used as jax.jit: no specs, no device=, no mesh context."""
    return (spec.in_unspecified and spec.out_unspecified and spec.device is None
            and active_mesh() is None and _declared_mesh(spec) is None)


def _flat_in_resources(spec, nargs, dyn_positions, dyn_args):
    """The given in_axis_resources, one leaf per flat dynamic argument."""
    in_res = spec.in_resources
    if spec.static and isinstance(in_res, tuple) and len(in_res) == nargs:
        in_res = tuple(in_res[i] for i in dyn_positions)
    return specs.flatten_axis_resources(spec.in_what, in_res, dyn_args, True)


def _strict_inputs(spec, args, n_flat):
    """Per flat program input (hoisted constants first): whether its
    sharding is a ``Sharding`` the caller gave, which a committed argument
    must already have (0.4 pjit, jax.jit); None where there is none."""
    if not _refuses_other_devices(spec):
        return None
    static = tuple(i for i in spec.static if i < len(args))
    _, dyn_positions, dyn_args = calls.split_static(static, args, spec.name)
    flags = tuple(isinstance(leaf, jax.sharding.Sharding) for leaf in
                  _flat_in_resources(spec, len(args), dyn_positions, dyn_args))
    if not any(flags):
        return None
    return (False,) * (n_flat - len(flags)) + flags


def _input_names(spec, prepared, args, kwargs):
    """``describe(k)`` naming flat program input ``k`` (hoisted first)."""
    static = tuple(i for i in spec.static if i < len(args))
    _, dyn_positions, dyn_args = calls.split_static(static, args, spec.name)
    names = calls.LeafNames(spec.signature, dyn_positions, dyn_args,
                            _split_kwargs(spec, kwargs)[1])
    hoisted = len(prepared.flat_args) - len(jax.tree_util.tree_leaves(
        (dyn_args, _split_kwargs(spec, kwargs)[1])))
    return lambda k: (f"{names(k - hoisted)} of {spec.name}" if k >= hoisted
                      else f"closed-over constant {k} of {spec.name}")


def _result_device(prepared):
    """The device of a program on pjit's one-device mesh, else None."""
    for s in prepared.params["out_shardings"]:
        if s is not None and _one_device_mesh(s.mesh):
            return s.mesh.devices.flat[0]
    return None


def _refuses_other_devices(spec):
    # With in_axis_resources given, a committed argument must already be on
    # the computation's devices (0.4 pjit); with device= it is moved there
    # (as jit(device=)); omitted, it decides the placement itself.
    return not spec.in_unspecified and spec.device is None


def _check_committed_devices(spec, prepared, args, kwargs):
    """Before anything runs: no committed argument is on devices other than
    the ones its in_axis_resources place it on."""
    if not _refuses_other_devices(spec):
        return
    check = _other_devices_check(
        prepared.params["in_shardings"],
        lambda k: _input_names(spec, prepared, args, kwargs)(k))
    for k, x in enumerate(prepared.flat_args):
        check(x, k)


def _other_devices_check(in_shardings, describe):
    """``check(x, i)`` refusing a committed argument on devices the
    computation does not run on; ``describe(i)`` names flat input ``i``
    (the miss path, and the hit path's guard)."""
    def check(x, i):
        want = in_shardings[i]
        if committed_inputs.on_other_devices(x, want):
            raise ValueError(_devices_mismatch(
                list(want._device_assignment), list(x.sharding._device_assignment),
                f"{describe(i)} is committed there"))

    return check


def _bind_traced(spec, prepared):
    flat = prepared.flat_args
    if not spec.inline and _mesh_less_jit(spec):
        # A 0.4-era pjit used as jax.jit places nothing of its own: under a
        # trace it is a plain jax.jit of its body, its values living where
        # the enclosing computation puts them.
        outs = _jit_of_body(prepared.params["jaxpr"])(*flat)
        return jax.tree_util.tree_unflatten(prepared.out_tree, outs)
    if spec.inline:
        # Inlined: the body's equations join the enclosing trace directly.
        jaxpr = prepared.params["jaxpr"]
        outs = jp.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *flat)
    else:
        outs = compiling.bind_in_outer_trace(pjit_p, prepared.params,
                                            prepared.in_avals, flat)
    return jax.tree_util.tree_unflatten(prepared.out_tree, outs)


# One jax.jit per traced body, so JAX's own caches key the nested call by a
# stable function, as a user's jax.jit would be; bounded (a jit holds its
# body), emptied with pmapkit's caches.
@functools.lru_cache(maxsize=256)
def _jit_of_body(closed_jaxpr):
    return jp.jit(jp.jaxpr_as_fun(closed_jaxpr))


caches.register_clear(_jit_of_body.cache_clear)


def _compile(spec, prepared):
    return compiling.compile_program(pjit_p, prepared.params, prepared.in_avals,
                                    keep_unused=spec.keep_unused)


def _lower(spec, *args, _global_avals=False, **kwargs):
    # Classic pjit's ``lower(..., _global_avals=True)``: the shapes given are
    # global ones. In one process global and local shapes are the same.
    if _global_avals and jp.process_count() > 1:
        raise NotImplementedError(
            f"pjit {spec.name}.lower(..., _global_avals=True) in a multi-process "
            "run: lower with global jax.Arrays (or this process's local "
            "shapes) instead.")
    prepared = _prepare(spec, args, kwargs)
    return stages.lower_prepared(
        pjit_p, "pjit", spec, prepared, args, kwargs,
        strict=_strict_inputs(spec, args, len(prepared.flat_args)),
        no_kwargs=not spec.in_unspecified, keep_unused=spec.keep_unused,
        placement=functools.partial(_compiled_results_placement, prepared,
                                    _mesh_less_jit(spec)))


def _reduce(spec):
    return (_unpickle_pjit, (spec.pickle_state(),))


class _ShardingState:
    """A ``Sharding`` leaf as picklable data: devices by id (jax's Device
    objects do not pickle), mesh shape and axes, spec."""

    def __init__(self, sharding):
        if isinstance(sharding, NamedSharding):
            mesh = sharding.mesh
            self.kind = "named"
            self.ids = [d.id for d in mesh.devices.flat]
            self.shape = mesh.devices.shape
            self.axis_names = mesh.axis_names
            self.axis_types = mesh.axis_types
            self.spec = sharding.spec
        else:  # SingleDeviceSharding, or another kind replicated over its devices
            self.kind = "replicated"
            self.ids = [d.id for d in sharding._device_assignment]

    def restore(self):
        by_id = {d.id: d for d in jax.devices()}
        devices = [by_id[i] for i in self.ids]
        if self.kind == "named":
            mesh = jax.sharding.Mesh(
                np.array(devices, dtype=object).reshape(self.shape),
                self.axis_names, axis_types=self.axis_types)
            return NamedSharding(mesh, self.spec)
        if len(devices) == 1:
            return jax.sharding.SingleDeviceSharding(devices[0])
        return NamedSharding(jax.sharding.Mesh(np.array(devices, dtype=object),
                                               (_DEVICE_AXIS,)), PartitionSpec())


def _picklable(tree):
    return jax.tree_util.tree_map(
        lambda x: _ShardingState(x) if isinstance(x, jax.sharding.Sharding) else x,
        tree, is_leaf=specs.is_spec_leaf)


def _restored(tree):
    return jax.tree_util.tree_map(
        lambda x: x.restore() if isinstance(x, _ShardingState) else x,
        tree, is_leaf=lambda x: specs.is_spec_leaf(x) or isinstance(x, _ShardingState))


def _unpickle_pjit(state):
    if state.get("version") != _dispatch_mod.PICKLE_VERSION:
        raise ValueError(
            f"Cannot unpickle a pmapkit.pjit function of pickle version "
            f"{state.get('version')!r}; this pmapkit reads version "
            f"{_dispatch_mod.PICKLE_VERSION}.")
    options = {}
    if not state.get("in_unspecified", False):
        options[state["in_what"]] = _restored(state["in"])
    if not state.get("out_unspecified", False):
        options[state["out_what"]] = _restored(state["out"])
    device_id = state.get("device_id")
    if device_id is not None:
        options["device"] = next(d for d in jax.devices() if d.id == device_id)
    return pjit(state["fun"], static_argnums=state["static_argnums"],
                donate_argnums=state["donate_argnums"],
                static_argnames=state.get("static_argnames"),
                keep_unused=state.get("keep_unused", False),
                inline=state.get("inline", False), **options)


def with_sharding_constraint(x, axis_resources):
    """Pin the sharding of ``x`` (a pytree) inside pjit (or jax.jit) to
    ``axis_resources`` (a pytree prefix of ``None | PartitionSpec |
    NamedSharding``) on the active mesh."""
    flat, tree = jax.tree_util.tree_flatten(x)
    eager = jp.trace_state_clean() and not any(isinstance(v, jp.Tracer) for v in flat)
    if eager:
        _refuse_eager_constraint(axis_resources, x)
    prepared = specs.prepare_axis_resources(axis_resources, "axis_resources")
    resources = specs.flatten_axis_resources("axis_resources", prepared, x, False)
    mesh = active_mesh()
    if mesh is None and any(not isinstance(r, jax.sharding.Sharding) for r in resources):
        raise _no_mesh_for_constraint(resources, flat)
    avals = [jp.get_aval(v) for v in flat]
    # Uneven splits are allowed here (jax's constraint pads), not for pjit's
    # own arguments and outputs.
    _check_against("with_sharding_constraint arguments", resources, avals, mesh, None,
                   even=False)
    outs = [jax.lax.with_sharding_constraint(v, _to_sharding(r, mesh))
            for v, r in zip(flat, resources)]
    return jax.tree_util.tree_unflatten(tree, outs)


_EAGER_CONSTRAINT = ("with_sharding_constraint() should only be called inside pjit() "
                     "(or another traced function such as jax.jit).")


def _refuse_eager_constraint(axis_resources, x):
    """Outside any trace a constraint has nothing to constrain: JAX 0.4 raised
    NotImplementedError; JAX 0.2/0.3, with no mesh, first found the axis
    undefined (a ValueError). Both are raised as one error then."""
    try:
        prepared = specs.prepare_axis_resources(axis_resources, "axis_resources")
        resources = specs.flatten_axis_resources("axis_resources", prepared, x, False)
    except (TypeError, ValueError):
        resources = ()
    if active_mesh() is None:
        undefined = _undefined_axis_text(resources)
        if undefined:
            raise EagerMeshUndefinedError(f"{undefined}{_EAGER_CONSTRAINT}")
    raise NotImplementedError(_EAGER_CONSTRAINT)


class EagerMeshUndefinedError(ValueError, NotImplementedError):
    """Eager ``with_sharding_constraint`` naming mesh axes with no mesh
    declared: the ValueError JAX 0.2/0.3 raised ("resource axis ... is
    undefined. Did you forget to declare the mesh?") and the
    NotImplementedError of JAX 0.4, so code written for either catches it."""


class MeshUndefinedError(ValueError, RuntimeError):
    """``with_sharding_constraint`` with mesh axes and no mesh: JAX 0.2/0.3
    raised a ValueError ("resource axis ... is undefined. Did you forget to
    declare the mesh?"), 0.4 a RuntimeError ("requires a non-empty mesh");
    code written for either catches this."""


def _undefined_axis_text(resources):
    """The classic "resource axis ... is undefined" sentence for the first
    spec naming a mesh axis, or ""."""
    for leaf in resources:
        axes = [a for a in getattr(leaf, "partitions", ()) or () if a is not None]
        names = [n for a in axes for n in (a if isinstance(a, tuple) else (a,))]
        if names:
            return (f"One of with_sharding_constraint arguments was given the "
                    f"resource assignment of {classic_spec_repr(leaf.user_spec)}, "
                    f"but resource axis "
                    f"{axis_names.shown(names[0])} is undefined. Did you forget to "
                    "declare the mesh? ")
    return ""


def _no_mesh_for_constraint(resources, flat):
    del flat
    return MeshUndefinedError(
        _undefined_axis_text(resources) + "with_sharding_constraint requires a "
        "non-empty mesh! Are you sure that it's defined at the call site?")
