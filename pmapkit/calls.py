"""Call handling shared by pmap and pjit, on the miss path (pure Python):
argnum options, static/dynamic argument split, naming flat leaves in error
messages, abstract values, closing traced bodies, the ``lower()`` objects
and building the compiled ``DispatchFunction``.
"""
from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit import lowering
from pmapkit._compiled import dispatch as _dispatch_mod

# numpy dtypes that canonicalize to themselves whatever jax_enable_x64 says; a
# numpy leaf of one of these signs like a device array of the same aval.
CANONICAL_HOST_DTYPES = tuple(np.dtype(d) for d in (
    np.float32, np.float16, np.int32, np.int16, np.int8, np.uint32, np.uint16,
    np.uint8, np.bool_, np.complex64, jax.numpy.bfloat16))


def argnum_tuple(fun, argnums, what, api):
    """Normalize int | iterable of ints to a sorted tuple of non-negative ints."""
    if argnums is None:
        return ()
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if type(n) is not int:
            raise TypeError(f"{api} {what} must be an int or a collection of "
                            f"ints, got {argnums!r}.")
    if any(n < 0 for n in nums):
        nparams = _positional_param_count(fun)
        if nparams is None:
            raise ValueError(
                f"{api} {what}={argnums!r} has negative entries, which need a "
                "function with a fixed number of positional parameters.")
        nums = tuple(n + nparams if n < 0 else n for n in nums)
        if any(n < 0 for n in nums):
            raise ValueError(f"{api} {what}={argnums!r} is out of range for a "
                             f"function of {nparams} positional parameters.")
    return tuple(sorted(set(nums)))


def _positional_param_count(fun):
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = [p.kind for p in params]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return None
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY,
                     inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)


def signature_of(fun):
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def split_static(static, args, fun_name):
    """``(static values, dynamic positions, dynamic args)``; static values
    must be hashable (they key the cache)."""
    static_set = set(static)
    statics = []
    for i in static:
        value = args[i]
        try:
            hash(value)
        except TypeError:
            raise ValueError(
                "Non-hashable static arguments are not supported. Static "
                f"argument (index {i}) of type {type(value)} for function "
                f"{fun_name} is non-hashable: {value!r}.") from None
        statics.append(value)
    dyn_positions = [i for i in range(len(args)) if i not in static_set]
    return statics, dyn_positions, tuple(args[i] for i in dyn_positions)


def merge_static(static, statics, nargs, dyn_args):
    """The full positional argument list from static and dynamic parts."""
    by_pos = dict(zip(static, statics))
    dyn = iter(dyn_args)
    return [by_pos[i] if i in by_pos else next(dyn) for i in range(nargs)]


def trace_user_fun(what, fun, static, statics, nargs, in_tree, avals, describe):
    """Trace the user's function on flat avals: ``(jaxpr, consts, out_tree)``.

    The flat inputs are the leaves of ``(dyn_args, kwargs)``; static values
    are put back at their positions. Call inside the context the body needs
    (axis names bound, no ambient mesh).
    """
    out_trees = []

    def flat_fun(*flat):
        dyn_args, kwargs = jax.tree_util.tree_unflatten(in_tree, flat)
        out = fun(*merge_static(static, statics, nargs, dyn_args), **kwargs)
        out_flat, out_tree = jax.tree_util.tree_flatten(out)
        out_trees.append(out_tree)
        return out_flat

    arg_names = tuple(describe.short(k) for k in range(len(avals)))
    debug = jp.DebugInfo(what, jp.fun_sourceinfo(fun), arg_names, None)
    jaxpr, _, consts = jp.trace_to_jaxpr_dynamic(
        jp.wrap_init(flat_fun, debug_info=debug), avals)
    return jaxpr, consts, out_trees[-1]


def abstractify(flat, describe, api, static_option):
    avals = []
    for k, x in enumerate(flat):
        try:
            avals.append(jp.shaped_abstractify(x))
        except TypeError:
            raise TypeError(
                f"{api}: {describe(k)} of type {type(x)} is not a valid JAX "
                "type. Pass arrays, numpy arrays or Python scalars, or mark "
                f"the argument static with {static_option}.") from None
    return avals


def close_jaxpr(jaxpr, consts):
    """``(ClosedJaxpr, hoisted)``: tracers of an enclosing trace closed over
    by the body cannot be baked in; they become leading explicit operands."""
    if any(isinstance(c, jp.Tracer) for c in consts):
        return jp.ClosedJaxpr(jp.convert_constvars_jaxpr(jaxpr), ()), list(consts)
    return jp.ClosedJaxpr(jaxpr, consts), []


