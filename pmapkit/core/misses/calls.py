"""Call handling shared by pmap and pjit, on the miss path (pure Python):
argnum options, static/dynamic argument split, naming flat leaves in error
messages, abstract values, closing traced bodies and building the compiled
``DispatchFunction`` (the ``lower()`` objects are in ``pmapkit.core.aot.stages``).
"""
from __future__ import annotations

import collections
import functools
import inspect
import threading

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.core.keys import _cache_keys, caches
from pmapkit.core.programs import compiled_program
from pmapkit.core.programs import process_local  # noqa: F401  (registers programs spanning processes)
from pmapkit.core.hitpath._compiled import dispatch as _dispatch_mod

# numpy dtypes that canonicalize to themselves whatever jax_enable_x64 says; a
# numpy leaf of one of these signs like a device array of the same aval.
CANONICAL_HOST_DTYPES = tuple(np.dtype(d) for d in (
    np.float32, np.float16, np.int32, np.int16, np.int8, np.uint32, np.uint16,
    np.uint8, np.bool_, np.complex64, jax.numpy.bfloat16))


def one_or_many(value, kind, what, api):
    """``value`` (one ``kind`` or a collection of them) as a tuple; anything
    else is a TypeError naming the option."""
    items = (value,) if isinstance(value, kind) else value
    try:
        items = tuple(items)
    except TypeError:
        items = (value,)
    if not all(isinstance(v, kind) and type(v) is not bool for v in items):
        one, many = {int: ("an int", "ints"), str: ("a string", "strings")}[kind]
        raise TypeError(f"{api} {what} must be {one} or a collection of {many}, "
                        f"got {value!r}.")
    return items


def argnum_tuple(fun, argnums, what, api):
    """Normalize int | iterable of ints to a sorted tuple of non-negative ints."""
    if argnums is None:
        return ()
    nums = one_or_many(argnums, int, what, api)
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
    source = jp.fun_sourceinfo(fun)

    def flat_fun(*flat):
        dyn_args, kwargs = jax.tree_util.tree_unflatten(in_tree, flat)
        out = fun(*merge_static(static, statics, nargs, dyn_args), **kwargs)
        out_flat, out_tree = jax.tree_util.tree_flatten(out)
        check_returned_values(what, source, out, out_flat)
        out_trees.append(out_tree)
        return out_flat

    arg_names = tuple(describe.short(k) for k in range(len(avals)))
    debug = jp.DebugInfo(what, source, arg_names, None)
    jaxpr, _, consts = jp.trace_to_jaxpr_dynamic(
        jp.wrap_init(flat_fun, debug_info=debug), avals)
    return jaxpr, consts, out_trees[-1]


def check_returned_values(what, source, out, out_flat):
    """Every output leaf must be a JAX value; the error names the first
    that is not by its path in the output, as ``jax.jit`` words it."""
    for k, x in enumerate(out_flat):
        if isinstance(x, jp.Tracer):
            continue
        try:
            jp.shaped_abstractify(x)
        except TypeError:
            pass
        else:
            continue
        path = jax.tree_util.keystr(
            jax.tree_util.tree_flatten_with_path(out)[0][k][0])
        where = f" at output component {path}" if path else ""
        raise TypeError(
            f"function {source} traced for {what} returned a value of type "
            f"{type(x)}{where}, which is not a valid JAX type") from None


def abstractify(flat, describe, api, static_option):
    avals = []
    for k, x in enumerate(flat):
        check_host_value(x, describe(k), api)
        try:
            avals.append(jp.shaped_abstractify(x))
        except TypeError:
            raise TypeError(
                f"{api}: {describe(k)} of type {type(x)} is not a valid JAX "
                "type. Pass arrays, numpy arrays or Python scalars, or mark "
                f"the argument static with {static_option}.") from None
    return avals


