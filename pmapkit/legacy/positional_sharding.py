"""``PositionalSharding``: the classic (JAX 0.4.x) positional layout, on JAX 0.10.

A ``PositionalSharding`` is an array of devices shaped like the values it
lays out: dimension ``i`` of a value is split in ``shape[i]`` parts, part
``k`` going to the device(s) in cell ``k``; ``replicate(axis)`` merges the
cells along ``axis`` (each value part then lives on all their devices).
JAX 0.10 lays the same thing out with a ``NamedSharding``: a mesh of the
cells' devices shaped ``(*shape, copies)``, each value dimension split over
its own mesh axis and the last axis replicated (a ``replicate`` of a layout
with one device a cell keeps that layout's mesh, the merged dimensions
unnamed in the spec: every layout made from one ``PositionalSharding`` has
its device order, as JAX 0.4's did, so ``jit`` takes them together; one cell
holding every device takes a value of any rank). This class *is* that
``NamedSharding`` (a subclass), so ``jax.device_put``, ``jit``'s
``in_shardings``/``out_shardings`` and constraints take it as JAX takes
any sharding, and carries the classic ``reshape``/``transpose``/``T``/
``replicate``/``shape``/``ndim``.
"""
from __future__ import annotations

import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["PositionalSharding"]

_REPLICA_AXIS = "positional_copies"


def _axis(i):
    return f"positional_{i}"