class LeafNames:
    """Names flat argument leaves for error messages, computed only on demand.

    Leaves come from flattening ``(dyn_args, kwargs)``; ``dyn_positions[i]``
    is the original position of dynamic argument i.
    """

    def __init__(self, signature, dyn_positions, dyn_args, kwargs):
        self._signature = signature
        self._positions = dyn_positions
        self._tree = (dyn_args, kwargs)
        self._paths = None

    def _path(self, k):
        if self._paths is None:
            self._paths = [p for p, _ in
                           jax.tree_util.tree_flatten_with_path(self._tree)[0]]
        return self._paths[k]

    def _param_name(self, pos):
        if self._signature is not None:
            params = list(self._signature.parameters.values())
            if pos < len(params) and params[pos].kind in (
                    inspect.Parameter.POSITIONAL_ONLY,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
                return params[pos].name
        return None

    def short(self, k):
        path = self._path(k)
        if path[0].idx == 0:
            pos = self._positions[path[1].idx]
            head = self._param_name(pos) or f"args[{pos}]"
        else:
            head = str(path[1].key)
        return head + jax.tree_util.keystr(path[2:])

    def __call__(self, k):
        path = self._path(k)
        rest = jax.tree_util.keystr(path[2:])
        where = f" at {rest}" if rest else ""
        if path[0].idx == 0:
            pos = self._positions[path[1].idx]
            name = self._param_name(pos)
            named = f" '{name}'" if name else ""
            return f"argument{named} (positional argument {pos}){where}"
        return f"keyword argument '{path[1].key}'{where}"


class ProgramLowered:
    """What ``f.lower(*args)`` returns: the lowered program, its text, and
    ``compile()`` giving a callable that takes and returns the user's pytrees
    (static arguments included, as in the original call).

    ``prepared`` carries ``params``, ``in_avals`` and ``out_tree``.
    """

    def __init__(self, primitive, static, name, prepared):
        self._primitive = primitive
        self._static = static
        self._name = name
        self._prepared = prepared
        self.lowered = lowering.lower_program(primitive, prepared.params,
                                              prepared.in_avals)

    def as_text(self, *args, **kwargs):
        return self.lowered.as_text(*args, **kwargs)

    def compile(self):
        compiled = lowering.compile_lowered(self._primitive, self._prepared.params,
                                            self._prepared.in_avals, self.lowered)
        return ProgramCompiled(self._static, self._name, self._prepared, compiled)


class ProgramCompiled:
    """A compiled program for one signature, callable with pytrees."""

    def __init__(self, static, name, prepared, compiled):
        self._static = static
        self._name = name
        self._prepared = prepared
        self.compiled = compiled

    def as_text(self):
        return self.compiled.compiled.as_text()

    def __call__(self, *args, **kwargs):
        static = set(self._static)
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        flat, _ = jax.tree_util.tree_flatten((dyn, kwargs))
        avals = tuple(jp.shaped_abstractify(x) for x in flat)
        if avals != self._prepared.in_avals:
            raise TypeError(
                f"compiled {self._name} was lowered for argument types "
                f"{[a.str_short() for a in self._prepared.in_avals]}, got "
                f"{[a.str_short() for a in avals]}.")
        outs = self.compiled.run_flat(flat)
        return jax.tree_util.tree_unflatten(self._prepared.out_tree, outs)


def make_dispatch(fun, cache_miss, static, lower, reduce_fn, signature):
    """The compiled-dispatch callable of one user function, with the classic
    introspection attributes (functools.wraps metadata, __signature__)."""
    fn = _dispatch_mod.DispatchFunction(
        fun, cache_miss, static, lowering.LEAF_TYPES, CANONICAL_HOST_DTYPES,
        jp.tree_registry.flatten, jp.trace_context, jp.top_level_probe(),
        lower, reduce_fn)
    # functools.wraps metadata, without update_wrapper's __dict__ merge: when
    # ``fun`` is itself a pure-Python DispatchFunction (pmap of pmap), its
    # __dict__ holds its internals, which must not overwrite ours.
    functools.update_wrapper(fn, fun, updated=())
    for name, value in getattr(fun, "__dict__", {}).items():
        if name not in fn.__dict__:
            setattr(fn, name, value)
    fn.__wrapped__ = fun
    if signature is not None:
        fn.__signature__ = signature
    return fn
