"""Lowering and compiling pmapkit's primitives for N devices.

``pmap_p`` lowers to an SPMD region whose mapped axis is manual: each device
runs the per-device body on its slice (a shard_map over the pmap's mesh,
nested in whatever program is being lowered). ``pjit_p`` lowers to its body
between sharding constraints on its operands and results (automatic SPMD
partitioning does the rest). ``compile_program`` is the one place pmapkit
compiles a top-level program of either; it keeps what the fast path needs.
"""
from __future__ import annotations

import collections
import contextlib
import math
import re
import threading
import warnings

import jax
import numpy as np
from jax.interpreters import mlir
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core import _cache_keys, caches, inflight, moves
from pmapkit.core.interning import intern_sharding
from pmapkit.core._compiled import dispatch as _dispatch_mod
from pmapkit.core._compiled import shard_arg as _shard_arg_mod
from pmapkit.core import manual_regions, special_values
from pmapkit.core.primitives import body_effects, no_mesh, pjit_p, pmap_p
# The transformation rules of pmap_p and pjit_p: every module that binds
# them imports this one, so they are in place before JAX sees either.
from pmapkit.core import rules as _rules  # noqa: F401,E402
from pmapkit.core.analysis import (dims_spec, mapped_dims, nested_in_dims,
                              nested_out_dims, nested_pmap_axes)
from pmapkit.core.specs import axis_spec

_shard_map = jax.shard_map

#: The leaf classes the dispatch core's hit path recognises.
LEAF_TYPES = _dispatch_mod.LeafTypes(jp.ArrayImpl, np.ndarray, np.generic,
                                     np.asarray, jp.ARRAY_SHARDING_ATTR,
                                     jp.raise_if_deleted, jp.PRNGKeyArray)


def is_extended(aval):
    """A dtype with a physical representation of its own (PRNG keys)."""
    return jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)


def is_float0(aval):
    return aval.dtype == jax.dtypes.float0


def pmap_mesh(params):
    """The device mesh of a top-level pmap: its own axis first, then the axes
    of the pmaps nested in its body (one device per program instance)."""
    inner = nested_pmap_axes(params["jaxpr"].jaxpr, pmap_p)
    names = (params["axis_name"], *[n for n, _ in inner])
    shape = (params["axis_size"], *[s for _, s in inner])
    devices = np.array(params["devices"], dtype=object).reshape(shape)
    return Mesh(devices, names)


def _enclosing_mesh(ctx, axis_name):
    mesh = getattr(ctx.module_context.axis_context, "mesh", None)
    if mesh is None or axis_name not in mesh.axis_names:
        raise ValueError(
            f"pmapkit: a nested pmap over axis {axis_name!r} can only be "
            "lowered inside the pmap that encloses it.")
    return mesh


class _Depth(threading.local):
    """A nesting depth on this thread."""

    def __init__(self):
        self.depth = 0


# Depth of pmapkit's own jits around a pmap.
_quiet_jits = _Depth()


@contextlib.contextmanager
def own_jit_of_pmap():
    """A block where pmapkit itself lowers pmaps in a jit (a pmap's own
    program, the jit an eager transformation binds it in, export): not the
    user's jit-of-pmap, so no warning."""
    _quiet_jits.depth += 1
    try:
        yield
    finally:
        _quiet_jits.depth -= 1


_MODULE_NAME_UNSAFE = re.compile(r"[^\w.-]")  # as MLIR module names sanitize


def _own_module_names(name):
    # The module names of ``_program``'s jit for a pmap named ``name`` or
    # anything it was derived from (``transpose(jvp(foo))``: foo, jvp(foo)...).
    names = set()
    while True:
        names.add(_MODULE_NAME_UNSAFE.sub("_", f"jit_pmap_{name}").rstrip("_"))
        head, sep, rest = name.partition("(")
        if not sep or not rest.endswith(")") or not head.isidentifier():
            return names
        name = rest[:-1]


def _warn_jit_of_pmap(ctx, name):
    # Classic pmap warned where a jit containing it was lowered (once per
    # compile), only when it used several devices; tracing alone
    # (make_jaxpr, an eager linearize) was silent. 0.4.x said "The jitted
    # function foo", later releases "The function jit(foo)": both are said.
    if _quiet_jits.depth:
        return
    module = str(ctx.module_context.module.operation.attributes["sym_name"]).strip('"')
    if module in _own_module_names(name):
        # The jit pmapkit binds the pmap in (``_program``), lowered by an
        # eager transformation outside any user jit (the transpose of eager
        # grad): pmapkit's own. (A user's jit named ``pmap_foo`` around a
        # pmap of ``foo`` is taken for it too, and does not warn.)
        return
    # The module is named jit_<sanitized function name>; the message names
    # the function as JAX's did: jit(foo), jit(<lambda>).
    fun = module[len("jit_"):] if module.startswith("jit_") else module
    fun = "<lambda>" if fun == "_lambda" else fun
    warnings.warn(
        f"The function jit({fun}) includes a pmap. Using jit-of-pmap can lead to "
        "inefficient data movement, as the outer jit does not preserve sharded "
        "data representations and instead collects input and output arrays onto "
        "a single device. Consider removing the outer jit unless you know what "
        "you're doing. See https://github.com/jax-ml/jax/issues/2926. Or use "
        "jax.shard_map instead of pmap under jit compilation. (The jitted "
        f"function {fun} includes a pmap: pmapped function {name}.)",
        UserWarning, stacklevel=2)


