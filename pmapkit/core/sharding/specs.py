"""Spec parsing: pmap's in_axes / out_axes and pjit's axis resources.

Pure Python, run at decoration time and on cache misses only.
"""
from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.sharding.sharding_specs import ParsedPartitionSpec


# The name jax.pmap gives an unnamed axis: using the same one makes pmapkit's
# output shardings compare equal to jax.pmap's, so arrays pass between them
# uncopied (pmapkit.pmap, and the classic placement helpers, use it).
INTERNAL_AXIS_NAME = "_internal_pmap_axis_name"


def check_axes_leaves(axes, what):
    """Classic check at decoration time: leaves must be ints or None."""
    leaves = jp.tree_registry.flatten(axes, lambda x: x is None)[0]
    for leaf in leaves:
        if leaf is not None and type(leaf) is not int:
            raise TypeError(
                f"pmap {what} must be an int, None, or (nested) container with "
                f"those types as leaves, but got {axes}.")


def flatten_in_axes(in_axes, dyn_args, kwargs, in_tree):
    """Broadcast the user's in_axes prefix over the flat (args, kwargs) leaves.

    Keyword arguments are always mapped over axis 0, as in classic pmap.
    """
    try:
        return tuple(jp.broadcast_prefix((in_axes, 0), (dyn_args, kwargs),
                                         is_leaf=lambda x: x is None))
    except ValueError:
        errors = jp.prefix_errors((in_axes, 0), (dyn_args, kwargs))
        detail = str(errors[0]("pmap in_axes").args[0]) if errors else ""
        # Classic pmap's explanation, the keyword-argument rule included.
        msg = ("pmap in_axes specification must be a tree prefix of the tuple "
               f"of positional arguments, got in_axes={in_axes!r} for arguments "
               f"with structure {in_tree}.\n{detail}\n\nThe 'full pytree' here "
               "is the tuple of arguments passed positionally to the pmapped "
               "function, and the value of `in_axes` must be a tree prefix of "
               "that tuple. But it was not a prefix.")
        if kwargs:
            msg += ("\n\nWhen some arguments are passed by keyword to the "
                    "pmapped function, they are not included in the comparison "
                    "to `in_axes`. Instead, each argument passed by keyword is "
                    "mapped over its leading axis. See the description of "
                    "`in_axes` in the `pmap` docstring.")
        msg += ("\n\nCheck that the value of the `in_axes` argument to `pmap` "
                "is a tree prefix of the tuple of arguments passed positionally "
                "to the pmapped function.")
        raise ValueError(msg) from None


def flatten_out_axes(out_axes, out_tree, out_shape_tree):
    try:
        return tuple(jp.broadcast_prefix(out_axes, out_shape_tree,
                                         is_leaf=lambda x: x is None))
    except ValueError:
        errors = jp.prefix_errors(out_axes, out_shape_tree)
        detail = str(errors[0]("pmap out_axes").args[0]) if errors else ""
        raise ValueError(
            "pmap out_axes specification must be a tree prefix of the "
            f"function's output, got out_axes={out_axes!r} for an output with "
            f"structure {out_tree}.\n{detail}\n\nThe full pytree is the output "
            "of the pmapped function. Ensure that the `out_axes` argument to "
            "`pmap` is a pytree prefix of the pmapped function's output.") from None


def axis_spec(axis_name, axis):
    """PartitionSpec of a global array whose dim ``axis`` is the mapped one,
    written as jax.pmap writes it (``P(None, 'i')``, no trailing Nones), so
    shardings built from it compare equal to jax.pmap's."""
    if axis is None:
        return PartitionSpec()
    return PartitionSpec(*[None] * axis, axis_name)


def normalize_axis(axis, ndim):
    return axis + ndim if axis is not None and axis < 0 else axis


# -- pjit: axis resources ------------------------------------------------------
def is_spec_leaf(x):
    return x is None or isinstance(x, (PartitionSpec, jax.sharding.Sharding))


