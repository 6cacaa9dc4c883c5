"""Compiling pmapkit's primitives as top-level programs: ``compile_program``
(the one place a top-level program of ours is compiled, cached by equation
and by what was lowered), ``lower_program``, the jit an equation is bound in
under an outer trace, and the eager impl rules."""
from __future__ import annotations

import collections
import contextlib
import threading

import jax
from jax.interpreters.mlir import ir
from jax.sharding import NamedSharding

from pmapkit import _jax_private as jp
from pmapkit.core.keys import _cache_keys, caches
from pmapkit.core.programs.compiled_program import CompiledProgram
from pmapkit.core.lowering.kinds import program_shardings
from pmapkit.core.lowering import kinds
from pmapkit.core.lowering.lowering import own_jit_of_pmap
from pmapkit.core.rules.primitives import no_mesh, pjit_p, pmap_p

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
        _outer_jits.clear()


def _resize_program_caches(size):
    with _compile_lock:
        _trim(_compile_cache, size)
        _trim(_by_program, size)
        _trim(_outer_jits, size)


caches.register_process_cache(_clear_program_caches, _resize_program_caches)


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


def lower_program(primitive, params, in_avals, keep_unused=False, labels=None):
    """``jax.stages.Lowered`` of the top-level program running one equation;
    ``keep_unused``: the program keeps the inputs it does not use (pjit's
    option), else they are pruned. ``labels``: ``(argument names, result
    paths)`` the module names its flat inputs and results by (the caller's,
    for ``f.lower(...)``), else the flat function's own."""
    in_shardings, out_shardings = program_shardings(primitive, params, in_avals)
    donate = tuple(i for i, d in enumerate(params["donated_invars"]) if d)
    program = _program(primitive, params)
    if labels is not None:
        arg_names, result_paths = labels
        program.__fun_debug_info__ = jp.DebugInfo(
            "jit", jp.fun_sourceinfo(program), tuple(arg_names), tuple(result_paths))
    jitted = jp.jit(program, in_shardings=in_shardings,
                    out_shardings=out_shardings, donate_argnums=donate,
                    keep_unused=keep_unused)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
               for a in in_avals]
    with _outside_ambient_mesh(), own_jit_of_pmap():
        lowered = jitted.lower(*structs)
    if labels is not None:
        _label_results(lowered, labels[1])
    return lowered


def _label_results(lowered, paths):
    """Name the module's results ``paths`` (``jax.result_info``), as classic
    JAX did: jax 0.10's jit names a flat function's results ``result[k]``."""
    module = lowered._lowering.stablehlo()
    with module.context:
        for op in module.body.operations:
            if "sym_name" not in op.attributes or ir.StringAttr(
                    op.attributes["sym_name"]).value != "main":
                continue
            results = [dict((named.name, named.attr) for named in ir.DictAttr(a))
                       for a in ir.ArrayAttr(op.attributes["res_attrs"])]
            named = [r for r in results if "jax.result_info" in r]
            if len(named) != len(paths):
                return
            for r, path in zip(named, paths):
                r["jax.result_info"] = ir.StringAttr.get(path)
            op.attributes["res_attrs"] = ir.ArrayAttr.get(
                [ir.DictAttr.get(r) for r in results])
            return


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
    if kinds.program_kind(primitive).effects(params):
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
