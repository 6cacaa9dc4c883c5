"""Spec parsing: pmap's in_axes / out_axes and pjit's axis resources.

Pure Python, run at decoration time and on cache misses only.
"""
from __future__ import annotations

import jax
from jax.sharding import NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp


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
        raise ValueError(
            "pmap in_axes specification must be a tree prefix of the tuple of "
            f"positional arguments, got in_axes={in_axes!r} for arguments "
            f"with structure {in_tree}.\n{detail}") from None


def flatten_out_axes(out_axes, out_tree, out_shape_tree):
    try:
        return tuple(jp.broadcast_prefix(out_axes, out_shape_tree,
                                         is_leaf=lambda x: x is None))
    except ValueError:
        raise ValueError(
            "pmap out_axes specification must be a tree prefix of the "
            f"function's output, got out_axes={out_axes!r} for an output with "
            f"structure {out_tree}.") from None


def axis_spec(axis_name, axis, ndim):
    """PartitionSpec of a global array whose dim ``axis`` is the mapped one."""
    if axis is None:
        return PartitionSpec()
    entries = [None] * ndim
    entries[axis] = axis_name
    return PartitionSpec(*entries)


def normalize_axis(axis, ndim):
    return axis + ndim if axis is not None and axis < 0 else axis


# -- pjit: axis resources ------------------------------------------------------
class ParsedPartitionSpec:
    """A PartitionSpec parsed to one tuple of mesh axis names per array
    dimension, keeping the user's own spec for error messages."""

    __slots__ = ("partitions", "user_spec")

    def __init__(self, user_spec, partitions):
        self.user_spec = user_spec
        self.partitions = tuple(tuple(p) for p in partitions)

    @classmethod
    def from_user_input(cls, entry, what):
        """Parse ``None`` (replicated) or a PartitionSpec; anything else is a
        TypeError naming ``what``."""
        if entry is None:
            return cls(entry, ())
        if not isinstance(entry, PartitionSpec):
            raise TypeError(f"{what} leaf specifications are expected to be "
                            f"PartitionSpec instances or None, but got {entry!r}")
        partitions = []
        for dim in entry:
            if dim is None:
                partitions.append(())
            elif isinstance(dim, (tuple, list)):
                partitions.append(tuple(dim))
            else:
                partitions.append((dim,))
        parsed = cls(entry, partitions)
        parsed.check_unique(what)
        return parsed

    def check_unique(self, what):
        seen, repeated = set(), []
        for axes in self.partitions:
            for axis in axes:
                if axis in seen and axis not in repeated:
                    repeated.append(axis)
                seen.add(axis)
        if repeated:
            names = ", ".join(f"`{a}`" for a in repeated)
            raise ValueError(
                f"A single {what} specification can map every mesh axis to at "
                f"most one positional dimension, but {self.user_spec} has "
                f"duplicate entries for {names}")

    def to_partition_spec(self):
        return PartitionSpec(*[None if not p else p[0] if len(p) == 1 else p
                               for p in self.partitions])

    def check_shape(self, what, shape, mesh_shape, describe=None):
        """The classic checks of a value's shape against this spec on a mesh."""
        where = f" ({describe})" if describe else ""
        if len(shape) < len(self.partitions):
            raise ValueError(
                f"One of {what} was given the resource assignment of "
                f"{self.user_spec}, which implies that it has a rank of at least "
                f"{len(self.partitions)}, but it is {len(shape)}{where}")
        for i, axes in enumerate(self.partitions):
            size = 1
            for axis in axes:
                if axis not in mesh_shape:
                    raise ValueError(
                        f"One of {what} was given the resource assignment of "
                        f"{self.user_spec}, but resource axis {axis} is "
                        f"undefined. Did you forget to declare the mesh?{where}")
                size *= mesh_shape[axis]
            if shape[i] % size:
                raise ValueError(
                    f"One of {what} was given the resource assignment of "
                    f"{self.user_spec}, which implies that the size of its "
                    f"dimension {i} should be divisible by {size}, but it is "
                    f"equal to {shape[i]}{where}")

    def __eq__(self, other):
        return (isinstance(other, ParsedPartitionSpec)
                and self.partitions == other.partitions)

    def __hash__(self):
        return hash(self.partitions)

    def __repr__(self):
        return f"ParsedPartitionSpec({self.user_spec!r}, partitions={self.partitions})"


def is_spec_leaf(x):
    return x is None or isinstance(x, (PartitionSpec, NamedSharding))


def prepare_axis_resources(tree, what):
    """Validate a pytree-prefix of ``None | PartitionSpec | NamedSharding``
    leaves at decoration time; PartitionSpecs become ParsedPartitionSpecs."""
    if isinstance(tree, list):
        tree = tuple(tree)  # a list prefix means the same as a tuple
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_spec_leaf)
    parsed = [leaf if isinstance(leaf, NamedSharding) else
              ParsedPartitionSpec.from_user_input(leaf, what) for leaf in leaves]
    for leaf in parsed:
        if isinstance(leaf, NamedSharding):
            ParsedPartitionSpec.from_user_input(leaf.spec, what)
    return jax.tree_util.tree_unflatten(treedef, parsed)


def flatten_axis_resources(what, tree, full, tupled_args):
    """Broadcast a prepared prefix over the flat leaves of ``full``.

    With ``tupled_args`` (inputs), a bare spec applies to every positional
    argument, as classic pjit's in_axis_resources did.
    """
    if tupled_args and not isinstance(tree, tuple):
        tree = (tree,) * len(full)
    is_leaf = lambda x: x is None or isinstance(x, (ParsedPartitionSpec, NamedSharding))  # noqa: E731
    try:
        return tuple(jp.broadcast_prefix(tree, full, is_leaf=is_leaf))
    except ValueError:
        shown = jax.tree_util.tree_map(
            lambda p: p.user_spec if isinstance(p, ParsedPartitionSpec) else p,
            tree, is_leaf=is_leaf)
        raise ValueError(
            f"pjit {what} specification must be a tree prefix of the "
            f"{'positional arguments tuple' if tupled_args else 'output'} "
            f"of the pjit-decorated function, got {shown!r} for a value with "
            f"structure {jax.tree_util.tree_structure(full)}.") from None