def check_host_value(x, where, api):
    """Refuse, naming the argument (``where``), a host value JAX cannot
    take as it is: a Python int out of range of the integer type it becomes
    (int32 with jax_enable_x64 off: numpy's bare overflow message otherwise),
    a numpy array in non-native byte order (classic JAX's words for it, not
    a refusal that reads as if numpy arrays were refused)."""
    if type(x) is int:
        bits = 64 if jax.config.jax_enable_x64 else 32
        if not -(1 << (bits - 1)) <= x < (1 << (bits - 1)):
            raise OverflowError(
                f"{api}: {where} is the Python int {x}, too large to convert to "
                f"int{bits}{'' if bits == 64 else ' (jax_enable_x64 is off)'}. "
                "An overflow was encountered while parsing an argument to a "
                f"jitted computation, whose argument path is {where}. Pass it as "
                "a numpy array of a wider type (np.int64 with jax_enable_x64 on) "
                "or a float.")
    elif isinstance(x, (np.ndarray, np.generic)) and not x.dtype.isnative:
        raise TypeError(
            f"{api}: {where} has dtype {x.dtype.str} (non-native byte order). "
            f"Dtype {x.dtype.str} is not a valid JAX array type. Only arrays of "
            "numeric types are supported by JAX. numpy arrays are, in native "
            "byte order: convert it with x.astype(x.dtype.newbyteorder('=')).")


def check_not_deleted(flat):
    """JAX's own error for a deleted (donated, ``.delete()``d) input, raised
    on the miss path before anything is traced or compiled (the hit path
    raises the same)."""
    for x in flat:
        if isinstance(x, jp.ArrayImpl) and x.is_deleted():
            jp.raise_if_deleted(x)
        elif isinstance(x, jp.PRNGKeyArray) and x.is_deleted():
            jp.raise_if_deleted(x._base_array)


def close_jaxpr(jaxpr, consts):
    """``(ClosedJaxpr, hoisted)``: tracers of an enclosing trace closed over
    by the body cannot be baked in; they become leading explicit operands."""
    if any(isinstance(c, jp.Tracer) for c in consts):
        return jp.ClosedJaxpr(jp.convert_constvars_jaxpr(jaxpr), ()), list(consts)
    return jp.ClosedJaxpr(jaxpr, consts), []


class Prepared:
    """A validated pmap/pjit call: flat global args, the equation params,
    the input avals and the output tree."""

    __slots__ = ("flat_args", "params", "out_tree", "in_avals")

    def with_flat_args(self, flat_args):
        """The same traced call for another call's arguments."""
        new = Prepared()
        new.flat_args = flat_args
        new.params = self.params
        new.out_tree = self.out_tree
        new.in_avals = self.in_avals
        return new


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


def make_dispatch(fun, cache_miss, static, lower, reduce_fn, signature, *,
                  static_argnames=(), sign_shardings=False, context_state=None,
                  shared=None):
    """The compiled-dispatch callable of one user function, with the classic
    introspection attributes (functools.wraps metadata, __signature__).
    ``shared``: the ``SharedCaches`` of the wrappers of ``fun`` with the same
    parameters (``pmapkit.core.keys.wrapper_cache``)."""
    fn = _dispatch_mod.DispatchFunction(
        fun, cache_miss, static, compiled_program.LEAF_TYPES, CANONICAL_HOST_DTYPES,
        jp.tree_registry.flatten, jp.trace_context,
        jp.top_level_probe(), lower, reduce_fn,
        static_argnames=static_argnames, sign_shardings=sign_shardings,
        cache_size=caches.per_function_size(), describe=_cache_keys.describe,
        context_state=context_state, shared=shared)
    caches.register_function(fn)
    # functools.wraps metadata, written straight into the instance dict (a
    # wrapper built per call pays for this every call), without
    # update_wrapper's __dict__ merge: when ``fun`` is itself a pure-Python
    # DispatchFunction (pmap of pmap), its __dict__ holds its internals,
    # which must not overwrite ours.
    attrs = fn.__dict__
    for name in _WRAPPER_ASSIGNMENTS:
        value = getattr(fun, name, _ABSENT)
        if value is not _ABSENT:
            attrs[name] = value
    fun_attrs = getattr(fun, "__dict__", None)
    if fun_attrs:
        for name, value in fun_attrs.items():
            # Not over our own attributes (a custom_jvp's ``fun``, a wrapped
            # DispatchFunction's internals).
            if name not in attrs and not hasattr(type(fn), name):
                setattr(fn, name, value)
    attrs["__wrapped__"] = fun
    if signature is not None:
        attrs["__signature__"] = signature
    return fn


