"""``jax.stages`` objects for pmapkit programs.

``f.lower(*args)`` of a pmapkit ``pmap`` or ``pjit`` returns a
``ProgramLowered``: a real ``jax.stages.Lowered`` over the very lowering
pmapkit compiles, whose argument info has the caller's pytree (static
arguments left out, ``donated`` flags from ``donate_argnums``) and whose
output info has the caller's output pytree. Its ``compile()`` returns a
``ProgramCompiled``, a real ``jax.stages.Compiled``: JAX's compiled program
answers the queries (text, analyses, shardings, runtime executable), and a
call runs pmapkit's program on the flattened arguments, resharding inputs
placed otherwise just as calling ``f`` does.
"""
from __future__ import annotations

import jax

from pmapkit import _jax_private as jp
from pmapkit.core.keys import _cache_keys
from pmapkit.core.misses import calls, committed_inputs
from pmapkit.core.programs import compiling
from pmapkit.core.programs import process_local


def lower_prepared(primitive, api, spec, prepared, args, kwargs, *, strict=None,
                   no_kwargs=False, keep_unused=False, placement=None):
    """The ``ProgramLowered`` of one validated call.

    ``prepared`` is what the api's ``_prepare`` made of ``(args, kwargs)``;
    ``spec`` supplies ``static``, ``name`` and ``signature``. ``strict``:
    per flat input, whether a committed argument must already have its
    sharding (``committed_inputs``); ``no_kwargs``: the call form takes no
    keyword arguments (pjit with in_axis_resources), so the compiled one
    refuses them as classic pjit's did; ``keep_unused``: the program keeps
    the inputs it does not use (pjit's option); ``placement(flat_args)``:
    ``(out_shardings or None, committed)`` of a call's results, where they
    differ from the program's (see ``place_results``).
    """
    statics, dyn_positions, dyn_args = calls.split_static(spec.static, args, spec.name)
    in_tree = jax.tree_util.tree_structure((dyn_args, kwargs))
    if in_tree.num_leaves != len(prepared.in_avals):
        # Only a body closing over values traced by an enclosing JAX
        # transformation gains operands; those have no value to compile for.
        raise TypeError(
            f"{api}-lowered function {spec.name} closes over values of an "
            "enclosing JAX transformation (tracers), so it cannot be lowered "
            "ahead of time; call .lower() outside jit/grad/vmap, or pass those "
            "values as arguments.")
    describe = calls.LeafNames(spec.signature, dyn_positions, dyn_args, kwargs)
    arg_names = tuple(describe.short(k) for k in range(in_tree.num_leaves))
    call_static = _StaticCall(spec.static, statics, len(args))
    return ProgramLowered(primitive, api, spec.name, prepared, in_tree,
                          arg_names, call_static, strict, no_kwargs, keep_unused,
                          placement)


def place_results(outs, out_shardings, committed):
    """A program's flat results placed as a call's ``placement`` says:
    re-viewed with ``out_shardings`` (equivalent ones: a one-device mesh's
    results as SingleDeviceShardings), committed or not (a mesh-less pjit
    on uncommitted inputs runs as jax.jit, whose results are uncommitted)."""
    if out_shardings is None:
        return outs
    if committed:
        return [o._rewrap_with_aval_and_sharding(o.aval, s)
                for o, s in zip(outs, out_shardings)]
    return [jp.global_aval_to_result_handler(o.aval, s, False)(
                [shard.data for shard in o.addressable_shards])
            for o, s in zip(outs, out_shardings)]


def _plain_aval(aval):
    return jp.ShapedArray(aval.shape, aval.dtype, weak_type=aval.weak_type)


class _StaticCall:
    """The static arguments a lowering was made for; pmapkit's earlier
    compiled objects took the full argument list, so a call that repeats the
    same static values at their positions is still accepted."""

    __slots__ = ("positions", "values", "nargs")

    def __init__(self, positions, values, nargs):
        self.positions = tuple(positions)
        self.values = tuple(values)
        self.nargs = nargs

    def strip(self, args):
        if not self.positions or len(args) != self.nargs:
            return args
        for pos, value in zip(self.positions, self.values):
            given = args[pos]
            if not _cache_keys.same_static(given, value):
                return args
        skip = set(self.positions)
        return tuple(a for i, a in enumerate(args) if i not in skip)