def checks_at_end(params):
    """Whether a top-level pmap's region ends with checks that may fail the
    run on every device (``manual_regions.register_checked_body``): several
    devices, no nested pmaps. pmapkit's runner then waits for each run and
    raises at the call (``_TokenedExecutable``)."""
    return (params["devices"] is not None and params["axis_size"] > 1
            and len(pmap_mesh(params).axis_names) == 1
            and manual_regions.ends_with_checks(params["jaxpr"].jaxpr))


def _pmap_lowering(ctx, *args, jaxpr, axis_name, axis_size, devices, in_axes,
                   out_axes, donated_invars, name):
    params = dict(jaxpr=jaxpr, axis_name=axis_name, axis_size=axis_size,
                  devices=devices)
    del donated_invars
    if devices is not None and axis_size > 1:
        _warn_jit_of_pmap(ctx, name)
    # A nested pmap (devices=None) runs on the mesh its enclosing pmap built.
    mesh = _enclosing_mesh(ctx, axis_name) if devices is None else pmap_mesh(params)
    if len(mesh.axis_names) > 1:
        # Nested pmaps: no effect token may enter their manual regions.
        jaxpr = manual_regions.nested_body(jaxpr)
    # An unmapped output (out_axes None) leaves the manual region as each
    # device's own value, with no collective: reading it gives the first
    # device's (classic pmap, and jax.pmap's out_specs P() without checks).
    in_specs = tuple(axis_spec(axis_name, ax) for ax in in_axes)
    out_specs = tuple(axis_spec(axis_name, ax) for ax in out_axes)

    def per_device(*xs):
        xs = [x if ax is None else jax.lax.squeeze(x, (ax,))
              for x, ax in zip(xs, in_axes)]
        outs = jp.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs)
        return tuple(o if ax is None else jax.lax.expand_dims(o, (ax,))
                     for o, ax in zip(outs, out_axes))

    shard_mesh = mesh

    def spmd(*xs):
        return _shard_map(per_device, mesh=shard_mesh, in_specs=in_specs,
                          out_specs=out_specs, check_vma=False,
                          axis_names={axis_name})(*xs)

    lower = mlir.lower_fun(spmd, multiple_results=True)
    if devices is None:
        # Nested: the enclosing pmap's axes are manual here; collectives over
        # them (axis_index of an outer axis) read that from the abstract mesh.
        manual = getattr(ctx.module_context.axis_context, "manual_axes", frozenset())
        shard_mesh = mesh.abstract_mesh.update_axis_types(
            {n: jax.sharding.AxisType.Manual for n in manual})
        with jax.sharding.use_abstract_mesh(shard_mesh):
            return lower(ctx, *args)
    with manual_regions.lowering_on(mesh):  # rules in nested regions read it
        return lower(ctx, *args)


mlir.register_lowering(pmap_p, _pmap_lowering)


def _pjit_lowering(ctx, *args, jaxpr, in_shardings, out_shardings,
                   donated_invars, name):
    del donated_invars, name

    def constrained(*xs):
        # A None sharding is left to the partitioner (pjit without in/out specs).
        xs = [x if s is None else jax.lax.with_sharding_constraint(x, s)
              for x, s in zip(xs, in_shardings)]
        outs = jp.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *xs)
        return tuple(o if s is None else jax.lax.with_sharding_constraint(o, s)
                     for o, s in zip(outs, out_shardings))

    return mlir.lower_fun(constrained, multiple_results=True)(ctx, *args)


mlir.register_lowering(pjit_p, _pjit_lowering)


class FastpathData:
    """What the dispatch core needs to run one signature without Python.

    ``in_shardings``/``host_specs`` are per kept input; ``kept`` maps kept
    input j to flat leaf index (None: all leaves kept, in order).
    """

    __slots__ = ("version", "executable", "kept", "in_shardings", "host_specs",
                 "out_handlers", "out_treedef", "shard_fallback", "is_equivalent",
                 "mover", "program", "donated", "signs_global", "n_inputs",
                 "host_call", "host_refusal")

    def __init__(self, program, out_treedef):
        self.version = _dispatch_mod.FASTPATH_VERSION
        self.program = program
        self.n_inputs = len(program.in_avals)  # flat leaves a call passes
        self.executable = program.executable
        self.kept = program.kept
        self.in_shardings = program.kept_in_shardings
        self.host_specs = program.kept_host_specs
        self.out_handlers = program.out_handlers
        self.out_treedef = out_treedef
        self.shard_fallback = program.shard_fallback
        self.is_equivalent = program.is_equivalent
        self.mover = program.mover()
        # Whether global arrays must sign apart from local ones of the same
        # shape (see the core).
        self.signs_global = program.signs_global
        # Flat indices of donated leaves (None: the program donates nothing,
        # and the hit path checks nothing).
        self.donated = program.donated
        # Runs calls carrying host values (see ``CompiledProgram.host_call``);
        # None: their values are put by ``host_specs``, for the reason
        # ``host_refusal`` names (one of ``HOST_ROUTE_REFUSALS``).
        self.host_call = None
        self.host_refusal = "not decided"

    def refuse_host_route(self, reason):
        """No calls through JAX's call, for ``reason`` (``HOST_ROUTE_REFUSALS``)."""
        if reason not in HOST_ROUTE_REFUSALS:
            raise ValueError(f"pmapkit internal error: unnamed host-route refusal {reason!r}")
        self.host_call = None
        self.host_refusal = reason


