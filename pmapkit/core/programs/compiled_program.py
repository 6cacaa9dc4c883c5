"""One compiled top-level program of ours (``CompiledProgram``) and what the
dispatch core's fast path takes from it (``FastpathData``): shardings,
result handlers, host specs, the input mover, the host route decided once,
donated-alias checks."""
from __future__ import annotations

import functools
import math

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.core.hitpath._compiled import express as _express_mod
from pmapkit.core.hitpath._compiled import feed as _feed_mod
from pmapkit.core.hitpath._compiled import shard_arg as _shard_arg_mod
from pmapkit.core.programs import inflight, moves, special_values
from pmapkit.core.lowering import kinds
from pmapkit.core.lowering.lowering import checks_at_end, is_extended, is_float0
from pmapkit.core.rules.primitives import pmap_p
from pmapkit.core.sharding.interning import intern_sharding

#: The leaf classes the dispatch core's hit path recognises.
LEAF_TYPES = _feed_mod.LeafTypes(jp.ArrayImpl, np.ndarray, np.generic,
                                     np.asarray, jp.ARRAY_SHARDING_ATTR,
                                     jp.raise_if_deleted, jp.PRNGKeyArray,
                                     jp.array_readers())


class FastpathData(_feed_mod.FastpathData):
    """What the dispatch core needs to run one signature without Python:
    the contract ``_feed.FastpathData`` declares (its seventeen fields, no
    more), filled from one ``CompiledProgram``."""

    __slots__ = ()

    def __init__(self, program, out_treedef):
        super().__init__()
        self.version = _feed_mod.FASTPATH_VERSION
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
        self.signs_global = program.signs_global
        self.donated = program.donated
        # ``host_call`` and ``make_express`` stay None, and ``host_refusal``
        # "not decided", until ``CompiledProgram.fastpath`` decides.

    def refuse_host_route(self, reason):
        """No calls through JAX's call, for ``reason`` (``HOST_ROUTE_REFUSALS``)."""
        if reason not in HOST_ROUTE_REFUSALS:
            raise ValueError(f"pmapkit internal error: unnamed host-route refusal {reason!r}")
        self.host_call = None
        self.host_refusal = reason
        self.make_express = None


# The largest input (bytes) of a program whose calls carrying host values go
# through JAX's call (``CompiledProgram.host_call``). Its numpy inputs are
# copied first; measured on XLA:CPU (caller-thread CPU per call), the copy
# and JAX's call cost less than ``HostSpec.put``'s own copy and the hit path
# up to 256 KiB (~60 against ~73 µs there), more at 4 MiB (~187 against ~130).
HOST_ROUTE_MAX_BYTES = 1 << 18
# The largest host input (bytes) copied at the call on CPU devices; a larger
# one is put without a copy (jaxlib reads the caller's array in place) and
# the call returns once its program has run: a copy costs the caller's thread
# more than classic JAX's synchronous call of it (jax 0.4.30 on CPU: no copy,
# the program run before the call returns).
HOST_COPY_MAX_BYTES = HOST_ROUTE_MAX_BYTES
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


# Entries of JAX's trace context when its states were last classified (-1:
# never; None: some change could not be heard, so no express calls).
_watched_entries = -1


def watch_trace_context():
    """Hook every config state of JAX's trace context that JAX's C++ call
    does not key on (``jp.watch_trace_context_states``), so that a change of
    one makes every express call stale (``_express.new_express_epoch``);
    again when states were added. False: express calls are unsafe here."""
    global _watched_entries
    if _watched_entries is None:
        return False
    n = len(jp.trace_context())
    if n != _watched_entries:
        _watched_entries = jp.watch_trace_context_states(_express_mod.new_express_epoch)
        # A change before the hooks went unheard: nothing made before counts.
        _express_mod.new_express_epoch()
    return _watched_entries is not None and _watched_entries >= 0


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
        self.has_effects = bool(kinds.program_kind(primitive).effects(params))
        # Its body ends with checks that may fail every device (a failed
        # host_callback.call): each run is waited for (see _TokenedExecutable).
        self.checks_at_end = primitive is pmap_p and checks_at_end(params)
        self.in_shardings, self.out_shardings = kinds.program_shardings(
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
        self.donated = tuple(
            i for i, d in enumerate(params["donated_invars"]) if d) or None
        aliasing = self._host_arrays_aliased()
        self.host_specs = tuple(
            _host_spec(a, s, aliasing and not is_extended(a)
                       and _nbytes(a) > HOST_COPY_MAX_BYTES)
            for a, s in zip(in_avals, self.in_shardings))
        self.kept_host_specs = tuple(self.host_specs[i] for i in kept_idx)
        # Collectives on XLA:CPU: executions in flight are bounded (inflight).
        self.cpu_collectives = inflight.has_collectives(jax_compiled, {
            d for s in self.in_shardings + self.out_shardings if s is not None
            for d in s.device_set})

    def _host_arrays_aliased(self):
        """Whether this program's large host inputs are put without a copy
        (``HostSpec.aliases``; the hit path then waits for the results of a
        call passing one): on CPU devices only (elsewhere the put is the
        copy), never for a program that donates (it may write into what it
        is given), has effects (their runner takes the inputs as they are
        put) or spans processes (each takes its own data)."""
        if self.donated is not None or self.has_effects or self.spans_processes:
            return False
        devices = set()
        for sharding in self.in_shardings:
            if sharding is not None:
                devices |= set(sharding.device_set)
        return bool(devices) and all(d.platform == "cpu" for d in devices)

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

    def make_express(self, guard, slot, refuse):
        """A fresh express call of this program for the dispatch core
        (``_express.prime``): JAX's C++ call of it, its
        misses ``guard(slot, jax_miss)`` (``jp.express_cpp_call``); None
        where a change of JAX's trace context could go unheard."""
        if not watch_trace_context():
            return None
        return jp.express_cpp_call(self.host_call(), functools.partial(guard, slot), refuse)

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
        entry = _feed_mod.CacheEntry()
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
            results = _feed_mod.execute_donating(entry, list(args))
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
            if data.host_call is not None and watch_trace_context():
                data.make_express = self.make_express
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
    (``_feed.find_donated_alias``, the one rule, which the hit path
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
    return _feed_mod.find_donated_alias(flat, tuple(donated), LEAF_TYPES, in_place)


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
    raise _feed_mod.ArgumentAliasError(
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


def _host_spec(aval, sharding, aliases=False):
    if is_extended(aval):
        return None  # no host value has a key dtype: keys come as key arrays
    devices = list(sharding.mesh.devices.flat)
    index_map = sharding.devices_indices_map(aval.shape)
    indices = [index_map[d] for d in devices]
    if is_float0(aval):
        return Float0HostSpec(aval, indices, devices, sharding)
    return _shard_arg_mod.HostSpec(
        aval, np.dtype(aval.dtype), indices, devices, sharding,
        jp.batched_device_put, jp.HOST_READ_DURING_CALL, aliases)


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
