"""This process's view of a program that spans several processes.

Under ``jax.distributed`` a compiled program takes and returns *global*
arrays: one logical array over the devices of every process, of which each
process holds (addresses) the shards on its own devices. Classic pmap and
pjit let each process pass its *local* data instead: the dimensions
partitioned over mesh axes that cross processes are given at this process's
size. This module converts between the two without copying: a local array
and the global array it is part of are the same per-device buffers under two
descriptions (shape and sharding), so conversion is a re-wrap.

The local description of a ``NamedSharding`` is the same partition spec over
the *local mesh*: the block of the mesh holding this process's devices, in
mesh order (so local and global arrays list their buffers in one order).
"""
from __future__ import annotations

import threading

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from pmapkit import _jax_private as jp
from pmapkit.core.programs import compiled_program, compiling
from pmapkit.core.lowering import kinds, lowering
from pmapkit.core.hitpath._compiled import shard_arg as _shard_arg_mod
from pmapkit.core.sharding.interning import intern_sharding

__all__ = ["spans_processes", "spans_devices", "local_mesh", "local_sharding", "local_shape",
           "global_shape", "to_local", "to_global", "local_view", "is_global",
           "ProcessLocalExecutable", "SpanningProgram"]


def spans_processes(shardings) -> bool:
    """True when some sharding names a device of another process."""
    return any(s is not None and spans_devices(s.device_set) for s in shardings)


def is_global(x) -> bool:
    """A global array: one whose shards are not all on this process."""
    if isinstance(x, jp.PRNGKeyArray):
        x = x._base_array
    return isinstance(x, jp.ArrayImpl) and not x.is_fully_addressable


def spans_devices(devices) -> bool:
    """True when ``devices`` include a device of another process."""
    me = jax.process_index()
    return any(d.process_index != me for d in devices)


_lock = threading.Lock()
_local_meshes: dict = {}
_local_shardings: dict = {}


def local_mesh(mesh: Mesh) -> Mesh:
    """The block of ``mesh`` made of this process's devices.

    Raises ``ValueError`` when they do not form a block (e.g. a 2-D mesh whose
    rows interleave processes): such a process's data is not an array.
    """
    with _lock:
        hit = _local_meshes.get(mesh)
    if hit is not None:
        return hit
    me = jax.process_index()
    devices = mesh.devices
    is_local = np.vectorize(lambda d: d.process_index == me, otypes=[bool])(devices)
    if not is_local.any():
        raise ValueError(
            f"process {me} owns none of the devices of the mesh "
            f"{dict(mesh.shape)} ({[d.id for d in devices.flat]}).")
    index = tuple(
        np.flatnonzero(is_local.any(axis=tuple(a for a in range(devices.ndim) if a != k)))
        for k in range(devices.ndim))
    block = devices[np.ix_(*index)]
    if block.size != int(is_local.sum()):
        raise ValueError(
            f"the devices of process {me} do not form a block of the mesh "
            f"{dict(mesh.shape)}; order the mesh's devices so that each "
            "process's devices are contiguous along the mesh axes (e.g. "
            "jax.experimental.mesh_utils.create_device_mesh).")
    result = Mesh(block, mesh.axis_names, axis_types=mesh.axis_types)
    with _lock:
        return _local_meshes.setdefault(mesh, result)


def local_sharding(sharding):
    """The sharding of this process's part of an array placed with
    ``sharding``: the same spec over the local mesh (interned per sharding,
    so the hit path's identity check matches the outputs it made)."""
    with _lock:
        hit = _local_shardings.get(sharding)
    if hit is not None:
        return hit
    if isinstance(sharding, NamedSharding):
        result = NamedSharding(local_mesh(sharding.mesh), sharding.spec,
                               memory_kind=sharding.memory_kind)
    elif sharding.is_fully_addressable:
        result = sharding
    else:
        raise TypeError(
            "pmapkit: only NamedSharding programs can take process-local data "
            f"across processes, got {sharding}.")
    result = intern_sharding(result)
    with _lock:
        return _local_shardings.setdefault(sharding, result)