class ProgramLowered(jax.stages.Lowered):
    """``jax.stages.Lowered`` of a pmapkit pmap or pjit for one signature."""

    def __init__(self, primitive, api, name, prepared, in_tree, arg_names,
                 call_static, strict=None, no_kwargs=False, keep_unused=False,
                 placement=None):
        # The module's labels, as classic JAX's lowering wrote them: each
        # result by its path in the output pytree ("[0]", "[1]['s']", "" for
        # a bare array), each input by the caller's name ("x", "d['a']").
        out_paths = tuple(jax.tree_util.keystr(path) for path, _ in
                          jax.tree_util.tree_flatten_with_path(
                              prepared.out_tree.unflatten(
                                  [0] * prepared.out_tree.num_leaves))[0])
        flat_lowered = compiling.lower_program(primitive, prepared.params,
                                              prepared.in_avals, keep_unused,
                                              labels=(arg_names, out_paths))
        donated = tuple(i for i, d in enumerate(prepared.params["donated_invars"]) if d)
        args_info = jp.make_args_info(in_tree, prepared.in_avals, donated)
        super().__init__(flat_lowered._lowering, args_info, prepared.out_tree)
        self._flat_lowered = flat_lowered
        self._primitive = primitive
        self._api = api
        self._name = name
        self._params = prepared.params
        self._flat_in_avals = prepared.in_avals
        self._arg_names = arg_names
        self._call_static = call_static
        # What pmapkit.export rebuilds the program from.
        self._prepared = prepared
        self._static = call_static.positions
        self._strict = strict
        self._no_kwargs = no_kwargs
        self._placement = placement

    @property
    def in_avals(self):
        """The ``(args, kwargs)`` pytree of plain ``ShapedArray``s, as
        classic ``Lowered.in_avals`` gave (jax 0.10's carry the program's
        abstract mesh in their shardings); ``Compiled.in_avals`` too."""
        return _plain_in_avals(self.args_info)

    def compile(self, compiler_options=None, *, device_assignment=None):
        program = compiling.compile_lowered(
            self._primitive, self._params, self._flat_in_avals,
            self._flat_lowered, compiler_options=compiler_options,
            device_assignment=device_assignment)
        executable = ProgramExecutable(
            program, jp.DebugInfo(self._api, self._name, self._arg_names, None),
            self._call_static, self._strict, self._no_kwargs, self._placement)
        compiled = ProgramCompiled(executable, self.args_info, self.out_tree)
        compiled._no_kwargs = self._no_kwargs
        return compiled


def _plain_in_avals(args_info):
    return jax.tree_util.tree_map(lambda info: _plain_aval(info._aval), args_info)


class CompiledKwargsError(TypeError, NotImplementedError):
    """Keyword arguments to a compiled pjit that takes none: classic pjit's
    NotImplementedError, jax.jit's TypeError."""


class ProgramCompiled(jax.stages.Compiled):
    """``jax.stages.Compiled`` of a pmapkit pmap or pjit: called with the
    dynamic arguments of the lowering call (a pytree or aval mismatch is a
    TypeError listing the mismatches), it runs pmapkit's program through the
    dispatch core (``ProgramExecutable.create_cpp_call``)."""

    def __init__(self, executable, args_info, out_tree):
        super().__init__(executable, [], args_info, out_tree)

    @property
    def in_avals(self):
        """Equal to the ``Lowered``'s (as jax.jit's are)."""
        return _plain_in_avals(self.args_info)


