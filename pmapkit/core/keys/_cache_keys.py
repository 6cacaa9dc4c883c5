"""Every key of pmapkit's caches is built here, and the dispatch core's keys
are put into words here (``f._debug_cache_keys()``).

One rule runs through them: a static value is keyed with its type
(``static_entry``, defined in the dispatch core, which imports nothing of
pmapkit, and used here): ``1``, ``1.0`` and ``True`` are ``==`` but trace
differently. ARCHITECTURE.md lists every cache, what keys it, what bounds it
and what clears it.

The core keys a call by interned leaf-signature ids (see
``_dispatch.DispatchFunction._sign``) and reads its keys back with
``_keys.decode_key``, beside the signing; ``describe`` turns the parts
into the classic description: a header "The cache contains N elements:"
and, per element, its static arguments, the signature of every dynamic
leaf, keyword names, tree structures, the shardings the entry was compiled
for, and the parts of JAX's trace context that select a cache. Off the hot
path.
"""
from __future__ import annotations

import jax
import numpy as np

from pmapkit import _jax_private as jp
from pmapkit.core.hitpath._compiled import keys as _keys_mod


# -- building keys -------------------------------------------------------------

#: ``static_entry(where, value)``: a static argument's key (see the core).
static_entry = _keys_mod.static_entry


def same_static(a, b):
    """Whether two static values key alike (``static_entry``): the same type
    and equal (an ``__eq__`` that raises means not the same)."""
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an odd __eq__ just means "not the same"
        return False


def static_keywords_key(static_kw):
    """Static keyword arguments (a dict) as their sorted ``static_entry``s."""
    return tuple(sorted(static_entry(name, v) for name, v in static_kw.items()))


class Unkeyable(Exception):
    """A value with no hashable typed key."""


def typed_key(value):
    """A hashable key equal only for equal values of equal types, nested
    tuples, lists and dicts included (a wrapper's parameters); raises
    ``Unkeyable`` otherwise."""
    t = type(value)
    if t is str or value is None:
        return value  # equal only to itself: no type needed
    if t is int:
        return (int, value)
    if t is tuple or t is list:
        return (t, *[typed_key(v) for v in value])
    if t is dict:
        return (t, *[(typed_key(k), typed_key(v)) for k, v in value.items()])
    try:
        hash(value)
    except TypeError:
        raise Unkeyable from None
    if isinstance(value, tuple):
        # A namedtuple prefix, a PartitionSpec: equal as a value (with what
        # else it holds) and element by element with types.
        return (t, value, *[typed_key(v) for v in value])
    return (t, value)


def params_key(*params):
    """The ``wrapper_cache`` key of a wrapper's parameters (``typed_key`` of
    each), or None when one has none (that wrapper shares nothing)."""
    key = []
    append = key.append  # one lookup: a wrapper built per call keys every call
    try:
        for value in params:
            t = type(value)
            if t is str or value is None:
                append(value)
            elif t is int:
                append((int, value))
            elif (t is tuple or t is list) and (not value
                                                 or set(map(type, value)) == _DEVICES):
                # ``devices`` (or an empty tuple): Devices are equal only to
                # themselves.
                append((t, *value))
            else:
                append(typed_key(value))
    except Unkeyable:
        return None
    return tuple(key)


_DEVICES = {jax.Device}


def trace_key(static, args, kwargs, extra):
    """The ``calls.TraceCache`` key of a call, ``(key, flat dynamic leaves)``:
    the input pytree and avals, static values, the number of positional
    arguments, JAX's trace context and ``extra`` (what else the API's trace
    depends on). None when the call has no cheap key (an unhashable static,
    a leaf JAX cannot type): the miss path then traces and reports any
    error itself."""
    nargs = len(args)
    if static and static[-1] >= nargs:
        return None
    static_set = set(static)
    statics = tuple(static_entry(i, args[i]) for i in static)
    dyn = tuple(a for i, a in enumerate(args) if i not in static_set)
    flat, in_tree = jax.tree_util.tree_flatten((dyn, kwargs))
    try:
        avals = tuple(jp.shaped_abstractify(x) for x in flat)
        key = (in_tree, avals, statics, nargs, jp.trace_context(), extra)
        hash(key)
    except TypeError:
        return None
    return key, flat