# The largest input (bytes) of a program whose calls carrying host values go
# through JAX's call (``CompiledProgram.host_call``). Its numpy inputs are
# copied first; measured on XLA:CPU (caller-thread CPU per call), the copy
# and JAX's call cost less than ``HostSpec.put``'s own copy and the hit path
# up to 256 KiB (~60 against ~73 µs there), more at 4 MiB (~187 against ~130).
HOST_ROUTE_MAX_BYTES = 1 << 18
# Why a signature's calls carrying host values are not run by JAX's call
# (``FastpathData.host_refusal``): the program's reasons
# (``CompiledProgram.host_route_refusal``), then the signature's (results
# placed otherwise, uncommitted, made under jax.disable_jit) and the Python
# path's (``run_flat``: jax_debug_nans/infs, a first call).
HOST_ROUTE_REFUSALS = (
    "several devices", "spans processes", "effects", "bounded collectives",
    "donation", "pruned inputs", "key or float0 values", "an input over 256 KiB",
    "JAX's program differs", "results placed otherwise", "uncommitted results",
    "jit disabled", "the Python path", "not decided")


def _nbytes(aval):
    return math.prod(aval.shape) * np.dtype(aval.dtype).itemsize


class CompiledProgram:
    """One compiled top-level program running one equation of ours (a pmap
    or a pjit), and everything the fast path derives from it, once.

    A program over several processes' devices is a subclass of the room
    above (``process_local.SpanningProgram``, registered with
    ``register_program_type``): it takes each process's local data."""

    #: Over devices of several processes (see ``register_program_type``).
    spans_processes = False
    #: Global arrays sign apart from local ones of the same shape.
    signs_global = False

    def __init__(self, primitive, params, in_avals, jax_compiled):
        self.primitive = primitive
        self.params = params
        self.in_avals = in_avals
        # JAX's compiled program (``jax.stages.Compiled``): runs calls with
        # effects, answers AOT queries.
        self.jax_compiled = jax_compiled
        self.executable, kept = jp.mesh_executable_parts(jax_compiled)
        self.has_effects = bool(_PROGRAMS[primitive].effects(params))
        # Its body ends with checks that may fail every device (a failed
        # host_callback.call): each run is waited for (see _TokenedExecutable).
        self.checks_at_end = primitive is pmap_p and checks_at_end(params)
        self.in_shardings, self.out_shardings = program_shardings(
            primitive, params, in_avals)
        if None in self.in_shardings or None in self.out_shardings:
            self.in_shardings, self.out_shardings = _chosen_shardings(
                self.in_shardings, self.out_shardings, jax_compiled)
        self.out_avals = tuple(primitive.abstract_eval(*in_avals, **params)[0])
        self.out_handlers = [
            jp.global_aval_to_result_handler(a, s, True)
            for a, s in zip(self.out_avals, self.out_shardings)]
        n = len(in_avals)
        self.kept = None if kept is None or len(kept) == n else tuple(sorted(kept))
        kept_idx = range(n) if self.kept is None else self.kept
        # The executable takes physical buffers: a key input's sharding there
        # is its physical one (what the hit path compares ``_base_array``s to).
        self.physical_in_shardings = tuple(
            intern_sharding(jp.physical_sharding(a, s)) if is_extended(a) else s
            for a, s in zip(in_avals, self.in_shardings))
        self.kept_in_shardings = tuple(self.physical_in_shardings[i] for i in kept_idx)
        self.host_specs = tuple(
            _host_spec(a, s) for a, s in zip(in_avals, self.in_shardings))
        self.kept_host_specs = tuple(self.host_specs[i] for i in kept_idx)
        self.donated = tuple(
            i for i, d in enumerate(params["donated_invars"]) if d) or None
        # Collectives on XLA:CPU: executions in flight are bounded (inflight).
        self.cpu_collectives = inflight.has_collectives(jax_compiled, {
            d for s in self.in_shardings + self.out_shardings if s is not None
            for d in s.device_set})

    def is_equivalent(self, x, i):
        """Whether device array ``x`` (the physical buffers, for a key input)
        of flat input ``i`` lays out exactly as the program takes it: the
        same devices in the same order, every dimension split alike, whatever
        mesh or axis names its sharding uses. Decided once per sharding
        object by the hit path, which then passes such arrays on as they are.
        """
        return same_layout(x, self.physical_in_shardings[i])

    def input_mover(self):
        """This program's ``moves.Mover`` (one per program: its plans are
        shared by every signature running it): the hit path's batched moves
        and ``shard_fallback``."""
        mover = self.__dict__.get("_mover")
        if mover is None:
            mover = self._mover = moves.Mover(
                self.in_shardings, self.physical_in_shardings, self.in_avals,
                self.host_specs, self.donated)
        return mover

    def mover(self):
        """What moves misplaced device arrays on the hit path; None for
        programs across processes, which take each process's data (their
        ``shard_fallback`` does)."""
        return None if self.spans_processes else self.input_mover()

    def host_call(self):
        """JAX's C++ call of this program (``jp.compiled_cpp_call``), to which
        the hit path hands calls carrying host values: it puts numpy arrays
        and scalars on the devices inside C++, where ``batched_device_put``
        makes a Python array per input first (about twice jit's cost of a
        numpy input). Made once per program; None where the program refuses
        the route (``host_route_refusal``)."""
        if "_host_call" not in self.__dict__:
            refusal = self.host_route_refusal()
            self._host_call = (None if refusal is not None
                               else jp.compiled_cpp_call(self.jax_compiled))
        return self._host_call

    def host_route_refusal(self):
        """Why calls of this program carrying host values never go to JAX's
        call (one of ``HOST_ROUTE_REFUSALS``), or None: they may (each
        signature still asks its results' placement, ``fastpath``, and each
        call its own leaves, ``CacheEntry._host_routable``). Decided once."""
        if "_host_refusal" not in self.__dict__:
            self._host_refusal = self._refuse_host_route()
        return self._host_refusal

    def _refuse_host_route(self):
        devices = set()
        for sharding in tuple(self.in_shardings) + tuple(self.out_shardings):
            devices |= set(sharding.device_set)
        avals = tuple(self.in_avals) + tuple(self.out_avals)
        checks = (
            # Over several devices JAX's call puts a numpy input slower than
            # HostSpec does (8 CPU devices: ~87 µs against ~57 µs a call).
            ("several devices", len(devices) != 1),
            # The hit path must run these programs itself:
            ("spans processes", self.spans_processes),
            ("effects", self.has_effects),
            ("bounded collectives", self.cpu_collectives),
            ("donation", self.donated is not None),
            # ``CacheEntry._host_routable`` reads leaf j as input j.
            ("pruned inputs", self.kept is not None),
            ("key or float0 values", any(is_extended(a) or is_float0(a) for a in avals)),
            # The hit path copies each numpy input it hands JAX's call
            # (``CacheEntry._host_snapshot``): for a large one, more than
            # HostSpec.put's single copy.
            ("an input over 256 KiB",
             any(not is_extended(a) and _nbytes(a) > HOST_ROUTE_MAX_BYTES
                 for a in self.in_avals)),
        )
        for reason, refused in checks:
            if refused:
                return reason
        if not self._jax_program_agrees():
            return "JAX's program differs"
        return None

    def _jax_program_agrees(self):
        """Whether JAX's compiled program takes and gives what the handlers
        expect (shardings, avals): its results stand for the hit path's."""
        compiled = self.jax_compiled
        outs = jax.tree_util.tree_leaves(compiled.out_info)
        out_shardings = jax.tree_util.tree_leaves(compiled.output_shardings)
        in_shardings = compiled.input_shardings[0]
        if (len(outs) != len(self.out_avals) or len(out_shardings) != len(outs)
                or len(in_shardings) != len(self.in_shardings)):
            return False
        for have, want in zip(tuple(in_shardings) + tuple(out_shardings),
                              tuple(self.in_shardings) + tuple(self.out_shardings)):
            if have is not want and have != want:
                return False
        for o, a in zip(outs, self.out_avals):
            if (tuple(o.shape) != a.shape or o.dtype != a.dtype
                    or bool(getattr(o, "weak_type", False)) != a.weak_type):
                return False
        return True

    def shard_fallback(self, x, i):
        """Python path for flat leaf ``i`` when the fast path cannot take it
        (``moves.Mover.fallback``)."""
        return self.input_mover().fallback(x, i)

    def run_flat(self, args):
        """Run with flat arguments (Python path); returns flat outputs,
        checked for NaNs/infinities under jax_debug_nans/infs."""
        outs = self._run_flat(args)
        if special_values.checks_on():
            special_values.check_outputs(self.primitive, self.params, args, outs)
        return outs

    def _run_flat(self, args):
        if self.donated is not None:
            check_donated_aliases(args, self.donated, in_shardings=self.in_shardings)
        entry = _dispatch_mod.CacheEntry()
        data = self.fastpath(None)
        # Not JAX's C++ call: under jax_debug_nans/infs (calls come here
        # then) it would check the outputs itself, with JAX's error, not ours.
        data.refuse_host_route("the Python path")
        entry.populate(data, LEAF_TYPES)
        if self.has_effects and not self.spans_processes:
            arrays = entry.shard(list(args))
            with inflight.bounded(self.cpu_collectives) as record, \
                    special_values.unchecked_by_jax():
                outs = record(list(self.jax_compiled(
                    *_all_inputs(arrays, self.kept, args, self))))
            return _checked_run(outs) if self.checks_at_end else outs
        if self.donated is not None:
            results = _dispatch_mod.execute_donating(entry, list(args))
            return results.consume_with_handlers(data.out_handlers)
        return list(entry.run(list(args)))

    def hit_executable(self):
        """What the hit path executes: the program's executable, or with
        effects (host callbacks) JAX's runner, which threads the effect
        tokens around each run (the hit path still skips tracing, signing
        and compiling)."""
        return _TokenedExecutable(self) if self.has_effects else self.executable

    def fastpath(self, out_treedef, out_shardings=None, committed=True):
        """The dispatch core's data for this program; ``out_shardings``
        replaces the results' shardings by equivalent ones (pjit's
        ``device=``: a one-device mesh's results as SingleDeviceShardings);
        ``committed=False`` makes results uncommitted (pjit run as jax.jit
        on uncommitted inputs)."""
        data = FastpathData(self, out_treedef)
        if out_shardings is not None or not committed:
            shardings = self.out_shardings if out_shardings is None else out_shardings
            data.out_handlers = [jp.global_aval_to_result_handler(a, s, committed)
                                 for a, s in zip(self.out_avals, shardings)]
        refusal = self.host_route_refusal()
        if refusal is None:
            if not committed:
                refusal = "uncommitted results"
            elif out_shardings is not None:
                # Results re-viewed (pjit's device=): JAX's call gives its own.
                refusal = "results placed otherwise"
            elif jp.jit_disabled():
                # Made at a miss, in the trace context whose cache keeps the
                # entry: under disable_jit (part of it) JAX's call refuses to run.
                refusal = "jit disabled"
        if refusal is None:
            data.host_call = self.host_call()
            data.host_refusal = None
        else:
            data.refuse_host_route(refusal)
        data.executable = self.hit_executable()
        if self.cpu_collectives:
            data.executable = inflight.BoundedExecutable(
                data.executable, tokens=data.executable is self.executable)
        return data