class ProgramExecutable(jp.StagesExecutable):
    """The executable behind ``ProgramCompiled``.

    Queries go to JAX's executable of the same compiled program (so
    ``input_shardings``, ``cost_analysis``, ``runtime_executable`` ... are
    JAX's own); calls check the avals with JAX's message, then run through
    pmapkit's ``CompiledProgram``.
    """

    def __init__(self, program, debug_info, call_static, strict=None, no_kwargs=False,
                 placement=None):
        self._program = program
        self._placement = placement
        self._mesh_executable = program.jax_compiled._executable
        self._debug_info = debug_info
        self._call_static = call_static
        self._strict = strict
        self._no_kwargs = no_kwargs

    def __getattr__(self, name):
        # in_avals, out_avals, _in_shardings, _kept_var_idx, _xla_in_layouts,
        # ...: the attributes jax.stages.Compiled reads off its executable.
        if name.startswith("__") or name in ("_program", "_mesh_executable",
                                             "_call_static", "_strict", "_no_kwargs",
                                             "_placement"):
            raise AttributeError(name)
        return getattr(self._mesh_executable, name)

    @property
    def program(self):
        """pmapkit's ``CompiledProgram`` this executable runs."""
        return self._program

    def xla_extension_executable(self):
        return self._mesh_executable.xla_extension_executable()

    def call(self, *args_flat):
        program = self._program
        avals = [jp.shaped_abstractify(x) for x in args_flat]
        if program.spans_processes:
            # Across processes local arguments are given at their local size.
            avals = [_global_view(x, a, s)
                     for x, a, s in zip(args_flat, avals, program.in_shardings)]
        try:
            jp.check_arg_avals_for_call(program.in_avals, avals, self._debug_info)
        except TypeError as exc:
            if self._debug_info.traced_for == "pmap":
                exc = _with_jax_pmap_names(exc, program.in_avals, avals, self._debug_info)
            raise _with_classic_type_mismatch(exc, program.in_avals, avals) from None
        committed_inputs.check(args_flat, program.in_shardings, self._strict,
                               self._debug_info.arg_names.__getitem__, compiled=True)
        outs = program.run_flat(list(args_flat))
        if self._placement is not None:
            outs = place_results(outs, *self._placement(args_flat))
        return outs

    def create_cpp_call(self, params):
        """What ``Compiled.__call__`` calls: a dispatch-core function, so a
        compiled call signs its arguments and runs on the hit path like
        calling the pmap/pjit itself. A miss checks the call as JAX does
        (pytree, avals: JAX's TypeErrors) and runs ``call``."""
        program = self._program
        call_static = self._call_static
        no_kwargs, strict = self._no_kwargs, self._strict
        name = self._debug_info.func_name

        def compiled_call(*args, **kwargs):
            dynamic = call_static.strip(args)
            try:
                outs, _, _ = jax.stages.Compiled.call(params, *dynamic, **kwargs)
            except TypeError as exc:
                if kwargs and no_kwargs:
                    # JAX's pytree message, then classic pjit's.
                    raise CompiledKwargsError(
                        f"{exc}\nfunction was compiled by a transformation that "
                        "does not support keyword arguments, but called with "
                        f"keyword arguments: {', '.join(sorted(kwargs))}") from None
                _raise_with_classic_tree_mismatch(exc, params.in_tree, dynamic, kwargs)
                raise
            if dynamic is not args:
                # Static values repeated at their positions (accepted, as by
                # pmapkit's earlier compiled objects): they would sign as
                # leaves, so this form stays on the Python path.
                return outs, None
            out_shardings, committed = None, True
            if self._placement is not None:
                out_shardings, committed = self._placement(
                    jax.tree_util.tree_leaves((dynamic, kwargs)))
            fastpath = program.fastpath(params.out_tree, out_shardings, committed)
            return outs, committed_inputs.guard(fastpath, committed_inputs.leaf_check(
                program.in_shardings, strict, name, compiled=True))

        return calls.make_compiled_call(compiled_call, self._debug_info.func_name)


def _raise_with_classic_tree_mismatch(exc, compiled_tree, args, kwargs):
    """A call whose argument pytree is not the compiled one: JAX's message
    (the wording since jax 0.4.26), then the line earlier releases raised,
    "function compiled for <tree>, called with <tree>", which code and
    tests written for them match."""
    called_tree = jax.tree_util.tree_structure((args, kwargs))
    if called_tree == compiled_tree:
        return
    raise TypeError(f"{exc}\nfunction compiled for {compiled_tree}, called "
                    f"with {called_tree}") from None


# jax.pmap's compiled objects named the arguments of a type mismatch as the
# user did through JAX 0.7.0 (as pmapkit does); two later releases named
# them otherwise, and code and tests written for those match their own:
# (the header's words, the name of flat argument k).
_JAX_PMAP_ARGUMENT_NAMES = (
    ("named by flat position, as JAX 0.10's jax.pmap names them",
     lambda k: f"flat_args[{k}]"),
    ("unnamed, as the C++ jax.pmap of JAX 0.7.2 reported them", lambda k: ""),
)


def _with_jax_pmap_names(exc, want, got, debug_info):
    """A pmap's compiled call with arguments of other types: JAX's message
    naming the arguments as the user did, then the same mismatches named
    as later jax.pmap releases named them."""
    parts = [str(exc)]
    for words, name in _JAX_PMAP_ARGUMENT_NAMES:
        renamed = jp.DebugInfo(debug_info.traced_for, debug_info.func_name,
                               tuple(name(k) for k in range(len(want))), None)
        try:
            jp.check_arg_avals_for_call(want, got, renamed)
        except TypeError as again:
            mismatches = str(again).split("mismatches are:\n", 1)[-1]
            parts.append(f"Argument types differ ({words}). The mismatches are:\n"
                         f"{mismatches}")
    return TypeError("\n".join(parts))


def _with_classic_type_mismatch(exc, want, got):
    """JAX's TypeError for arguments of other types, then the lines classic
    pjit's compiled objects raised (code and tests of those releases match
    them)."""
    for w, g in zip(want, got):
        if (w.shape, w.dtype) != (g.shape, g.dtype):
            return TypeError(
                f"{exc}\nComputation was compiled for different input types and "
                "called with different types. One of the mismatches is:\n"
                f"Compiled with:\n  {w.str_short()}\ncalled with:\n  {g.str_short()}")
    return exc


def _global_view(x, aval, sharding):
    """The aval a program spanning processes sees for argument ``x``: a
    global array's own, a local value's at its global size."""
    if process_local.is_global(x):
        return aval
    return aval.update(shape=process_local.global_shape(aval.shape, sharding))