_WRAPPER_ASSIGNMENTS = functools.WRAPPER_ASSIGNMENTS
_ABSENT = object()


def make_compiled_call(cache_miss, name):
    """A dispatch-core function for a ``jax.stages.Compiled`` of ours: no
    static arguments (the lowering fixed them), no lowering, not picklable
    (as JAX's compiled objects)."""

    def not_lowerable(*args, **kwargs):
        raise TypeError(f"{name} is already compiled; it has no lower().")

    def not_picklable():
        raise TypeError(f"cannot pickle the compiled call of {name}; pickle "
                        "the pmapped/pjit'd function and compile again.")

    fn = _dispatch_mod.DispatchFunction(
        cache_miss, cache_miss, (), compiled_program.LEAF_TYPES, CANONICAL_HOST_DTYPES,
        jp.tree_registry.flatten, jp.trace_context, jp.top_level_probe(),
        not_lowerable, not_picklable, cache_size=caches.per_function_size(),
        describe=_cache_keys.describe)
    caches.register_function(fn)
    return fn


class TraceCache:
    """The traced bodies of one pmapped / pjit'd function, per signature.

    A call under a JAX transformation (grad, vmap, an outer jit...) skips the
    dispatch core's cache and runs the miss path every time. Re-tracing the
    body there would make a new jaxpr per call, so every program built from it
    (the jit wrapping our equation, the jvp/transpose/batched bodies JAX caches
    per jaxpr object) would be compiled again per call. Reusing the traced
    equation params makes all of those cache hits: one compile per signature,
    as with ``jax.jit``. Like ``jax.jit``, the function is assumed pure: what
    it reads from globals is fixed at its first trace for a signature.

    Keys (``_cache_keys.trace_key``) hold everything tracing depends on
    besides the function: the input pytree and avals, static values (with
    their types), the number of positional arguments, JAX's trace context,
    and ``extra`` (the mesh, the enclosing pmap axes, debug_nans...).
    Bodies that closed over tracers of an enclosing trace are never kept
    (those tracers belong to one trace).
    """

    def __init__(self, size=64):
        self._size = size
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key, prepared, n_flat):
        """Keep ``prepared`` unless its body hoisted tracers (more flat
        operands than the call's own leaves)."""
        if len(prepared.flat_args) != n_flat:
            return
        with self._lock:
            self._entries[key] = prepared
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self):
        with self._lock:
            self._entries.clear()


def prepare_cached(cache, prepare, static, args, kwargs, extra):
    """``prepare()`` (tracing the call) through ``cache``: a hit returns a
    copy of the cached prepared call carrying this call's flat arguments.
    The key (``_cache_keys.trace_key``) takes ``static``, ``args``,
    ``kwargs`` (the dynamic keyword arguments) and ``extra``."""
    try:
        keyed = _cache_keys.trace_key(static, args, kwargs, extra)
    except OverflowError:
        # A Python int out of range: ``prepare`` refuses it naming the
        # argument (``check_host_value``).
        keyed = None
    if keyed is None:
        return prepare()
    key, flat = keyed
    hit = cache.get(key)
    if hit is not None:
        return hit.with_flat_args(flat)
    prepared = prepare()
    cache.put(key, prepared, len(flat))
    return prepared


def check_donation_aliases(api, spec, prepared, args, kwargs, in_shardings):
    """Before anything runs: no donated array laid out as the program takes
    it (``in_shardings``, per flat input) may also be another argument of
    the call (see ``compiled_program.find_donated_alias``: one that moves is donated
    as a copy); the error names both positions as the user wrote them."""
    donated = tuple(i for i, d in enumerate(prepared.params["donated_invars"]) if d)
    if not donated:
        return
    flat = prepared.flat_args
    if compiled_program.find_donated_alias(flat, donated, in_shardings) is None:
        return
    _, dyn_positions, dyn_args = split_static(spec.static, args, spec.name)
    names = LeafNames(spec.signature, dyn_positions, dyn_args, kwargs)
    hoisted = len(flat) - len(jax.tree_util.tree_leaves((dyn_args, kwargs)))
    compiled_program.check_donated_aliases(
        flat, donated,
        lambda k: names(k - hoisted) if k >= hoisted else f"closed-over value {k}",
        api, in_shardings)