class _TokenedExecutable:
    """Stands in for the LoadedExecutable on the hit path of a program with
    effects: runs it through JAX's runner, which threads the effect tokens
    (callbacks in order; ``jax.effects_barrier``/``barrier_wait`` see it)."""

    __slots__ = ("_run", "_n", "_kept", "_checked")

    def __init__(self, program):
        self._run = jp.effectful_runner(program.jax_compiled)
        self._n = len(program.in_avals)
        self._kept = program.kept
        self._checked = program.checks_at_end

    def execute_sharded(self, arrays):
        if self._kept is not None:
            # The runner takes every input and skips pruned ones by position.
            full = [None] * self._n
            for j, i in enumerate(self._kept):
                full[i] = arrays[j]
            arrays = full
        outs = self._run(*arrays)
        return _Outputs(_checked_run(outs) if self._checked else outs)


def _checked_run(outs):
    """Wait for a run whose checks may fail it, and raise its error here: a
    failed run's effect token is failed too, and JAX would thread it into
    the next program with host callbacks (failing that one as well); it is
    dropped instead (the failed run's callbacks are all done)."""
    try:
        jax.block_until_ready(outs)
    except Exception:
        jp.clear_runtime_tokens()
        raise
    return outs


class _Outputs:
    """Outputs the runner already wrapped (with the program's own handlers)."""

    __slots__ = ("_outs",)

    def __init__(self, outs):
        self._outs = outs

    def consume_with_handlers(self, handlers):
        del handlers
        return self._outs