def global_trace_key(in_tree, in_avals, in_shardings, static, statics, nargs,
                     static_kw, donated, mesh):
    """The key of pjit's traces of calls across processes
    (``_PjitSpec.global_traces``), or None when a part is unhashable."""
    key = (in_tree, tuple(in_avals), tuple(in_shardings), tuple(static),
           tuple(static_entry(i, v) for i, v in zip(static, statics)), nargs,
           static_keywords_key(static_kw), tuple(donated), mesh,
           jp.trace_context(), jp.debug_nans.value)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def program_key(primitive, params, in_avals, option):
    """The key of one equation's program (``lowering``'s compile cache and
    outer jits): its primitive, params, input avals and ``option`` (what
    else the cached object depends on: keep_unused, named shardings)."""
    return (primitive, tuple(sorted(params.items(), key=_first)), in_avals, option)


def shardings_key(primitive, params, in_avals):
    """``kinds.program_shardings``' memo key: the params dict by identity
    (a traced call reused from a trace cache brings the same dict; the memo
    keeps the dict alive and checks it is the same one)."""
    return (primitive, id(params), tuple(in_avals))


def same_program_key(primitive, module_identity, in_avals, donated, shardings):
    """``lowering``'s key of a compiled program by what was lowered: the
    module's identity (``jp.program_identity``) and what a program derives
    from its equation besides the module (every flat input's aval, donation
    and sharding: an unused input is pruned from the module; the outputs'
    shardings)."""
    return (primitive, module_identity, tuple(in_avals), tuple(donated), shardings)


def _first(item):
    return item[0]


# -- describing the core's keys ------------------------------------------------

# Trace-context entries worth naming on every element; the others are named
# only where they differ between cached contexts.
_ALWAYS_SHOWN = ("jax_enable_x64", "jax_default_device")


def describe(elements, sig_ids, static_argnums):
    """``elements``: ``(trace context, key, CacheEntry)`` triples;
    ``sig_ids``: the core's leaf signature -> id map."""
    signatures = {leaf_id: sig for sig, leaf_id in sig_ids.items()}
    names = jp.trace_context_names()
    if elements and all(_is_extended_context(ctx) for ctx, _, _ in elements):
        # pjit's selector: JAX's trace context and the jax.set_mesh mesh.
        elements = [(ctx[0] + (ctx[1],), key, entry) for ctx, key, entry in elements]
        if names is not None:
            names = tuple(names) + ("concrete mesh (jax.set_mesh)",)
    varying = _varying_context(elements, names)
    parts = [f"The cache contains {len(elements)} elements:"]
    for ctx, key, entry in elements:
        parts.append(_describe_element(ctx, key, entry, signatures,
                                       static_argnums, names, varying))
    return "\n\n".join(parts)


def _is_extended_context(ctx):
    return len(ctx) == 2 and isinstance(ctx[0], tuple)


def _describe_element(ctx, key, entry, signatures, static_argnums, names, varying):
    parts = _keys_mod.decode_key(key, bool(static_argnums))
    leaf_ids = parts["leaf_ids"]
    leaves = [_leaf_words(signatures, i) for i in leaf_ids]
    static_words = ", ".join(
        f"{pos}={value!r} ({tp.__name__})" for pos, tp, value in parts["statics"])
    static_kw_words = ", ".join(
        f"{name}={value!r} ({tp.__name__})" for name, tp, value in parts["static_keywords"])
    trees, kw_names = _trees(parts)
    lines = [
        f"static args (positional): {static_words or 'none'}",
        f"static args (keyword): {static_kw_words or 'none'}",
        "dynamic arg signatures (positional + keyword): " + (", ".join(leaves) or "none"),
        "dynamic arg keyword names: " + (", ".join(kw_names) or "none"),
        "dynamic arg treedefs: " + ("| ".join(str(t) for t in trees) or "none"),
        "dynamic arg shardings (compiled for; other placements are resharded, "
        "not recompiled): " + _shardings_words(entry, len(leaf_ids)),
        "state: " + _state_words(entry),
    ]
    lines += _context_lines(ctx, names, varying)
    return "\n".join(lines)


