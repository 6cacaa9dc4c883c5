"""Where the pmaps nested in a pmap body sit: the chain of their axes (the
inner axes of the top-level pmap's mesh), and on which dims of the body's
operands and results they map them (the layout of those values over the
inner axes), read from the body's jaxpr.
"""
from __future__ import annotations

from pmapkit import _jax_private as jp


def _sub_jaxpr(eqn):
    """The one inner jaxpr whose invars match the equation's operands, if any."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        if inner is None:
            continue
        inner = getattr(inner, "jaxpr", inner)
        if isinstance(inner, jp.Jaxpr) and len(inner.invars) == len(eqn.invars):
            return inner
    return None


def nested_pmap_axes(jaxpr, primitive):
    """The chain of pmaps nested in a pmap body: ``((name, size), ...)``,
    outermost first. Nested pmaps of one body must agree on that chain (they
    share the device mesh of the outer pmap)."""
    found = set()

    def visit(j):
        for eqn in j.eqns:
            if eqn.primitive is primitive:
                inner = eqn.params["jaxpr"].jaxpr
                found.add(((eqn.params["axis_name"], eqn.params["axis_size"]),
                           nested_pmap_axes(inner, primitive)))
            else:
                for sub in jp.jaxprs_in_params(eqn.params):
                    visit(sub)

    visit(jaxpr)
    if not found:
        return ()
    if len(found) > 1:
        shapes = sorted(str([axis, *rest]) for axis, rest in found)
        raise ValueError(
            "pmapkit: the pmaps nested in one pmap body must use the same axis "
            f"names and sizes, found {', '.join(shapes)}.")
    (axis, rest), = found
    return (axis, *rest)


# -- where the mapped axes of nested pmaps sit --------------------------------
# A top-level pmap whose body holds pmaps runs on a mesh with one axis per
# nesting level. Its operands and results are laid out over the inner mesh
# axes too, on the dims where the nested pmaps map theirs: one element per
# device instead of copies over the inner axes. These analyses only choose a
# layout; a dim they miss is replicated, never wrong.

# Primitives whose result has the shape and layout of their array operands.
_ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan", "atan2",
    "atanh", "cbrt", "ceil", "clamp", "convert_element_type", "copy", "copy_p",
    "cos", "cosh", "div", "eq", "erf", "erf_inv", "erfc", "exp", "exp2",
    "expm1", "floor", "ge", "gt", "imag", "integer_pow", "is_finite", "le",
    "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg",
    "nextafter", "not", "or", "pow", "real", "reduce_precision", "rem",
    "round", "rsqrt", "select_n", "sign", "sin", "sinh", "sqrt", "square",
    "stop_gradient", "sub", "tan", "tanh", "xor", "conj"})


def _shift_dims(dims, axis):
    """``dims`` of a per-device value, after ``axis`` is inserted into it."""
    return {name: d + (d >= axis) for name, d in dims.items()}


def mapped_dims(dims, axis, axis_name):
    """Inner dims of a global value mapped (or not, axis None) over ``axis_name``."""
    if axis is None:
        return dict(dims)
    return {**_shift_dims(dims, axis), axis_name: axis}


def nested_out_dims(jaxpr, primitive, in_dims=None):
    """Per outvar of a pmap body: ``{nested axis name: dim}``, the dims of the
    result on which pmaps nested in the body map their axes."""
    env = {}
    if in_dims is not None:
        for var, d in zip(jaxpr.invars, in_dims):
            if d:
                env[var] = d

    def read(atom):
        return {} if isinstance(atom, jp.Literal) else env.get(atom, {})

    for eqn in jaxpr.eqns:
        outs = None
        if eqn.primitive is primitive:
            body = eqn.params["jaxpr"].jaxpr
            name = eqn.params["axis_name"]
            inner = nested_out_dims(body, primitive)
            outs = [mapped_dims(d, ax, name)
                    for d, ax in zip(inner, eqn.params["out_axes"])]
        elif eqn.primitive.name in _ELEMENTWISE and len(eqn.outvars) == 1:
            shape = eqn.outvars[0].aval.shape
            for atom in eqn.invars:
                d = read(atom)
                if d and getattr(atom.aval, "shape", None) == shape:
                    outs = [d]
                    break
        else:
            sub = _sub_jaxpr(eqn)
            if sub is not None and len(sub.outvars) == len(eqn.outvars):
                outs = nested_out_dims(sub, primitive,
                                       [read(a) for a in eqn.invars])
        if outs:
            for var, d in zip(eqn.outvars, outs):
                if d:
                    env[var] = d
    return [read(a) for a in jaxpr.outvars]


def nested_in_dims(jaxpr, primitive):
    """Per invar of a pmap body: ``{nested axis name: dim}``, the dims on
    which the pmaps nested in the body map the operand (the first use that
    maps it wins)."""
    found = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive is primitive:
            inner = nested_in_dims(eqn.params["jaxpr"].jaxpr, primitive)
            name = eqn.params["axis_name"]
            uses = [mapped_dims(d, ax, name)
                    for d, ax in zip(inner, eqn.params["in_axes"])]
        else:
            sub = _sub_jaxpr(eqn)
            if sub is None:
                continue
            uses = nested_in_dims(sub, primitive)
        for atom, d in zip(eqn.invars, uses):
            if d and not isinstance(atom, jp.Literal) and atom not in found:
                found[atom] = d
    return [found.get(v, {}) for v in jaxpr.invars]


def dims_spec(dims, ndim):
    """``PartitionSpec`` entries for a value of rank ``ndim`` sharded over
    the mesh axes ``{name: dim}``; trailing unsharded dims are left out, as
    jax.pmap writes its specs (``P('i')``, not ``P('i', None)``)."""
    entries = [None] * ndim
    for name, d in dims.items():
        entries[d] = name
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)