def same_layout(x, want):
    """Whether device array ``x`` is laid out as ``want`` places an array of
    its rank (same devices in the same order, same split)."""
    try:
        return bool(x.sharding.is_equivalent_to(want, x.ndim))
    except Exception:  # noqa: BLE001 - shardings JAX cannot compare
        return False


def find_donated_alias(flat, donated, in_shardings=None):
    """``(i, j)``: flat leaves ``i`` and ``j`` are one array, at least one of
    them donated; None when no donated array appears twice
    (``_dispatch.find_donated_alias``, the one rule, which the hit path
    asks too).

    With ``in_shardings`` (the program's, per flat input), only a donated
    array laid out as its position takes it counts: its own buffers would be
    donated. One that must move is donated as its moved copy
    (``moves.Mover``: always a copy), so the caller's array, wherever else
    it is passed, is never handed to the program to overwrite (as jax.pmap
    and jax.jit run such calls)."""
    in_place = None
    if in_shardings is not None:
        def in_place(x, i):
            return same_layout(x, in_shardings[i])
    return _dispatch_mod.find_donated_alias(flat, tuple(donated), LEAF_TYPES, in_place)


def check_donated_aliases(flat, donated, describe=None, api="pmapkit",
                          in_shardings=None):
    """Raise ``ArgumentAliasError`` naming both positions when a donated
    array is also another argument of the call: XLA would be handed one
    buffer as two inputs, one of which it may overwrite (JAX crashes).
    ``in_shardings``: see ``find_donated_alias``."""
    found = find_donated_alias(flat, donated, in_shardings)
    if found is None:
        return
    if describe is None:
        describe = lambda k: f"flat argument {k}"
    i, j = found
    which = ("both are" if i in donated and j in donated
             else f"{describe(i if i in donated else j)} is")
    raise _dispatch_mod.ArgumentAliasError(
        f"{api}: the same array is passed as {describe(i)} and as {describe(j)}, "
        f"and {which} donated (donate_argnums). A donated buffer is handed "
        "to the program to overwrite, so it cannot also be another argument "
        "of the same call. Pass a copy (e.g. jnp.copy(x)) in one position, "
        "or do not donate it.")


def _chosen_shardings(ins, outs, jax_compiled):
    """Fill the shardings left to the partitioner (None) from JAX's compiled
    program."""
    chosen_in = jax_compiled.input_shardings[0]
    chosen_out = jax_compiled.output_shardings
    ins = tuple(intern_sharding(c) if s is None else s for s, c in zip(ins, chosen_in))
    outs = tuple(intern_sharding(c) if s is None else s for s, c in zip(outs, chosen_out))
    return ins, outs


def _all_inputs(kept_arrays, kept, args, program):
    # jax's Compiled.__call__ wants every input, pruned or not, and logical
    # values: key arrays (not their physical buffers), float0 host arrays.
    if kept is None:
        full = list(kept_arrays)
    else:
        full = [program.shard_fallback(x, i) for i, x in enumerate(args)]
        for j, i in enumerate(kept):
            full[i] = kept_arrays[j]
    for i, (x, aval) in enumerate(zip(args, program.in_avals)):
        if is_extended(aval):
            sharding = program.in_shardings[i]
            full[i] = x if x.sharding == sharding else jax.device_put(x, sharding)
        elif is_float0(aval):
            full[i] = np.zeros(aval.shape, jax.dtypes.float0)
    return full