def _trees(parts):
    """``(per dynamic argument its tree structure, dynamic keyword names)``
    from ``decode_key``'s parts."""
    treedef = parts["treedef"]
    if treedef is None:
        leaf = jax.tree_util.tree_structure(0)
        trees = [leaf if form == "leaf" else jax.tree_util.tree_structure(
            [0] * form[1] if form[0] == "list" else (0,) * form[1])
            for form in parts["arguments"]]
        return trees + [leaf] * len(parts["keywords"]), parts["keywords"]
    try:
        shape = treedef.unflatten([0] * treedef.num_leaves)
    except Exception:  # noqa: BLE001 - a custom node that rejects placeholders
        return [treedef], []
    # A keyword call flattened (positional arguments, keyword arguments).
    dyn, kwargs = shape if parts["kwargs_marked"] else (shape, {})
    trees = [jax.tree_util.tree_structure(a) for a in dyn]
    trees += [jax.tree_util.tree_structure(v) for v in kwargs.values()]
    return trees, list(kwargs)


def _leaf_words(signatures, leaf_id):
    sig = signatures.get(leaf_id)
    if sig is None:
        return "<unknown signature>"
    if isinstance(sig, type):
        kind = "numpy" if issubclass(sig, np.generic) else "Python"
        return f"{kind} {sig.__name__} scalar"
    if isinstance(sig[0], str) and sig[0] == "placed":
        _, base, sharding = sig
        return f"{_leaf_words(signatures, base)} committed to {sharding}"
    if isinstance(sig[0], str) and sig[0] == "global":
        return f"{_leaf_words(signatures, sig[1])} (global array)"
    if len(sig) == 3 and isinstance(sig[0], type) and sig[0] is jp.PRNGKeyArray:
        _, impl, base = sig
        return f"key<{getattr(impl, 'name', impl)}> over {_leaf_words(signatures, base)}"
    if len(sig) == 3 and isinstance(sig[0], type):
        # A numpy array whose dtype JAX canonicalizes (e.g. float64 without x64).
        _, dtype, shape = sig
        return f"numpy.ndarray {_array_words(dtype, shape)}"
    dtype, shape, weak_type = sig
    return _array_words(dtype, shape) + (" weak_type" if weak_type else "")


def _array_words(dtype, shape):
    return f"{getattr(dtype, 'name', dtype)}[{','.join(str(d) for d in shape)}]"


def _shardings_words(entry, n_leaves):
    if not entry.ready:
        return "not yet known (compiling)"
    if entry.fallback or entry.in_shardings is None:
        return "not recorded (this entry runs on the Python path)"
    per_leaf = ["unused (pruned from the program)"] * n_leaves
    kept = range(len(entry.in_shardings)) if entry.kept is None else entry.kept
    for j, i in enumerate(kept):
        if i < n_leaves:
            per_leaf[i] = str(entry.in_shardings[j])
    if n_leaves > 1 and len(set(per_leaf)) == 1:
        return f"every leaf: {per_leaf[0]}"
    return ", ".join(per_leaf) or "none"


def _state_words(entry):
    if not entry.ready:
        return "compiling"
    if entry.failure is not None:
        return (f"failed ({entry.failure}); the next call with this signature "
                "compiles again")
    if entry.fallback:
        return "runs on the Python path (effects, host callbacks or an outer trace)"
    return "compiled (fast path)"


def _varying_context(elements, names):
    """Indices of trace-context entries that differ between cached contexts."""
    contexts = {id(ctx): ctx for ctx, _, _ in elements}
    if len(contexts) < 2:
        return ()
    ctxs = list(contexts.values())
    width = min(len(c) for c in ctxs)
    return tuple(i for i in range(width)
                 if any(c[i] != ctxs[0][i] for c in ctxs[1:])
                 and (names is None or i >= len(names)
                      or names[i] not in _ALWAYS_SHOWN))


def _context_lines(ctx, names, varying):
    lines = []
    if names is not None and len(names) == len(ctx):
        for name in _ALWAYS_SHOWN:
            if name in names:
                lines.append(f"{name}: {ctx[names.index(name)]}")
    for i in varying:
        label = names[i] if names is not None and i < len(names) else f"trace context[{i}]"
        lines.append(f"{label}: {ctx[i]!r} (differs between cached contexts)")
    return lines
