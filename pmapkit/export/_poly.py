"""Shape-polymorphic argument specs: the classic ``poly_spec``/``poly_specs``
spellings over ``jax.export.symbolic_shape`` (JAX's shape polymorphism is
used as is, not re-implemented).

The seed's jax_export had no symbolic scopes: every spec built by
``poly_spec``/``poly_specs`` without an explicit ``scope`` shares one, so
``poly_spec(..., "b, 4")`` and ``poly_spec(..., "b")`` made by separate calls
name the same ``b``. ``symbolic_shape`` and ``symbolic_args_specs`` (the
scoped vintages) make a new scope per call, as they did, so specs from two
such calls mixed in one export are refused (jax.export's error).
"""
from __future__ import annotations

import warnings

import jax
import numpy as np
from jax import export as jax_export

from pmapkit import _jax_private as jp

_DEFAULT_SCOPE = jax_export.SymbolicScope()


def default_scope():
    """The symbolic scope shared by specs built without ``scope=``."""
    return _DEFAULT_SCOPE


def symbolic_shape(shape_spec, *, constraints=(), scope=None, like=None):
    """``jax.export.symbolic_shape``: without ``scope``, a new scope (holding
    ``constraints``, e.g. ``("b >= 4",)``) per call."""
    return _parse(shape_spec, constraints=constraints, scope=scope, like=like)


def _parse(shape_spec, *, constraints=(), scope=None, like=None):
    try:
        return jax_export.symbolic_shape(shape_spec, constraints=constraints,
                                         scope=scope, like=like)
    except (ValueError, TypeError):
        raise
    except Exception as exc:  # noqa: BLE001 - the parser's own (tokenize) errors
        raise ValueError(f"Cannot parse the shape specification {shape_spec!r}: "
                         f"{type(exc).__name__}: {exc}") from exc


def _check_shape_arg(arg_shape):
    if isinstance(arg_shape, (str, bytes)) or not hasattr(arg_shape, "__iter__"):
        raise TypeError("poly_spec: 'arg_shape' must be a sequence of ints or "
                        f"None, got {arg_shape!r}.")
    shape = tuple(arg_shape)
    for d in shape:
        if d is not None and not isinstance(d, (int, np.integer)):
            raise TypeError("poly_spec: 'arg_shape' entries must be ints or "
                            f"None (unknown), got {d!r} in {arg_shape!r}.")
    return shape


def poly_spec(arg_shape, arg_dtype, polymorphic_shape, *, scope=None):
    """A ``jax.ShapeDtypeStruct`` whose shape may hold dimension variables.

    Args:
      arg_shape: the shape, ``None`` where a dimension is only known from
        ``polymorphic_shape``.
      arg_dtype: the dtype.
      polymorphic_shape: ``None`` (all dimensions constant, from
        ``arg_shape``), or a spec string: comma-separated dimensions, each an
        integer, ``_`` (take it from ``arg_shape``), a dimension variable
        (``b``) or an expression (``2*b``); a trailing ``...`` stands for
        ``_`` in every remaining dimension; parentheses are optional
        (``"(b, 4)"`` or ``"b, 4"``).
      scope: a ``jax.export.SymbolicScope``; pmapkit's shared one by default.
    """
    shape = _check_shape_arg(arg_shape)
    if polymorphic_shape is None:
        if any(d is None for d in shape):
            raise ValueError(
                f"poly_spec: 'arg_shape' {arg_shape!r} has unknown (None) "
                "dimensions, so 'polymorphic_shape' must name them; got None.")
        return jax.ShapeDtypeStruct(shape, arg_dtype)
    if not isinstance(polymorphic_shape, str):
        raise TypeError("poly_spec: 'polymorphic_shape' must be a str or None, "
                        f"got {polymorphic_shape!r}.")
    try:
        dims = _parse(polymorphic_shape, scope=scope or _DEFAULT_SCOPE, like=shape)
    except ValueError as exc:
        raise ValueError(f"poly_spec: polymorphic_shape {polymorphic_shape!r} does "
                         f"not fit arg_shape {arg_shape!r}: {exc}") from None
    # jax.export's parser takes ``like`` as a hint only: "b" against (3, 4)
    # parses to a rank-1 shape. The classic poly_spec refused it.
    if len(dims) != len(shape):
        raise ValueError(
            f"poly_spec: polymorphic_shape {polymorphic_shape!r} has rank "
            f"{len(dims)} but arg_shape {tuple(arg_shape)!r} has rank "
            f"{len(shape)}; give one entry per dimension ('_' keeps a "
            "dimension of arg_shape, a trailing '...' all the remaining ones).")
    return jax.ShapeDtypeStruct(dims, arg_dtype)