def _host_spec(aval, sharding):
    if is_extended(aval):
        return None  # no host value has a key dtype: keys come as key arrays
    devices = list(sharding.mesh.devices.flat)
    index_map = sharding.devices_indices_map(aval.shape)
    indices = [index_map[d] for d in devices]
    if is_float0(aval):
        return Float0HostSpec(aval, indices, devices, sharding)
    return _shard_arg_mod.HostSpec(
        aval, np.dtype(aval.dtype), indices, devices, sharding,
        jp.batched_device_put, jp.HOST_READ_DURING_CALL)


class Float0HostSpec:
    """Puts a float0 host value (zero-sized elements, e.g. the tangent of an
    integer) as what programs take for it: booleans, all False."""

    def __init__(self, aval, indices, devices, sharding):
        self.aval = jp.ShapedArray(aval.shape, np.dtype(np.bool_))
        self.dtype = jax.dtypes.float0
        self.indices = tuple(indices)
        self.devices = devices
        self.sharding = sharding

    def put(self, x):
        # float0 carries no data: what is put is made here, never x.
        zeros = np.zeros(x.shape, np.bool_)
        return jp.batched_device_put(self.aval, self.sharding,
                                     [zeros[idx] for idx in self.indices],
                                     self.devices, True)

    put_own = put


# -- the compile cache --------------------------------------------------------
# Compiled programs by (primitive, params, input avals), least recently used
# evicted beyond ``caches.programs_size()``.
_compile_cache: collections.OrderedDict = collections.OrderedDict()
# The same programs by what was lowered (``_program_identity``): equal
# programs traced from different function objects share one compile.
_by_program: collections.OrderedDict = collections.OrderedDict()
_compile_lock = threading.Lock()


def _trim(cache, size):
    while len(cache) > size:
        cache.popitem(last=False)


def _clear_program_caches():
    with _compile_lock:
        _compile_cache.clear()
        _by_program.clear()
        _shardings_memo.clear()
        _outer_jits.clear()


def _resize_program_caches(size):
    with _compile_lock:
        _trim(_compile_cache, size)
        _trim(_by_program, size)
        _trim(_shardings_memo, size)
        _trim(_outer_jits, size)


caches.register_process_cache(_clear_program_caches, _resize_program_caches)


class ProgramKind:
    """How to place one of our primitives as a top-level program: its global
    in/out shardings, and the effects that keep it off the fast path."""

    def __init__(self, shardings, effects, local_outputs, local_inputs_resized):
        self.shardings = shardings
        self.effects = effects
        # Across processes: results as this process's part (pmap) or global.
        self.local_outputs = local_outputs
        # Across processes: a local argument stands for a global one of
        # another shape, so local and global arrays of one shape are
        # different programs (pjit; a pmap's local and global arrays differ
        # in shape anyway).
        self.local_inputs_resized = local_inputs_resized


_PROGRAMS = {}


def program_kind(primitive):
    return _PROGRAMS[primitive]


def register_program(primitive, shardings, effects, local_outputs=False,
                     local_inputs_resized=False):
    _PROGRAMS[primitive] = ProgramKind(shardings, effects, local_outputs,
                                       local_inputs_resized)


# program_shardings per equation: a traced call reused from a trace cache
# (under grad, jvp, an outer jit) brings the same params dict every time.
_shardings_memo: collections.OrderedDict = collections.OrderedDict()
# Rooms above that watch programs' shardings (``watch_program_shardings``).
_shardings_watchers: list = []


def program_shardings(primitive, params, in_avals):
    key = _cache_keys.shardings_key(primitive, params, in_avals)
    hit = _shardings_memo.get(key)
    if hit is not None and hit[0] is params:  # (the id of a live dict)
        result = hit[1]
    else:
        ins, outs = _PROGRAMS[primitive].shardings(params, in_avals)
        result = tuple(map(intern_sharding, ins)), tuple(map(intern_sharding, outs))
        with _compile_lock:
            _shardings_memo[key] = (params, result)
            _trim(_shardings_memo, caches.programs_size())
    for watch in _shardings_watchers:
        watch(primitive, *result)
    return result


def watch_program_shardings(watch):
    """Call ``watch(primitive, in_shardings, out_shardings)`` for every
    program's shardings from now on (memoized or not), and now for those
    memoized (``known_program_shardings``: programs made before).
    ``pmapkit.legacy`` tells pmap results apart with it."""
    with _compile_lock:
        _shardings_watchers.append(watch)
    for known in known_program_shardings():
        watch(*known)


def known_program_shardings():
    """``(primitive, in_shardings, out_shardings)`` of the programs whose
    shardings are memoized now."""
    with _compile_lock:
        return [(key[0], *result) for key, (_, result) in _shardings_memo.items()]


