"""Classic sharding specs and conversions between JAX's sharding vocabularies.

JAX 0.10 removed ``ShardingSpec`` and its parts (they lived in the C++
``pmap_lib``). This module re-creates them as small immutable Python values
with the classic reprs and equality, and converts between four descriptions of
how an array is laid out over a mesh of devices:

* ``ShardingSpec``            per array dimension: ``NoSharding``, ``Chunked`` or
                              ``Unstacked``; per mesh axis: ``ShardedAxis`` or
                              ``Replicated``.
* ``PartitionSpec`` + ``Mesh`` (and ``NamedSharding``), JAX's current form.
* ``ParsedPartitionSpec``     a PartitionSpec parsed to one tuple of mesh axis
                              names per dimension (classic pjit's internal form).
* XLA ``OpSharding`` / ``HloSharding`` protos, whose tile assignment lists
  *logical* device ids: positions in ``mesh.devices.flat``.

Normal form (what ``normalize_partitions`` / ``ParsedPartitionSpec.normalized``
return, and what ``parse_op_sharding`` produces):

1. every dimension is a tuple of mesh axis names (``None`` -> ``()``, a bare
   name ``'x'`` -> ``('x',)``); the order inside a tuple is kept (it is the
   major-to-minor order of the chunks and is meaningful);
2. mesh axes of size 1 are dropped when a mesh is known (they shard nothing and
   leave no trace in an OpSharding);
3. trailing empty dimensions are stripped (``P('x', None)`` == ``P('x')``).

``canonical_pspec`` turns such a normal form back into the PartitionSpec JAX
itself would write: ``()`` -> ``None``, a single name bare, several names as a
tuple, no trailing ``None``.

Pure Python. ``OpSharding``/``HloSharding`` and NamedSharding's private
device order come through ``pmapkit._jax_private``, like every other
non-public JAX name.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.sharding import axis_names

OpSharding = jp.OpSharding
HloSharding = jp.HloSharding

__all__ = [
    "REPLICATED",
    "Chunked",
    "HloSharding",
    "NoSharding",
    "OpSharding",
    "ParsedPartitionSpec",
    "Replicated",
    "ShardedAxis",
    "ShardingSpec",
    "Unstacked",
    "array_mapping",
    "canonical_pspec",
    "classic_spec_repr",
    "named_sharding_to_sharding_spec",
    "normalize_partitions",
    "op_sharding_to_indices",
    "parse_op_sharding",
    "sharding_spec_from_array_mapping",
    "sharding_spec_from_pspec",
    "sharding_spec_indices",
    "sharding_spec_mesh_shape",
    "sharding_spec_to_named_sharding",
    "sharding_spec_to_op_sharding",
    "sharding_spec_to_pspec",
    "show_axes",
    "spec_to_indices",
    "to_op_sharding",
]


def _as_int(value, what, minimum):
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


# --- the classic spec types ----------------------------------------------------
# Frozen dataclasses: immutable, hashable, picklable; equality is by
# exact type and fields (``Chunked([2]) != Unstacked(2)``; never equal to a
# foreign type).

@dataclasses.dataclass(frozen=True, repr=False)
class NoSharding:
    """An array dimension that is not split: every device holds all of it."""

    def __repr__(self):
        return "NoSharding()"


@dataclasses.dataclass(frozen=True, repr=False)
class Chunked:
    """An array dimension split into ``prod(chunks)`` equal contiguous blocks.

    Several entries mean the dimension is split over several mesh axes, the
    first one major. Each entry is one *sharded axis* (see ``ShardedAxis``).
    """
    chunks: tuple[int, ...]

    def __init__(self, chunks: Sequence[int]):
        chunks = tuple(_as_int(c, "Chunked chunk count", 1) for c in chunks)
        object.__setattr__(self, "chunks", chunks)

    def __repr__(self):
        return f"Chunked({','.join(map(str, self.chunks))})"


@dataclasses.dataclass(frozen=True, repr=False)
class Unstacked:
    """An array dimension of length ``size`` split into ``size`` slices, the
    dimension itself removed in each shard (pmap's mapped axis)."""
    size: int

    def __init__(self, size: int):
        object.__setattr__(self, "size", _as_int(size, "Unstacked size", 1))

    def __repr__(self):
        return f"Unstacked({self.size})"


@dataclasses.dataclass(frozen=True, repr=False)
class ShardedAxis:
    """A mesh axis that walks sharded axis number ``axis``: the sharded axes
    are numbered over all ``Chunked`` entries and ``Unstacked`` dimensions in
    array-dimension order."""
    axis: int

    def __init__(self, axis: int):
        object.__setattr__(self, "axis", _as_int(axis, "ShardedAxis axis", 0))

    def __repr__(self):
        return f"ShardedAxis(axis={self.axis})"


@dataclasses.dataclass(frozen=True, repr=False)
class Replicated:
    """A mesh axis of size ``replicas`` over which the array is copied."""
    replicas: int

    def __init__(self, replicas: int):
        object.__setattr__(self, "replicas",
                           _as_int(replicas, "Replicated replicas", 1))

    def __repr__(self):
        return f"Replicated(replicas={self.replicas})"


AvalDimSharding = NoSharding | Chunked | Unstacked
MeshDimAssignment = ShardedAxis | Replicated


@dataclasses.dataclass(frozen=True, repr=False)
class ShardingSpec:
    """How an array is laid out over a mesh: ``sharding`` has one entry per
    array dimension, ``mesh_mapping`` one per mesh axis (major to minor)."""
    sharding: tuple[AvalDimSharding, ...]
    mesh_mapping: tuple[MeshDimAssignment, ...]

    def __init__(self, sharding, mesh_mapping):
        sharding = tuple(sharding)
        mesh_mapping = tuple(mesh_mapping)
        for s in sharding:
            if not isinstance(s, (NoSharding, Chunked, Unstacked)):
                raise TypeError("ShardingSpec sharding entries must be "
                                "NoSharding, Chunked or Unstacked, got "
                                f"{s!r}")
        for m in mesh_mapping:
            if not isinstance(m, (ShardedAxis, Replicated)):
                raise TypeError("ShardingSpec mesh_mapping entries must be "
                                f"ShardedAxis or Replicated, got {m!r}")
        object.__setattr__(self, "sharding", sharding)
        object.__setattr__(self, "mesh_mapping", mesh_mapping)

    def __repr__(self):
        return f"ShardingSpec({self.sharding}, {self.mesh_mapping})"

    @property
    def sharded_axis_sizes(self) -> tuple[int, ...]:
        """Sizes of the sharded axes, in sharded-axis-number order."""
        sizes: list[int] = []
        for s in self.sharding:
            if isinstance(s, Unstacked):
                sizes.append(s.size)
            elif isinstance(s, Chunked):
                sizes.extend(s.chunks)
        return tuple(sizes)

    @property
    def replication_factor(self) -> int:
        """How many copies of the whole array the mesh holds: the product of
        the ``Replicated`` axes (1 for a pmap output). The JAX 0.1 spelling,
        which classic code still reads."""
        return math.prod(m.replicas for m in self.mesh_mapping if isinstance(m, Replicated))

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The mesh shape this spec implies (one size per mesh_mapping entry)."""
        sizes = self.sharded_axis_sizes
        self._check_mapping(len(sizes))
        return tuple(sizes[m.axis] if isinstance(m, ShardedAxis) else m.replicas
                     for m in self.mesh_mapping)

    def _check_mapping(self, num_sharded):
        used = [m.axis for m in self.mesh_mapping if isinstance(m, ShardedAxis)]
        if sorted(used) != list(range(num_sharded)):
            raise ValueError(
                f"{self!r} is inconsistent: its sharding has {num_sharded} "
                f"sharded axes, but mesh_mapping refers to sharded axes "
                f"{used}; each must be used exactly once.")

    def indices(self, shape) -> np.ndarray:
        """Per-device indices as an object array of shape ``mesh_shape``."""
        return _sharding_spec_indices_array(self, tuple(shape))

    def to_op_sharding(self) -> OpSharding:
        return sharding_spec_to_op_sharding(self)

    # Classic spelling.
    sharding_proto = to_op_sharding


# --- indices ---------------------------------------------------------------------

def _sharding_spec_indices_array(spec: ShardingSpec, shape) -> np.ndarray:
    if len(shape) != len(spec.sharding):
        raise ValueError(f"{spec!r} describes arrays of rank "
                         f"{len(spec.sharding)}, but got shape {shape}")
    per_dim: list[Sequence[Any]] = []
    shard_grid: list[int] = []   # one entry per sharded axis
    for dim, (size, s) in enumerate(zip(shape, spec.sharding)):
        if isinstance(s, NoSharding):
            per_dim.append([slice(None)])
        elif isinstance(s, Unstacked):
            if size != s.size:
                raise ValueError(f"dimension {dim} of shape {shape} is {size}, "
                                 f"but {spec!r} unstacks it into {s.size}")
            per_dim.append(range(size))
            shard_grid.append(size)
        else:
            n = math.prod(s.chunks)
            block, ragged = divmod(size, n)
            if ragged:
                raise ValueError(f"dimension {dim} of shape {shape} is {size}, "
                                 f"not divisible into {n} chunks ({spec!r})")
            per_dim.append([slice(None)] if n == 1 else
                           [slice(i * block, (i + 1) * block) for i in range(n)])
            shard_grid.extend(s.chunks)
    spec._check_mapping(len(shard_grid))

    flat = np.empty(math.prod(shard_grid), dtype=object)
    for i, idx in enumerate(itertools.product(*per_dim)):
        flat[i] = idx
    grid = flat.reshape(shard_grid)

    # Broadcast over the replicated mesh axes, then move every axis to its
    # place in the mesh.
    replicas = tuple(m.replicas for m in spec.mesh_mapping
                     if isinstance(m, Replicated))
    next_replica = itertools.count()
    perm = [next(next_replica) if isinstance(m, Replicated)
            else len(replicas) + m.axis for m in spec.mesh_mapping]
    return np.broadcast_to(grid, replicas + grid.shape).transpose(perm)


def sharding_spec_indices(spec: ShardingSpec, shape) -> tuple[tuple, ...]:
    """Per-device index tuples, flat in mesh order (``mesh.devices.flat`` of a
    mesh whose shape is ``spec.mesh_shape``).

    ``NoSharding`` dims give ``slice(None)``, ``Chunked`` dims
    ``slice(start, stop)`` (``slice(None)`` when split into one chunk), and
    ``Unstacked`` dims an ``int``.
    """
    return tuple(spec.indices(shape).flat)


def spec_to_indices(shape, spec: ShardingSpec) -> tuple[tuple, ...]:
    """Classic ``pxla.spec_to_indices`` argument order."""
    return sharding_spec_indices(spec, shape)


def sharding_spec_mesh_shape(spec: ShardingSpec) -> tuple[int, ...]:
    return spec.mesh_shape


# --- PartitionSpec parsing -----------------------------------------------------

def classic_spec_repr(spec) -> str:
    """A PartitionSpec as JAX 0.2 to 0.4 printed it, ``PartitionSpec('x',
    None)`` (a tuple's repr: ``PartitionSpec('x',)``); JAX 0.10 prints
    ``P('x', None)``. Classic programs search error texts for
    ``PartitionSpec(``, so the classic messages keep it."""
    if isinstance(spec, PartitionSpec):
        return "PartitionSpec" + repr(tuple(spec))
    return repr(spec) if isinstance(spec, str) else str(spec)


def in_both_notations(spec, sentence) -> str:
    """``sentence(text)`` with ``spec`` written as classic JAX wrote it
    (``PartitionSpec('x', None)``, what classic programs and the 0.2-0.4
    suites look for), then, where JAX 0.10's ``str`` writes it otherwise
    (``P('x', None)``, what code building its expected text with ``str(spec)``
    on today's JAX looks for), the same sentence so written."""
    classic = sentence(classic_spec_repr(spec))
    modern = sentence(repr(spec) if isinstance(spec, str) else str(spec))
    if modern == classic:
        return classic
    return f"{classic}\n(as JAX 0.10 writes the spec) {modern}"


def show_axes(axes) -> str:
    """Classic rendering of a set of mesh axis names: sorted, back-quoted."""
    return ", ".join(sorted(f"`{axis_names.shown(a)}`" for a in axes))


def _parse_entry(entry, user_spec, what):
    # A mesh axis is named by a str, or (classic JAX) any other hashable but
    # a tuple, which groups axes: such a name is read as its mesh's string.
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, (tuple, list)):
        for name in entry:
            if isinstance(name, (tuple, list)) or not _hashable(name):
                raise TypeError(
                    f"{what}: every entry of a PartitionSpec must be None, a "
                    f"mesh axis name (a str or another hashable) or a tuple of "
                    f"mesh axis names, but {user_spec} contains {name!r} in "
                    f"{entry!r}")
        return tuple(map(axis_names.mesh_name, entry))
    if entry is PartitionSpec.UNCONSTRAINED:
        raise ValueError(
            f"{what}: {user_spec} uses PartitionSpec.UNCONSTRAINED, which has "
            f"no classic ShardingSpec / pjit meaning")
    if not _hashable(entry):
        raise TypeError(
            f"{what}: every entry of a PartitionSpec must be None, a mesh axis "
            f"name (a str or another hashable) or a tuple of mesh axis names, "
            f"but {user_spec} contains {entry!r}")
    return (axis_names.mesh_name(entry),)


def _hashable(x):
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _mesh_shape(mesh) -> Mapping[str, int]:
    if isinstance(mesh, Mapping):
        return mesh
    return mesh.shape


def normalize_partitions(partitions, mesh=None) -> tuple[tuple[str, ...], ...]:
    """The normal form (see module docstring) of parsed partitions."""
    shape = None if mesh is None else _mesh_shape(mesh)
    out = [tuple(a for a in axes if shape is None or shape.get(a, 0) != 1)
           for axes in partitions]
    while out and not out[-1]:
        out.pop()
    return tuple(out)


def canonical_pspec(spec, mesh=None) -> PartitionSpec:
    """The PartitionSpec JAX itself would write for ``spec`` (a PartitionSpec,
    ParsedPartitionSpec, None, or a sequence of entries): normal form, then
    ``()`` -> None, one name bare, several names a tuple."""
    if not isinstance(spec, ParsedPartitionSpec):
        spec = ParsedPartitionSpec.from_user_input(
            spec if spec is None or isinstance(spec, PartitionSpec)
            else PartitionSpec(*spec), "canonical_pspec")
    parts = normalize_partitions(spec.partitions, mesh)
    return PartitionSpec(*[None if not p else p[0] if len(p) == 1 else p
                           for p in parts])


class ParsedPartitionSpec:
    """A PartitionSpec parsed to one tuple of mesh axis names per dimension.

    ``user_spec`` is what the user wrote (for error messages); ``partitions``
    is the parse. Equality and hashing look at ``partitions`` only, exactly as
    written (``normalized()`` gives the normal form; two specs describe the
    same layout on ``mesh`` iff their ``normalized(mesh)`` are equal).
    """
    __slots__ = ("partitions", "user_spec")

    def __init__(self, user_spec, partitions):
        object.__setattr__(self, "user_spec", user_spec)
        object.__setattr__(self, "partitions",
                           tuple(tuple(p) for p in partitions))

    def __setattr__(self, name, value):
        raise AttributeError("ParsedPartitionSpec is immutable")

    def __reduce__(self):
        return (ParsedPartitionSpec, (self.user_spec, self.partitions))

    @classmethod
    def from_user_input(cls, entry, arg_name: str = "axis resources"):
        """Parse ``None`` (fully replicated) or a ``PartitionSpec``.

        Raises TypeError for anything else or for an entry that is not None, a
        str or a tuple of str; ValueError when one mesh axis is used twice.
        """
        if isinstance(entry, ParsedPartitionSpec):
            return entry
        if entry is None:
            return cls(None, ())
        if not isinstance(entry, PartitionSpec):
            raise TypeError(f"{arg_name} leaf specifications are expected to "
                            f"be PartitionSpec instances or None, but got "
                            f"{entry!r}")
        if entry.unreduced or entry.reduced:
            raise ValueError(f"{arg_name}: {entry} has unreduced/reduced mesh "
                             f"axes, which have no classic meaning")
        parsed = cls(entry, [_parse_entry(e, entry, arg_name)
                             for e in entry.partitions])
        parsed.check_unique(arg_name)
        return parsed

    def check_unique(self, arg_name: str):
        counts = Counter(itertools.chain.from_iterable(self.partitions))
        repeated = [a for a, c in counts.items() if c > 1]
        if repeated:
            raise ValueError(in_both_notations(self.user_spec, lambda spec: (
                f"A single {arg_name} specification can map every mesh axis "
                f"to at most one positional dimension, but {spec} "
                f"has duplicate entries for {show_axes(repeated)}")))

    def normalized(self, mesh=None) -> ParsedPartitionSpec:
        return ParsedPartitionSpec(self.user_spec,
                                   normalize_partitions(self.partitions, mesh))

    def to_partition_spec(self) -> PartitionSpec:
        """Dimension by dimension, without dropping or stripping anything."""
        return PartitionSpec(*[None if not p else p[0] if len(p) == 1 else p
                               for p in self.partitions])

    def check_shape(self, shape, mesh, what: str = "the values",
                    describe: str | None = None, sharding=None, even=True):
        """Classic pjit's checks of a shape against this spec on ``mesh``;
        ``describe`` (which argument this is) is appended to the message.
        ``sharding``: the ``Sharding`` leaf this spec came from (0.4-era
        pjit), named in the messages as those releases named it.
        ``even=False`` lets a dimension split unevenly (a sharding
        constraint inside the program may, as in jax)."""
        mesh_shape = _mesh_shape(mesh)
        where = f" ({describe})" if describe else ""
        user_spec = self.user_spec
        if len(shape) < len(self.partitions):
            if sharding is not None:
                raise ValueError(
                    f"One of {what} is incompatible with its sharding "
                    f"annotation {sharding}: Sharding {sharding} is only valid "
                    f"for values of rank at least {len(self.partitions)}, but "
                    f"was applied to a value of rank {len(shape)}{where}")
            # The seed's words, then 0.4's (code and tests of both match).
            raise ValueError(in_both_notations(user_spec, lambda spec: (
                f"One of {what} was given the resource assignment of "
                f"{spec}, which implies that it has a rank of at "
                f"least {len(self.partitions)}, but it is {len(shape)}: {spec} is "
                f"only valid for values of rank at least {len(self.partitions)}, "
                f"but was applied to a value of rank {len(shape)}{where}")))
        for i, axes in enumerate(self.partitions):
            size = 1
            for axis in axes:
                if axis not in mesh_shape:
                    # The 0.4 wording first, then the 0.3 one (code and
                    # tests of both releases match their own).
                    name = axis_names.shown(axis)
                    raise ValueError(in_both_notations(user_spec, lambda spec: (
                        f"Resource axis: {name} of {spec} is undefined. One of "
                        f"{what} was given the resource assignment of {spec}, "
                        f"but resource axis {name} is undefined. Did you "
                        f"forget to declare the mesh?{where}")))
                size *= mesh_shape[axis]
            if even and shape[i] % size:
                def divisible(given):
                    return (f"One of {what} was given {given}, which implies that "
                            f"the size of its dimension {i} should be divisible by "
                            f"{size}, but it is equal to {shape[i]} (full shape: "
                            f"{tuple(shape)}){where}")
                if sharding is not None:
                    raise ValueError(divisible(f"the sharding of {sharding}"))
                raise ValueError(in_both_notations(user_spec, lambda spec: divisible(
                    f"the resource assignment of {spec}")))

    def __eq__(self, other):
        if not isinstance(other, ParsedPartitionSpec):
            return NotImplemented
        return self.partitions == other.partitions

    def __hash__(self):
        return hash(self.partitions)

    def __len__(self):
        return len(self.partitions)

    def __getitem__(self, i):
        return self.partitions[i]

    def __iter__(self):
        return iter(self.partitions)

    def __repr__(self):
        return (f"ParsedPartitionSpec(user_spec={self.user_spec!r}, "
                f"partitions={self.partitions})")


REPLICATED = ParsedPartitionSpec(None, ())


def array_mapping(spec) -> OrderedDict:
    """Classic ``get_array_mapping``: mesh axis name -> array dimension, in
    order of appearance (the order matters inside one dimension)."""
    spec = ParsedPartitionSpec.from_user_input(spec, "array_mapping")
    return OrderedDict((axis, dim) for dim, axes in enumerate(spec.partitions)
                       for axis in axes)


# --- ShardingSpec <-> PartitionSpec / NamedSharding ------------------------------

def sharding_spec_from_array_mapping(mesh, shape_or_ndim, mapping) -> ShardingSpec:
    """Classic ``mesh_sharding_specs(...)(aval, array_mapping)``.

    Mesh axes mapped to a dimension add a chunk to it (in mapping order) and
    become ``ShardedAxis(i)``, ``i`` counting the chunks in dimension order;
    the other mesh axes become ``Replicated(size)``.
    """
    mesh_shape = _mesh_shape(mesh)
    names = list(mesh_shape)
    ndim = (shape_or_ndim if isinstance(shape_or_ndim, int)
            else len(shape_or_ndim))
    chunks: list[list[int] | None] = [None] * ndim
    mesh_mapping: list[MeshDimAssignment] = [Replicated(s)
                                             for s in mesh_shape.values()]
    # sorted() is stable: axes of one dimension keep their order.
    ordered = sorted(mapping.items(), key=lambda kv: kv[1])
    for next_axis, (name, dim) in enumerate(ordered):
        if chunks[dim] is None:
            chunks[dim] = []
        chunks[dim].append(mesh_shape[name])
        mesh_mapping[names.index(name)] = ShardedAxis(next_axis)
    sharding = [NoSharding() if c is None else Chunked(c) for c in chunks]
    return ShardingSpec(sharding, mesh_mapping)


def sharding_spec_from_pspec(mesh, pspec, shape_or_ndim,
                             what: str = "the values") -> ShardingSpec:
    """The classic ShardingSpec of an array partitioned by ``pspec`` on ``mesh``.

    ``mesh`` is a ``Mesh``/``AbstractMesh`` or a mapping name -> size;
    ``pspec`` a PartitionSpec, ParsedPartitionSpec or None; with a shape
    (rather than a rank) its divisibility is checked too. Size-1 mesh axes
    named in ``pspec`` are kept as ``Chunked`` entries of 1 (classic).
    """
    parsed = ParsedPartitionSpec.from_user_input(pspec, "sharding_spec_from_pspec")
    if isinstance(shape_or_ndim, int):
        shape = (0,) * shape_or_ndim   # 0 is divisible by everything
    else:
        shape = tuple(shape_or_ndim)
    parsed.check_shape(shape, mesh, what)
    return sharding_spec_from_array_mapping(mesh, len(shape),
                                            array_mapping(parsed))


def _check_named_sharding(ns: NamedSharding):
    if jp.custom_device_order(ns) is not None:
        raise ValueError(f"{ns} has a custom device order (logical_device_ids),"
                         " which a ShardingSpec cannot express")
    if AxisType.Manual in tuple(getattr(ns.mesh, "axis_types", ())):
        raise NotImplementedError(
            f"{ns} is over a mesh with Manual axes, which a ShardingSpec "
            "cannot express")


def named_sharding_to_sharding_spec(ns: NamedSharding, ndim: int) -> ShardingSpec:
    _check_named_sharding(ns)
    return sharding_spec_from_pspec(ns.mesh, ns.spec, ndim)


def sharding_spec_to_pspec(spec: ShardingSpec, mesh) -> PartitionSpec:
    """The PartitionSpec (canonical: no trailing None, one name bare) that
    gives ``spec`` on ``mesh``. ``mesh_mapping[i]`` is read as mesh axis ``i``.

    ValueError when ``spec`` has ``Unstacked`` dims, does not match the mesh's
    rank or sizes, or is inconsistent.
    """
    mesh_shape = _mesh_shape(mesh)
    names = list(mesh_shape)
    if len(spec.mesh_mapping) != len(names):
        raise ValueError(f"{spec!r} has {len(spec.mesh_mapping)} mesh axes, but "
                         f"the mesh has {len(names)}: {dict(mesh_shape)}")
    if any(isinstance(s, Unstacked) for s in spec.sharding):
        raise ValueError(f"{spec!r} unstacks a dimension (pmap-style); a "
                         "PartitionSpec cannot express that")
    spec._check_mapping(len(spec.sharded_axis_sizes))
    by_sharded_axis = {m.axis: i for i, m in enumerate(spec.mesh_mapping)
                       if isinstance(m, ShardedAxis)}
    for i, m in enumerate(spec.mesh_mapping):
        if isinstance(m, Replicated) and m.replicas != mesh_shape[names[i]]:
            raise ValueError(f"{spec!r} replicates mesh axis {names[i]!r} "
                             f"{m.replicas} times, but its size is "
                             f"{mesh_shape[names[i]]}")
    entries: list[Any] = []
    next_axis = 0
    for s in spec.sharding:
        axes = []
        if isinstance(s, Chunked):
            for n in s.chunks:
                name = names[by_sharded_axis[next_axis]]
                if mesh_shape[name] != n:
                    raise ValueError(
                        f"{spec!r} splits a dimension {n} ways over mesh axis "
                        f"{name!r}, whose size is {mesh_shape[name]}")
                axes.append(name)
                next_axis += 1
        entries.append(None if not axes else axes[0] if len(axes) == 1
                       else tuple(axes))
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


def sharding_spec_to_named_sharding(spec: ShardingSpec, mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, sharding_spec_to_pspec(spec, mesh))


# --- OpSharding --------------------------------------------------------------------

def _replicated_op_sharding() -> OpSharding:
    op = OpSharding()
    op.type = OpSharding.Type.REPLICATED
    return op


def sharding_spec_to_op_sharding(spec: ShardingSpec) -> OpSharding:
    """The XLA OpSharding of ``spec`` (classic ``sharding_proto``).

    Tile-assignment device ids are positions in the flat mesh. Mesh axes of
    size 1 are left out, as JAX's own lowering does, so the result equals
    (as an ``HloSharding``) what JAX lowers the same ``NamedSharding`` to.
    """
    mesh_shape = spec.mesh_shape
    sizes = spec.sharded_axis_sizes
    if any(isinstance(s, Unstacked) for s in spec.sharding):
        raise ValueError(f"{spec!r} unstacks a dimension; an OpSharding "
                         "cannot express that")
    if math.prod(sizes) == 1:
        return _replicated_op_sharding()
    mesh_axis_of = {m.axis: i for i, m in enumerate(spec.mesh_mapping)
                    if isinstance(m, ShardedAxis)}
    perm: list[int] = []
    tile_dims: list[int] = []
    next_axis = 0
    for s in spec.sharding:
        if isinstance(s, Chunked):
            for _ in s.chunks:
                perm.append(mesh_axis_of[next_axis])
                next_axis += 1
            tile_dims.append(math.prod(s.chunks))
        else:
            tile_dims.append(1)
    replicated = [i for i, m in enumerate(spec.mesh_mapping)
                  if isinstance(m, Replicated)]
    num_replicas = math.prod(mesh_shape[i] for i in replicated)
    perm.extend(replicated)
    if num_replicas > 1:
        tile_dims.append(num_replicas)
    devices = (np.arange(math.prod(mesh_shape)).reshape(mesh_shape)
               .transpose(perm).reshape(-1))
    op = OpSharding()
    op.type = OpSharding.Type.OTHER
    op.tile_assignment_dimensions = tile_dims
    op.tile_assignment_devices = [int(d) for d in devices]
    if num_replicas > 1:
        op.replicate_on_last_tile_dim = True
    return op


def to_op_sharding(named_sharding: NamedSharding, ndim: int) -> OpSharding:
    """The OpSharding JAX lowers ``named_sharding`` to for a rank-``ndim``
    value (device ids are positions in ``named_sharding.mesh.devices.flat``)."""
    return sharding_spec_to_op_sharding(
        named_sharding_to_sharding_spec(named_sharding, ndim))


def _as_hlo_sharding(sharding) -> HloSharding:
    if isinstance(sharding, HloSharding):
        return sharding
    if isinstance(sharding, OpSharding):
        return HloSharding.from_proto(sharding)
    raise TypeError(f"expected an OpSharding or HloSharding, got {sharding!r}")


def _mesh_axis_order(names, sizes, devices) -> list[str]:
    """The major-to-minor order of mesh axes that produced ``devices``.

    ``devices`` must be ``arange(N).reshape(sizes).transpose(p).ravel()`` for
    some permutation ``p`` (every tile assignment lowered from a PartitionSpec
    is). Device ``stride(k)`` (coordinate 1 on axis ``k``, 0 elsewhere) then
    sits at the stride axis ``k`` has after the transposition, which orders
    the axes; the whole assignment is then checked.
    """
    strides = [math.prod(sizes[k + 1:]) for k in range(len(sizes))]
    position = {int(d): i for i, d in enumerate(devices)}
    try:
        order = sorted(range(len(sizes)), key=lambda k: -position[strides[k]])
    except KeyError:
        order = None
    if order is not None:
        expected = (np.arange(math.prod(sizes)).reshape(sizes)
                    .transpose(order).reshape(-1)) if sizes else np.zeros(1)
        if np.array_equal(expected, np.asarray(devices)):
            return [names[k] for k in order]
    raise NotImplementedError(
        f"the device assignment {list(devices)} is not a transposition of a "
        f"mesh of shape {dict(zip(names, sizes))}; it cannot be expressed as "
        "a PartitionSpec")


def parse_op_sharding(op_sharding, mesh):
    """The ``ParsedPartitionSpec`` (in normal form) of an OpSharding or
    HloSharding whose device ids are positions in ``mesh.devices.flat``.

    A TUPLE sharding gives a list (one entry per element, nested tuples
    flattened into it). The result's ``user_spec`` is the canonical
    PartitionSpec. Inverse of ``to_op_sharding`` up to normalization.
    """
    hlo = _as_hlo_sharding(op_sharding)
    if hlo.tuple_elements():
        out = []
        for element in hlo.tuple_elements():
            parsed = parse_op_sharding(element, mesh)
            out.extend(parsed if isinstance(parsed, list) else [parsed])
        return out
    mesh_shape = _mesh_shape(mesh)
    if hlo.is_replicated() or (hlo.is_maximal() and
                               math.prod(mesh_shape.values()) == 1):
        return ParsedPartitionSpec(PartitionSpec(), ())
    if not hlo.is_tiled():
        raise NotImplementedError(f"cannot express {hlo} as a PartitionSpec")
    subgroups = list(hlo.subgroup_types())
    replicate_last = hlo.replicate_on_last_tile_dim()
    if subgroups and not (subgroups == [OpSharding.Type.REPLICATED]):
        raise NotImplementedError(
            f"{hlo} has {subgroups} subgroups; only replication can be "
            "expressed as a PartitionSpec")
    replicate_last = replicate_last or bool(subgroups)

    live = [(n, s) for n, s in mesh_shape.items() if s != 1]
    names = [n for n, _ in live]
    sizes = [s for _, s in live]
    devices = list(hlo.tile_assignment_devices())
    if len(devices) != math.prod(sizes):
        raise ValueError(f"{hlo} spans {len(devices)} devices, but the mesh "
                         f"{dict(mesh_shape)} has {math.prod(sizes)}")
    axis_iter = iter(_mesh_axis_order(names, sizes, devices))
    tile_dims = list(hlo.tile_assignment_dimensions())
    if replicate_last:
        tile_dims, last = tile_dims[:-1], tile_dims[-1:]
    else:
        last = []
    partitions = []
    for dim_size in tile_dims + last:
        axes = []
        while dim_size > 1:
            axis = next(axis_iter, None)
            if axis is None or dim_size % mesh_shape[axis]:
                raise NotImplementedError(
                    f"tile dimensions {list(hlo.tile_assignment_dimensions())} "
                    f"of {hlo} do not split over mesh {dict(mesh_shape)}")
            dim_size //= mesh_shape[axis]
            axes.append(axis)
        partitions.append(tuple(axes))
    if replicate_last:
        partitions.pop()
    parts = normalize_partitions(partitions)
    return ParsedPartitionSpec(canonical_pspec(ParsedPartitionSpec(None, parts)),
                               parts)


def op_sharding_to_indices(op_sharding, shape, num_devices: int) -> tuple[tuple, ...]:
    """Per-device index tuples of an OpSharding / HloSharding, by logical
    device id (0 .. num_devices-1)."""
    hlo = _as_hlo_sharding(op_sharding)
    shape = tuple(shape)
    if hlo.is_replicated() or num_devices == 1:
        return ((slice(None),) * len(shape),) * num_devices
    if not hlo.is_tiled():
        raise NotImplementedError(f"no indices for {hlo}")
    subgroups = list(hlo.subgroup_types())
    if subgroups and subgroups != [OpSharding.Type.REPLICATED]:
        raise NotImplementedError(f"no indices for {hlo}")
    dims = list(hlo.tile_assignment_dimensions())
    replicas = dims.pop() if (hlo.replicate_on_last_tile_dim() or subgroups) else 1
    if len(dims) != len(shape):
        raise ValueError(f"{hlo} is for rank {len(dims)}, got shape {shape}")
    per_dim = []
    for size, n in zip(shape, dims):
        block, ragged = divmod(size, n)
        if ragged:
            raise ValueError(f"shape {shape} is not divisible by tiles {dims}")
        per_dim.append([slice(None)] if n == 1 else
                       [slice(i * block, (i + 1) * block) for i in range(n)])
    out: list[Any] = [None] * num_devices
    device_iter = iter(hlo.tile_assignment_devices())
    for idx in itertools.product(*per_dim):
        for _ in range(replicas):
            out[next(device_iter)] = idx
    return tuple(out)