class PositionalSharding(NamedSharding):
    """``PositionalSharding(devices)``: ``devices`` an ndarray (or nested
    sequence) of distinct devices, one cell each."""

    def __init__(self, devices, *, memory_kind=None, _cells=None, _order=None,
                 _replicated=None):
        if _cells is None:
            array = np.array(devices, dtype=object)
            if array.size == 0:
                raise ValueError("PositionalSharding requires at least one device, "
                                 f"got {devices!r}")
            flat = list(array.flat)
            if not all(hasattr(d, "platform") and hasattr(d, "id") for d in flat):
                raise TypeError("PositionalSharding: devices must be JAX devices "
                                "(e.g. mesh_utils.create_device_mesh(...) or "
                                "jax.devices()), got " + repr(flat[0]))
            if len(set(flat)) != len(flat):
                raise ValueError("PositionalSharding: devices must not repeat a device")
            # Each cell: the positions (in the flat device order) it holds.
            _cells = np.empty(array.shape, dtype=object)
            for k, index in enumerate(np.ndindex(array.shape)):
                _cells[index] = (k,)
            devices = tuple(flat)
        copies = {len(c) for c in _cells.flat}
        if len(copies) != 1:
            raise ValueError("PositionalSharding: every cell must hold as many devices")
        if _replicated is not None:
            # a replicate of a layout with one device a cell, in order: the mesh
            # stays that layout's (devices in their given order), the merged
            # dimensions unnamed in the spec, so every layout made from one
            # PositionalSharding has one device order and jit takes them
            # together (JAX 0.4 kept the device list for all of them)
            base, axes, keepdims = _replicated
            names = tuple(_axis(i) for i in range(len(base))) + (_REPLICA_AXIS,)
            grid = np.array(devices, dtype=object).reshape(*base, 1)
            spec = [None if i in axes else names[i] for i in range(len(base))
                    if keepdims or i not in axes]
            if _cells.size == 1:
                spec = []       # all on every device: a value of any rank (as JAX 0.4)
            super().__init__(Mesh(grid, names), PartitionSpec(*spec), memory_kind=memory_kind)
        elif _order is not None:
            # a transpose of a layout with one device a cell: the mesh stays
            # the untransposed one (devices in their given order), its axes
            # taken in the new order, so jit sees one device order for both
            # (as JAX 0.4 had it: in_shardings=s.T, out_shardings=s)
            base, perm = _order
            names = tuple(_axis(i) for i in range(len(base))) + (_REPLICA_AXIS,)
            grid = np.array(devices, dtype=object).reshape(*base, 1)
            super().__init__(Mesh(grid, names), PartitionSpec(*(names[p] for p in perm)),
                             memory_kind=memory_kind)
        else:
            grid = np.array([devices[i] for cell in _cells.flat for i in sorted(cell)],
                            dtype=object).reshape(*_cells.shape, copies.pop())
            names = tuple(_axis(i) for i in range(_cells.ndim)) + (_REPLICA_AXIS,)
            spec = names[:-1] if _cells.size > 1 else ()    # one cell: any rank
            super().__init__(Mesh(grid, names), PartitionSpec(*spec),
                             memory_kind=memory_kind)
        self._positional_devices = tuple(devices)
        self._cells = _cells
        self._order = _order
        self._replicated = _replicated

    def _remake(self, cells):
        return PositionalSharding(self._positional_devices, memory_kind=self.memory_kind,
                                  _cells=cells)

    def _one_device_a_cell_in_order(self):
        return (self._order is None and self._replicated is None
                and [c for c in self._cells.flat] == [(k,) for k in range(self._cells.size)])

    @property
    def shape(self):
        return self._cells.shape

    @property
    def ndim(self):
        return self._cells.ndim

    def reshape(self, *shape):
        return self._remake(self._cells.reshape(*shape))

    def transpose(self, *axes):
        cells = self._cells.transpose(*axes)
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        axes = [a % self.ndim for a in axes] if axes else reversed(range(self.ndim))
        base, perm = self._order or (self._cells.shape, tuple(range(self.ndim)))
        order = (base, tuple(perm[a] for a in axes))
        one_each = all(len(c) == 1 for c in self._cells.flat)
        ordered = [c[0] for c in self._cells.flat] == list(range(self._cells.size))
        if not one_each or (self._order is None and not ordered):
            return self._remake(cells)
        if order[1] == tuple(range(len(base))):
            order = None        # back to the untransposed layout
        return PositionalSharding(self._positional_devices, memory_kind=self.memory_kind,
                                  _cells=cells, _order=order)

    T = property(transpose)

    def replicate(self, axis=None, keepdims=True):
        """Merges the cells along ``axis`` (all axes by default): a dimension
        laid out replicated over their devices."""
        union = np.frompyfunc(lambda a, b: tuple(sorted(set(a) | set(b))), 2, 1)
        axes = range(self.ndim) if axis is None else (
            (axis,) if isinstance(axis, int) else tuple(axis))
        axes = sorted({a % self.ndim for a in axes}, reverse=True)
        merged = self._cells
        for a in axes:
            merged = union.reduce(merged, axis=a, keepdims=True).astype(object)
        if not keepdims:
            merged = merged.reshape([n for i, n in enumerate(merged.shape)
                                     if i not in axes])
        if self._one_device_a_cell_in_order():
            return PositionalSharding(
                self._positional_devices, memory_kind=self.memory_kind, _cells=merged,
                _replicated=(self._cells.shape, frozenset(axes), keepdims))
        return self._remake(merged)

    def with_memory_kind(self, kind):
        return PositionalSharding(self._positional_devices, memory_kind=kind,
                                  _cells=self._cells, _order=self._order,
                                  _replicated=self._replicated)

    def named_sharding(self) -> NamedSharding:
        """The plain ``NamedSharding`` this layout is."""
        return NamedSharding(self.mesh, self.spec, memory_kind=self.memory_kind)

    def __repr__(self):
        ids = np.empty(self._cells.shape, dtype=object)
        for index, cell in np.ndenumerate(self._cells):
            ids[index] = "{" + ", ".join(str(self._positional_devices[i].id)
                                         for i in sorted(cell)) + "}"
        return f"PositionalSharding({ids.tolist()}, shape={self.shape})"

    def __reduce__(self):
        # devices by id: a Device object does not pickle
        ids = tuple(d.id for d in self._positional_devices)
        return (_rebuild, (ids, self._cells, self.memory_kind, self._order, self._replicated))


def _rebuild(ids, cells, memory_kind, order=None, replicated=None):
    import jax
    by_id = {d.id: d for d in jax.devices()}
    return PositionalSharding(tuple(by_id[i] for i in ids), memory_kind=memory_kind,
                              _cells=cells, _order=order, _replicated=replicated)
