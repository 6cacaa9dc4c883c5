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
import threading

import jax
import numpy as np
from jax.interpreters import mlir
from jax.sharding import Mesh, NamedSharding

from pmapkit import _jax_private as jp
from pmapkit._compiled import dispatch as _dispatch_mod
from pmapkit._compiled import shard_arg as _shard_arg_mod
from pmapkit.primitives import body_effects, no_mesh, pjit_p, pmap_p
from pmapkit.analysis import nested_pmap_axes
from pmapkit.specs import axis_spec

_shard_map = jax.shard_map

#: The leaf classes the dispatch core's hit path recognises.
LEAF_TYPES = _dispatch_mod.LeafTypes(jp.ArrayImpl, np.ndarray, np.generic,
                                     np.asarray, jp.ARRAY_SHARDING_ATTR,
                                     jp.raise_if_deleted)


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


def _pmap_lowering(ctx, *args, jaxpr, axis_name, axis_size, devices, in_axes,
                   out_axes, donated_invars, name):
    params = dict(jaxpr=jaxpr, axis_name=axis_name, axis_size=axis_size,
                  devices=devices)
    del donated_invars, name
    # A nested pmap (devices=None) runs on the mesh its enclosing pmap built.
    mesh = _enclosing_mesh(ctx, axis_name) if devices is None else pmap_mesh(params)
    in_specs = tuple(axis_spec(axis_name, ax, a.ndim)
                     for ax, a in zip(in_axes, ctx.avals_in))
    out_specs = tuple(axis_spec(axis_name, ax, a.ndim)
                      for ax, a in zip(out_axes, ctx.avals_out))

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
                 "out_handlers", "out_treedef", "shard_fallback", "compiled")

    def __init__(self, compiled, out_treedef):
        self.version = _dispatch_mod.FASTPATH_VERSION
        self.compiled = compiled
        self.executable = compiled.executable
        self.kept = compiled.kept
        self.in_shardings = compiled.kept_in_shardings
        self.host_specs = compiled.kept_host_specs
        self.out_handlers = compiled.out_handlers
        self.out_treedef = out_treedef
        self.shard_fallback = compiled.shard_fallback


class CompiledProgram:
    """One compiled top-level program running one equation of ours (a pmap
    or a pjit), and everything the fast path derives from it, once."""

    def __init__(self, primitive, params, in_avals, lowered, compiled):
        self.primitive = primitive
        self.params = params
        self.in_avals = in_avals
        self.lowered = lowered
        self.compiled = compiled
        self.executable, kept = jp.mesh_executable_parts(compiled)
        self.has_effects = bool(_PROGRAMS[primitive].effects(params))
        self.in_shardings, self.out_shardings = program_shardings(
            primitive, params, in_avals)
        if None in self.in_shardings or None in self.out_shardings:
            self.in_shardings, self.out_shardings = _chosen_shardings(
                self.in_shardings, self.out_shardings, compiled)
        self.out_avals = tuple(primitive.abstract_eval(*in_avals, **params)[0])
        self.out_handlers = [
            jp.global_aval_to_result_handler(a, s, True)
            for a, s in zip(self.out_avals, self.out_shardings)]
        n = len(in_avals)
        self.kept = None if kept is None or len(kept) == n else tuple(sorted(kept))
        kept_idx = range(n) if self.kept is None else self.kept
        self.kept_in_shardings = tuple(self.in_shardings[i] for i in kept_idx)
        self.host_specs = tuple(
            _host_spec(a, s) for a, s in zip(in_avals, self.in_shardings))
        self.kept_host_specs = tuple(self.host_specs[i] for i in kept_idx)

    def shard_fallback(self, x, i):
        """Python path for flat leaf ``i`` when the fast path cannot take it."""
        sharding = self.in_shardings[i]
        aval = self.in_avals[i]
        if isinstance(x, jp.ArrayImpl):
            if x.is_deleted():
                jp.raise_if_deleted(x)
            if (x.sharding.is_equivalent_to(sharding, x.ndim)
                    and x.aval.dtype == aval.dtype):
                # Same devices and slices under another name: re-view, no copy.
                return x._rewrap_with_aval_and_sharding(x.aval, sharding)
            return jax.device_put(x, sharding)
        if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
            return self.host_specs[i].put(np.asarray(x))
        return jax.device_put(x, sharding)

    def run_flat(self, args):
        """Run with flat global arguments (Python path); returns flat outputs."""
        entry = _dispatch_mod.CacheEntry()
        entry.populate(FastpathData(self, None), LEAF_TYPES)
        arrays = entry.shard(list(args))
        if self.has_effects:
            return list(self.compiled(*_all_inputs(arrays, self.kept, args, self)))
        results = self.executable.execute_sharded(arrays)
        return results.consume_with_handlers(self.out_handlers)

    def fastpath(self, out_treedef):
        if self.has_effects or jp.process_count() > 1:
            return None
        return FastpathData(self, out_treedef)


def _chosen_shardings(ins, outs, compiled):
    """Fill the shardings left to the partitioner (None) from the compiled
    program."""
    chosen_in = compiled.input_shardings[0]
    chosen_out = compiled.output_shardings
    ins = tuple(intern_sharding(c) if s is None else s for s, c in zip(ins, chosen_in))
    outs = tuple(intern_sharding(c) if s is None else s for s, c in zip(outs, chosen_out))
    return ins, outs