def shape_and_dtype_jax_array(a):
    """``(shape, dtype)`` of an array or a ``jax.ShapeDtypeStruct``."""
    if isinstance(a, jax.ShapeDtypeStruct):
        return a.shape, a.dtype
    aval = jp.get_aval(a)
    return aval.shape, aval.dtype


def _specs_tree(args, shapes, scope, what):
    leaves, tree = jax.tree_util.tree_flatten(args)
    for k, leaf in enumerate(leaves):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                f"{what.split()[0]}: every leaf of 'args' needs .shape and .dtype; "
                f"leaf {k} is {type(leaf).__name__}.")
    if isinstance(args, tuple) and isinstance(shapes, list):
        shapes = tuple(shapes)  # the classic spelling passed a list for args
    try:
        flat_shapes = jp.broadcast_prefix(shapes, args, is_leaf=lambda x: x is None)
    except ValueError:
        (error, *_) = jp.prefix_errors(shapes, args, is_leaf=lambda x: x is None)
        raise error(what) from None
    for s in flat_shapes:
        if s is not None and not isinstance(s, str):
            raise TypeError(f"{what.split()[0]}: the leaves of '{what.split()[-1]}' "
                            f"must be str or None, got {s!r}.")
    specs = [poly_spec(leaf.shape, leaf.dtype, s, scope=scope)
             for leaf, s in zip(leaves, flat_shapes)]
    return jax.tree_util.tree_unflatten(tree, specs)


def poly_specs(args, polymorphic_shapes, *, scope=None):
    """A pytree of ``jax.ShapeDtypeStruct`` matching ``args`` (the seed's
    jax_export spelling).

    ``args`` is a pytree of arrays (or anything with ``.shape`` and
    ``.dtype``); ``polymorphic_shapes`` is ``None`` (all constant), one spec
    string for every argument, or a pytree prefix of ``args`` with
    ``str | None`` leaves (a list is accepted where ``args`` has a tuple).
    """
    return _specs_tree(args, polymorphic_shapes, scope,
                       "poly_specs polymorphic_shapes")


_UNSET = object()


def symbolic_args_specs(args, shapes_specs=_UNSET, constraints=_UNSET, scope=_UNSET, *,
                        polymorphic_shapes=_UNSET, symbolic_constraints=_UNSET,
                        symbolic_scope=_UNSET):
    """``poly_specs`` in the spelling of jax.export (``shapes_specs``,
    ``constraints``, ``scope``) and of jax.experimental.export 0.4.2x
    (``polymorphic_shapes``, ``symbolic_scope``, ``symbolic_constraints``; its
    third positional parameter was the scope). Without a scope the specs of
    one call share a new one (holding ``constraints``). Each spec must have
    the rank of its argument (jax.export would take a spec of another rank)."""
    if isinstance(constraints, jax_export.SymbolicScope):
        constraints, scope = _UNSET, constraints  # 0.4.2x: (args, shapes, scope)
    shapes_specs = _one_of("shapes_specs", shapes_specs,
                           "polymorphic_shapes", polymorphic_shapes, None)
    constraints = _one_of("constraints", constraints,
                          "symbolic_constraints", symbolic_constraints, ())
    scope = _one_of("scope", scope, "symbolic_scope", symbolic_scope, None)
    if scope is not None and constraints:
        raise ValueError("symbolic_args_specs: cannot use both 'scope' and "
                         "'constraints' (constraints belong to a scope).")
    if scope is None:
        scope = jax_export.SymbolicScope(tuple(constraints))
    return _specs_tree(args, shapes_specs, scope, "symbolic_args_specs shapes_specs")


def _one_of(name, value, old_name, old_value, default):
    """One parameter given by either vintage's name (not both)."""
    if value is not _UNSET and old_value is not _UNSET:
        raise TypeError(f"symbolic_args_specs got both {name!r} and {old_name!r} "
                        "(two vintages' names of one parameter); give one.")
    if value is not _UNSET:
        return value
    return default if old_value is _UNSET else old_value


def args_specs(args, polymorphic_shapes, get_shape_and_dtype=shape_and_dtype_jax_array):
    """jax.experimental.export's deprecated spelling of ``symbolic_args_specs``
    (it warns, as it did there)."""
    warnings.warn("export.args_specs is deprecated in favor of "
                  "export.symbolic_args_specs", DeprecationWarning, stacklevel=2)
    if get_shape_and_dtype is not shape_and_dtype_jax_array:
        args = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(*get_shape_and_dtype(a)), args)
    return symbolic_args_specs(args, polymorphic_shapes)