def _pmap_shardings(params, in_avals):
    """Global shardings of a top-level pmap's operands and results: the
    mapped axis over the pmap's mesh axis, as jax.pmap places it, and the
    axes of nested pmaps over the inner mesh axes (one element per device)."""
    axis_name = params["axis_name"]
    mesh = pmap_mesh(params)
    body = params["jaxpr"].jaxpr
    out_avals = pmap_p.abstract_eval(*in_avals, **params)[0]

    def shardings(axes, inner_dims, avals):
        return tuple(
            NamedSharding(mesh, PartitionSpec(*dims_spec(
                mapped_dims(dims, ax, axis_name), a.ndim)))
            for ax, dims, a in zip(axes, inner_dims, avals))

    return (shardings(params["in_axes"], nested_in_dims(body, pmap_p), in_avals),
            shardings(params["out_axes"], nested_out_dims(body, pmap_p), out_avals))


register_program(pmap_p, _pmap_shardings,
                 lambda params: body_effects(params["jaxpr"], params["axis_name"]),
                 local_outputs=True)


register_program(pjit_p,
                 lambda params, in_avals: (params["in_shardings"], params["out_shardings"]),
                 lambda params: params["jaxpr"].effects, local_inputs_resized=True)


def _program(primitive, params):
    def program(*xs):
        return tuple(primitive.bind(*xs, **params))

    program.__name__ = f"{primitive.name.replace('pmapkit_', '')}_{params['name']}"
    return program


def _constrained_program(primitive, params, out_shardings):
    """``_program`` with its results constrained to their shardings: an
    enclosing jit reads its devices off equations' shardings, and the in
    shardings of this jit vanish with the operands that DCE drops (a pmap
    whose results do not depend on its inputs, e.g. ``lambda x: 0.``); the
    results' constraints stay (they are no-ops: the program lays its results
    out so already)."""
    def program(*xs):
        outs = primitive.bind(*xs, **params)
        return tuple(o if s is None else jax.lax.with_sharding_constraint(o, s)
                     for o, s in zip(outs, out_shardings))

    program.__name__ = f"{primitive.name.replace('pmapkit_', '')}_{params['name']}"
    return program


def bind_in_outer_trace(primitive, params, in_avals, args):
    """Bind one of our primitives under an outer JAX trace.

    The equation is wrapped in a ``jit`` whose in shardings name its
    devices: that is how an enclosing jit learns its device assignment (JAX
    reads shardings off jit equations, not off foreign primitives), and it
    moves operands onto those devices. Transformations see through it.
    """
    in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
    if _on_context_mesh(in_shardings + out_shardings):
        # Under jax.set_mesh the enclosing jit takes its devices from the
        # context mesh, and our lowering constrains operands and results
        # itself; a jit with shardings would refuse (eagerly, in its
        # transpose) the committed values JAX makes under that mesh. The
        # jit is cached per equation (eager grad/jvp under `with mesh` would
        # otherwise trace and compile it, and its transpose, on every call),
        # and committed operands placed elsewhere are moved first (jit
        # refuses them; pjit moves its operands).
        args = [_placed(x, s) for x, s in zip(args, in_shardings)]
        with own_jit_of_pmap():
            return list(_outer_jit(primitive, params, in_avals, named=False)(*args))
    if not jp.get_concrete_mesh().empty and not jp.staging_trace_active():
        # Eager transformations under jax.set_mesh (or `with pmapkit.Mesh`)
        # of a program off that mesh (a pmap): values made there are
        # committed to the context mesh, and JAX's own jit (its transpose
        # included) refuses to move committed operands, so our primitive is
        # bound directly; its rules and compiled impl place operands.
        return primitive.bind(*args, **params)
    args = [_placed(x, s) for x, s in zip(args, in_shardings)]
    # Eagerly (vmap, grad, linearize of a pmap) this jit is lowered here and
    # is pmapkit's own; under a user's jit it is only traced here.
    with _outside_ambient_mesh(), own_jit_of_pmap():
        return list(_outer_jit(primitive, params, in_avals)(*args))


def _on_context_mesh(shardings):
    context = jp.get_concrete_mesh()
    if context.empty:
        return False
    devices = set(context.devices.flat)
    return all(s is None or (isinstance(s, NamedSharding) and s.mesh == context)
               for s in shardings) and bool(devices)


def _outside_ambient_mesh():
    """pmapkit's programs name their devices in their own shardings; the mesh
    JAX holds in context (``jax.set_mesh``, entered by ``with pmapkit.Mesh``)
    must not leak into building them (a pmap's shard_map checks it against its
    own mesh)."""
    if jp.trace_state_clean():
        return jax.set_mesh(None)
    return _no_mesh_under_trace()


@contextlib.contextmanager
def _no_mesh_under_trace():
    # Also no concrete mesh: under it, JAX's eager transformations create
    # committed values (e.g. tangent zeros) that jit then refuses to move.
    with jp.concrete_mesh_context(jp.empty_concrete_mesh), no_mesh():
        yield


def _placed(x, sharding):
    # jit refuses a committed concrete array placed otherwise (arrays made
    # under jax.set_mesh are committed, and so are the primals of eager
    # grad/jvp there); pjit and pmap move their operands.
    if sharding is None:
        return x
    value = x
    while isinstance(value, jp.Tracer):  # eager jvp/linearize: their primal
        value = getattr(value, "primal", None)
    if (isinstance(value, jp.ArrayImpl) and value.committed
            and value.shape == tuple(x.shape)
            and not value.sharding.is_equivalent_to(sharding, value.ndim)):
        return jax.device_put(x, sharding)
    return x


_outer_jits: collections.OrderedDict = collections.OrderedDict()