def _all_inputs(kept_arrays, kept, args, compiled):
    # jax's Compiled.__call__ wants every input, pruned or not.
    if kept is None:
        return kept_arrays
    full = [compiled.shard_fallback(x, i) for i, x in enumerate(args)]
    for j, i in enumerate(kept):
        full[i] = kept_arrays[j]
    return full


def _host_spec(aval, sharding):
    devices = list(sharding.mesh.devices.flat)
    index_map = sharding.devices_indices_map(aval.shape)
    return _shard_arg_mod.HostSpec(
        aval, np.dtype(aval.dtype), [index_map[d] for d in devices], devices,
        sharding, jp.batched_device_put)


# -- the compile cache --------------------------------------------------------
_COMPILE_CACHE_SIZE = 512
_compile_cache: collections.OrderedDict = collections.OrderedDict()
_compile_lock = threading.Lock()


def _params_key(params, in_avals):
    return (tuple(sorted(params.items(), key=lambda kv: kv[0])), in_avals)


class ProgramKind:
    """How to place one of our primitives as a top-level program: its global
    in/out shardings, and the effects that keep it off the fast path."""

    def __init__(self, shardings, effects):
        self.shardings = shardings
        self.effects = effects


_PROGRAMS = {}


def register_program(primitive, shardings, effects):
    _PROGRAMS[primitive] = ProgramKind(shardings, effects)


def program_shardings(primitive, params, in_avals):
    ins, outs = _PROGRAMS[primitive].shardings(params, in_avals)
    return tuple(map(intern_sharding, ins)), tuple(map(intern_sharding, outs))


_interned_shardings = {}


def intern_sharding(sharding):
    """One object per distinct sharding, so an output fed back into a program
    that wants the same sharding passes the hit path's identity check."""
    return _interned_shardings.setdefault(sharding, sharding)


def _pmap_shardings(params, in_avals):
    axis_name = params["axis_name"]
    mesh = pmap_mesh(params)
    in_shardings = tuple(NamedSharding(mesh, axis_spec(axis_name, ax, a.ndim))
                         for ax, a in zip(params["in_axes"], in_avals))
    out_avals = pmap_p.abstract_eval(*in_avals, **params)[0]
    out_shardings = tuple(NamedSharding(mesh, axis_spec(axis_name, ax, a.ndim))
                          for ax, a in zip(params["out_axes"], out_avals))
    return in_shardings, out_shardings


register_program(pmap_p, _pmap_shardings,
                 lambda params: body_effects(params["jaxpr"], params["axis_name"]))


register_program(pjit_p,
                 lambda params, in_avals: (params["in_shardings"], params["out_shardings"]),
                 lambda params: params["jaxpr"].effects)


def _program(primitive, params):
    def program(*xs):
        return tuple(primitive.bind(*xs, **params))

    program.__name__ = f"{primitive.name.replace('pmapkit_', '')}_{params['name']}"
    return program


def bind_in_outer_trace(primitive, params, in_avals, args):
    """Bind one of our primitives under an outer JAX trace.

    The equation is wrapped in a ``jit`` whose in/out shardings name its
    devices: that is how an enclosing jit learns its device assignment (JAX
    reads shardings off jit equations, not off foreign primitives), and it
    moves operands onto those devices. Transformations see through it.
    """
    if not jp.get_concrete_mesh().empty and not jp.staging_trace_active():
        # Eager transformations under jax.set_mesh (or `with pmapkit.Mesh`):
        # values made there are committed, and JAX's own jit (its transpose
        # included) refuses to move committed operands, so our primitive is
        # bound directly; its rules and compiled impl place operands.
        return primitive.bind(*args, **params)
    in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
    if _on_context_mesh(in_shardings + out_shardings):
        # Under jax.set_mesh the enclosing jit takes its devices from the
        # context mesh, and our lowering constrains operands and results
        # itself; a jit with shardings would refuse (eagerly, in its
        # transpose) the committed values JAX makes under that mesh.
        return list(jax.jit(_program(primitive, params))(*args))
    args = [_placed(x, s) for x, s in zip(args, in_shardings)]
    with _outside_ambient_mesh():
        return list(jax.jit(_program(primitive, params), in_shardings=in_shardings,
                            out_shardings=out_shardings)(*args))


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


def lower_program(primitive, params, in_avals):
    """``jax.stages.Lowered`` of the top-level program running one equation."""
    in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
    donate = tuple(i for i, d in enumerate(params["donated_invars"]) if d)
    jitted = jax.jit(_program(primitive, params), in_shardings=in_shardings,
                     out_shardings=out_shardings, donate_argnums=donate)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
               for a in in_avals]
    with _outside_ambient_mesh():
        return jitted.lower(*structs)


def compile_lowered(primitive, params, in_avals, lowered) -> CompiledProgram:
    return CompiledProgram(primitive, params, in_avals, lowered, lowered.compile())


def compile_pmap(params, in_avals) -> CompiledProgram:
    return compile_program(pmap_p, params, in_avals)


def compile_program(primitive, params, in_avals) -> CompiledProgram:
    key = (primitive, _params_key(params, in_avals))
    with _compile_lock:
        hit = _compile_cache.get(key)
        if hit is not None:
            _compile_cache.move_to_end(key)
            return hit
    lowered = lower_program(primitive, params, in_avals)
    result = CompiledProgram(primitive, params, in_avals, lowered, lowered.compile())
    with _compile_lock:
        _compile_cache[key] = result
        while len(_compile_cache) > _COMPILE_CACHE_SIZE:
            _compile_cache.popitem(last=False)
    return result