def prepare_axis_resources(tree, what, tupled_args=False):
    """Validate a pytree-prefix of ``None | PartitionSpec | Sharding`` leaves
    at decoration time; PartitionSpecs become ParsedPartitionSpecs.

    A ``Sharding`` (0.4-era pjit: ``NamedSharding``, ``SingleDeviceSharding``)
    carries its devices, so it needs no mesh context. With ``tupled_args`` (a
    prefix of the positional-arguments tuple) a list means the same as a
    tuple, as in classic pjit; elsewhere (outputs) a list is a list, to match
    a function returning one."""
    if tupled_args and isinstance(tree, list):
        tree = tuple(tree)
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_spec_leaf)
    parsed = [check_sharding_leaf(leaf, what)
              if isinstance(leaf, jax.sharding.Sharding) else
              ParsedPartitionSpec.from_user_input(leaf, what) for leaf in leaves]
    return jax.tree_util.tree_unflatten(treedef, parsed)


def check_sharding_leaf(sharding, what):
    """A ``Sharding`` leaf pjit can place values with: a NamedSharding (its
    spec parsed as classic pjit parsed specs), a SingleDeviceSharding, or
    another kind that replicates over its devices."""
    if isinstance(sharding, NamedSharding):
        ParsedPartitionSpec.from_user_input(sharding.spec, what)
        return sharding
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return sharding
    if sharding.is_fully_replicated:
        return sharding
    raise TypeError(
        f"{what} leaf specifications are expected to be PartitionSpec "
        "instances, None, a NamedSharding or a SingleDeviceSharding (or a "
        f"Sharding replicated over its devices), but got {sharding!r}")


def flatten_axis_resources(what, tree, full, tupled_args):
    """Broadcast a prepared prefix over the flat leaves of ``full``.

    With ``tupled_args`` (inputs), a bare spec applies to every positional
    argument, as classic pjit's in_axis_resources did.
    """
    if tupled_args and not isinstance(tree, tuple):
        tree = (tree,) * len(full)
    is_leaf = lambda x: x is None or isinstance(x, (ParsedPartitionSpec, jax.sharding.Sharding))  # noqa: E731
    try:
        return tuple(jp.broadcast_prefix(tree, full, is_leaf=is_leaf))
    except ValueError:
        shown = jax.tree_util.tree_map(
            lambda p: p.user_spec if isinstance(p, ParsedPartitionSpec) else p,
            tree, is_leaf=is_leaf)
        msg = (f"pjit {what} specification must be a tree prefix of the "
               f"{'positional arguments tuple' if tupled_args else 'output'} "
               f"of the pjit-decorated function, got {shown!r} for a value with "
               f"structure {jax.tree_util.tree_structure(full)}.")
        if tupled_args:
            msg += _classic_prefix_hint(what, tree, full, is_leaf)
        msg += _prefix_detail(f"pjit {what}", tree, full, is_leaf)
        raise ValueError(msg) from None


def _prefix_detail(name, tree, full, is_leaf):
    """JAX's description of where the prefix does not fit (the root named
    'tree root', as the classic releases printed it)."""
    try:
        errors = jp.prefix_errors(tree, full, is_leaf=is_leaf)
    except Exception:  # noqa: BLE001 - the summary above stands alone
        return ""
    if not errors:
        return ""
    detail = str(errors[0](name).args[0])
    return "\n" + detail.replace(f"key path\n    {name}\n",
                                  f"key path\n    {name} tree root\n")


def _classic_prefix_hint(what, tree, full, is_leaf):
    """0.4 pjit's explanation of a positional prefix that does not fit."""
    hint = (f" pjit {what} specification must be a tree prefix of the "
            "positional arguments tuple passed to the `pjit`-decorated "
            f"function. In particular, pjit {what} must either be a None, "
            "a PartitionSpec, or a tuple of length equal to the number of "
            "positional arguments.")
    if type(tree) is not tuple:
        hint += f" But {what} is not a tuple: got {type(tree)} instead."
    elif len(tree) != len(full):
        hint += (f" But pjit {what} is the wrong length: got a tuple or list of "
                 f"length {len(tree)} for an args tuple of length {len(full)}.")
    else:
        return ""
    if len(full) == 1:
        try:
            jp.broadcast_prefix((tree,), full, is_leaf=is_leaf)
        except ValueError:
            pass
        else:
            hint += (f" Given the corresponding argument being passed, it looks "
                     f"like {what} might need to be wrapped in a singleton tuple.")
    return hint