def _outer_jit(primitive, params, in_avals, named=True):
    """One ``jax.jit`` per equation: a fresh one per call would be traced and
    compiled afresh each time (jit caches per function object), and so would
    everything JAX derives from its jaxpr under grad/vmap/jvp. ``named``: the
    jit names the program's shardings; without, it takes its devices from
    the context mesh (see ``bind_in_outer_trace``)."""
    key = _cache_keys.program_key(primitive, params, in_avals, named)
    with _compile_lock:
        hit = _outer_jits.get(key)
        if hit is not None:
            _outer_jits.move_to_end(key)
            return hit
    if named:
        # In shardings only: out_shardings would also be the in shardings of
        # the cotangents in JAX's transpose of this jit, which refuses a
        # committed cotangent placed otherwise (a replicated weight's, under
        # eager grad); the program constrains its results itself.
        in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
        jitted = jp.jit(_constrained_program(primitive, params, out_shardings),
                         in_shardings=in_shardings)
    else:
        jitted = jp.jit(_program(primitive, params))
    with _compile_lock:
        jitted = _outer_jits.setdefault(key, jitted)
        _trim(_outer_jits, caches.programs_size())
    return jitted


def lower_program(primitive, params, in_avals, keep_unused=False):
    """``jax.stages.Lowered`` of the top-level program running one equation;
    ``keep_unused``: the program keeps the inputs it does not use (pjit's
    option), else they are pruned."""
    in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
    donate = tuple(i for i, d in enumerate(params["donated_invars"]) if d)
    jitted = jp.jit(_program(primitive, params), in_shardings=in_shardings,
                     out_shardings=out_shardings, donate_argnums=donate,
                     keep_unused=keep_unused)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
               for a in in_avals]
    with _outside_ambient_mesh(), own_jit_of_pmap():
        return jitted.lower(*structs)


# Kinds of program registered by rooms above this one (the multi-process
# views): ``(applies(shardings), cls)``; the first that applies makes it.
_program_types = []


def register_program_type(applies, cls):
    """Programs whose shardings satisfy ``applies`` are made as ``cls`` (a
    ``CompiledProgram`` subclass)."""
    _program_types.append((applies, cls))


def make_program(primitive, params, in_avals, jax_compiled) -> CompiledProgram:
    """The ``CompiledProgram`` (or registered subclass) of a compiled lowering."""
    cls = CompiledProgram
    if _program_types:
        ins, outs = program_shardings(primitive, params, in_avals)
        shardings = [s for s in ins + outs if s is not None]
        cls = next((c for applies, c in _program_types if applies(shardings)), cls)
    return cls(primitive, params, in_avals, jax_compiled)


def compile_lowered(primitive, params, in_avals, lowered, *,
                    compiler_options=None, device_assignment=None) -> CompiledProgram:
    """Compile a ``lower_program`` result (``f.lower(...).compile(...)``)."""
    jax_compiled = lowered.compile(compiler_options, device_assignment=device_assignment)
    return make_program(primitive, params, in_avals, jax_compiled)


def compile_pmap(params, in_avals) -> CompiledProgram:
    return compile_program(pmap_p, params, in_avals)


def compile_program(primitive, params, in_avals, keep_unused=False) -> CompiledProgram:
    key = _cache_keys.program_key(primitive, params, in_avals, keep_unused)
    with _compile_lock:
        hit = _compile_cache.get(key)
        if hit is not None:
            _compile_cache.move_to_end(key)
            return hit
    lowered = lower_program(primitive, params, in_avals, keep_unused)
    # A body traced anew (a lambda made per call, a closure) that lowers to
    # the very program compiled before runs that program: one compile per
    # program, whichever function object it came from.
    same = _program_identity(primitive, params, in_avals, lowered)
    with _compile_lock:
        result = None if same is None else _by_program.get(same)
    if result is None:
        result = make_program(primitive, params, in_avals, lowered.compile())
    with _compile_lock:
        _compile_cache[key] = result
        _trim(_compile_cache, caches.programs_size())
        if same is not None and type(result) is CompiledProgram:
            _by_program[same] = result
            _by_program.move_to_end(same)
            _trim(_by_program, caches.programs_size())
    return result


def _program_identity(primitive, params, in_avals, lowered):
    """What the compiled program is (see ``jp.program_identity``) and what a
    ``CompiledProgram`` derives from its equation besides the module: every
    flat input's aval, donation and sharding (an unused input is pruned from
    the module), the outputs' shardings. None when it cannot be shared
    (effects). Only plain ``CompiledProgram``s are kept by it: a program
    kind of a room above (spanning processes) may hold more than that."""
    if _PROGRAMS[primitive].effects(params):
        return None
    same = jp.program_identity(lowered)
    if same is None:
        return None
    return _cache_keys.same_program_key(
        primitive, same, in_avals, params["donated_invars"],
        program_shardings(primitive, params, in_avals))


def _eager_impl(primitive):
    """Eager evaluation of one of our equations (e.g. eval_jaxpr of a jaxpr
    that holds one): compile once per params and input avals, then run."""

    def impl(*args, **params):
        program = compile_program(
            primitive, params, tuple(jp.shaped_abstractify(x) for x in args))
        return program.run_flat(args)

    return impl


pmap_p.def_impl(_eager_impl(pmap_p))
pjit_p.def_impl(_eager_impl(pjit_p))