def _dim_factors(sharding, ndim):
    """Per dimension: global size / local size under ``sharding``."""
    if not isinstance(sharding, NamedSharding):
        return (1,) * ndim
    global_sizes = sharding.mesh.shape
    local_sizes = local_mesh(sharding.mesh).shape
    factors = []
    spec = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
    for entry in spec[:ndim]:
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        g = l = 1
        for name in names:
            g *= global_sizes[name]
            l *= local_sizes[name]
        factors.append(g // l)
    return tuple(factors)


def local_shape(shape, sharding) -> tuple:
    factors = _dim_factors(sharding, len(shape))
    out = []
    for n, f in zip(shape, factors):
        if n % f:
            raise ValueError(
                f"a dimension of global size {n} split over {f} processes "
                f"({sharding}) does not divide evenly.")
        out.append(n // f)
    return tuple(out)


def global_shape(shape, sharding) -> tuple:
    return tuple(n * f for n, f in zip(shape, _dim_factors(sharding, len(shape))))


def to_local(x):
    """This process's part of the global array ``x`` (no copy). A key array
    keeps its key type; anything fully addressable is returned as it is."""
    if isinstance(x, jp.PRNGKeyArray):
        if x._base_array.is_fully_addressable:
            return x
        return jp.PRNGKeyArray(x.dtype._impl, to_local(x._base_array))
    if not isinstance(x, jp.ArrayImpl) or x.is_fully_addressable:
        return x
    sharding = local_sharding(x.sharding)
    aval = x.aval.update(shape=local_shape(x.shape, x.sharding))
    return x._rewrap_with_aval_and_sharding(aval, sharding)


def to_global(x, aval, sharding):
    """The global array (``aval``, ``sharding``) whose local part is the
    array ``x`` (placed with ``local_sharding(sharding)``; no copy)."""
    if x.sharding is sharding:
        return x
    return x._rewrap_with_aval_and_sharding(aval, sharding)


def local_view(aval, sharding):
    """``(local aval, local sharding)`` of an output placed with ``sharding``,
    derived once at miss time; None where ``to_local`` must look at the value
    (key arrays) or there is nothing to convert (fully addressable)."""
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended) or sharding.is_fully_addressable:
        return None
    return (aval.update(shape=local_shape(aval.shape, sharding)), local_sharding(sharding))


class ProcessLocalExecutable:
    """Stands in for a program's executable on the dispatch hit path when the
    program spans processes: takes the per-process arrays the hit path made
    (local shardings), runs the program on their global views, and returns
    this process's view of the results when ``out_views`` are given (pmap:
    one ``local_view`` per output) or the global results (pjit: None)."""

    __slots__ = ("_inner", "_avals", "_shardings", "_out_views")

    def __init__(self, inner, global_avals, global_shardings, out_views):
        self._inner = inner
        self._avals = tuple(global_avals)
        self._shardings = tuple(global_shardings)
        self._out_views = out_views

    def execute_sharded(self, arrays):
        arrays = [to_global(x, a, s)
                  for x, a, s in zip(arrays, self._avals, self._shardings)]
        return _LocalResults(self._inner.execute_sharded(arrays), self._out_views)


class _LocalResults:
    __slots__ = ("_results", "_views")

    def __init__(self, results, views):
        self._results = results
        self._views = views

    def consume_with_handlers(self, handlers):
        outs = self._results.consume_with_handlers(handlers)
        if self._views is None:
            return outs
        return [to_local(o) if v is None else o._rewrap_with_aval_and_sharding(*v)
                for o, v in zip(outs, self._views)]


class SpanningProgram(compiled_program.CompiledProgram):
    """A compiled program over several processes' devices, taking each
    process's local data: the hit path compares inputs to the local
    shardings, puts host values straight into global arrays, and the
    executable stands behind a ``ProcessLocalExecutable``. pmap returns this
    process's part of each result, pjit the global one."""

    spans_processes = True

    def __init__(self, primitive, params, in_avals, jax_compiled):
        super().__init__(primitive, params, in_avals, jax_compiled)
        kind = kinds.program_kind(primitive)
        # A local argument stands for a global one of another shape (pjit):
        # global and local arrays of one shape are different programs.
        self.signs_global = kind.local_inputs_resized
        kept_idx = range(len(in_avals)) if self.kept is None else self.kept
        self.physical_in_avals = tuple(
            jp.physical_aval(a) if lowering.is_extended(a) else a for a in self.in_avals)
        self.local_in_shardings = tuple(local_sharding(s) for s in self.physical_in_shardings)
        self.kept_in_shardings = tuple(self.local_in_shardings[i] for i in kept_idx)
        self.host_specs = tuple(
            _local_host_spec(a, s) if not lowering.is_float0(a) else h
            for a, s, h in zip(self.physical_in_avals, self.physical_in_shardings,
                               self.host_specs))
        self.kept_host_specs = tuple(self.host_specs[i] for i in kept_idx)
        self.kept_physical = tuple(
            (self.physical_in_avals[i], self.physical_in_shardings[i]) for i in kept_idx)
        self.out_views = (
            tuple(local_view(a, s) for a, s in zip(self.out_avals, self.out_shardings))
            if kind.local_outputs else None)

    def is_equivalent(self, x, i):
        # This process's local data is compared to the local sharding; global
        # arrays are taken as they are.
        if x.is_fully_addressable:
            return compiled_program.same_layout(x, self.local_in_shardings[i])
        return super().is_equivalent(x, i)

    def shard_fallback(self, x, i):
        """An input as the global array of its physical buffers: a global
        array as it is (moved if placed otherwise), a local one re-wrapped,
        anything else put from the host."""
        aval = self.physical_in_avals[i]
        sharding = self.physical_in_shardings[i]
        if lowering.is_float0(self.in_avals[i]):
            return self.host_specs[i].put(np.asarray(x))
        if isinstance(x, jp.PRNGKeyArray):
            x = x._base_array
        if isinstance(x, jp.ArrayImpl):
            if x.is_deleted():
                jp.raise_if_deleted(x)
            if not x.is_fully_addressable:
                if x.shape != aval.shape:
                    raise ValueError(
                        f"pmapkit: a global array of shape {x.shape} was passed "
                        f"where the program takes shape {aval.shape}.")
                if x.sharding.is_equivalent_to(sharding, x.ndim):
                    return x._rewrap_with_aval_and_sharding(aval, sharding)
                return jax.device_put(x, sharding)
            local = self.local_in_shardings[i]
            if (x.sharding.is_equivalent_to(local, x.ndim)
                    and x.aval.dtype == aval.dtype):
                return x._rewrap_with_aval_and_sharding(aval, sharding)
        return self.host_specs[i].put(np.asarray(x))

    def hit_executable(self):
        avals, shardings = zip(*self.kept_physical) if self.kept_physical else ((), ())
        return ProcessLocalExecutable(super().hit_executable(), avals, shardings,
                                      self.out_views)


def _local_host_spec(aval, sharding):
    """Puts this process's host data for an input of a program spanning
    processes: sliced as the local array it is, sent as the global array
    (``aval``, ``sharding``) of which those slices are the local shards."""
    local = local_sharding(sharding)
    shape = local_shape(aval.shape, sharding)
    devices = list(local.mesh.devices.flat) if isinstance(local, NamedSharding) else \
        list(local._device_assignment)
    index_map = local.devices_indices_map(shape)
    indices = [index_map[d] for d in devices]
    return _shard_arg_mod.HostSpec(
        aval, np.dtype(aval.dtype), indices, devices, sharding, jp.batched_device_put,
        jp.HOST_READ_DURING_CALL)


compiling.register_program_type(spans_processes, SpanningProgram)
