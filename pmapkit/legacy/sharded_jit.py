"""``jax.interpreters.sharded_jit`` (JAX 0.1 to 0.3.10) on this JAX:
``sharded_jit(fun, in_parts, out_parts)`` partitions each argument and
result into the number of pieces per dimension its ``PartitionSpec`` of
ints gives (``PartitionSpec(2, 1)``: the first dimension in halves) over the
first ``num_partitions`` devices, pieces in row-major device order, ``None``
replicated. That is pjit over a mesh whose axes are the prime factors of
the partition count: each dimension takes the next mesh axes whose product
is its count, which lays pieces out row-major on the devices for every spec
at once. ``with_sharding_constraint(x, partitions)`` inside it constrains an
intermediate the same way.
"""
from __future__ import annotations

import functools
import threading

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["PartitionSpec", "sharded_jit", "with_sharding_constraint"]

_tracing = threading.local()     # the mesh of the sharded_jit being traced


def _factors(count):
    found, p = [], 2
    while count > 1:
        while count % p == 0:
            found.append(p)
            count //= p
        p += 1
    return found or [1]


def _partition_count(parts):
    counts = {int(np.prod(tuple(p))) for p in jax.tree.leaves(
        parts, is_leaf=lambda x: isinstance(x, PartitionSpec)) if isinstance(p, PartitionSpec)}
    counts.discard(1)
    if len(counts) > 1:
        raise ValueError("sharded_jit: all PartitionSpecs of in_parts and out_parts must "
                         f"give the same total number of partitions; got {sorted(counts)}")
    return counts.pop() if counts else 1


class _Layout:
    """The mesh of one sharded_jit and the sharding of each PartitionSpec."""

    def __init__(self, count):
        devices = jax.devices()
        if count > len(devices):
            raise ValueError(f"sharded_jit: num_partitions={count} is more than the "
                             f"{len(devices)} available devices")
        self.sizes = _factors(count)
        self.names = tuple(f"sharded_jit_{i}" for i in range(len(self.sizes)))
        self.count = count
        self.mesh = Mesh(np.array(devices[:count]).reshape(self.sizes), self.names)

    def sharding(self, parts, what):
        if parts is None:
            return NamedSharding(self.mesh, PartitionSpec())
        if not isinstance(parts, PartitionSpec):
            raise TypeError(f"sharded_jit: {what} must hold PartitionSpecs of ints or None; "
                            f"got {parts!r}")
        counts = [int(c) for c in tuple(parts)]
        total = int(np.prod(counts)) if counts else 1
        if total not in (1, self.count):
            raise ValueError(f"sharded_jit: {what} {parts} gives {total} partitions, but "
                             f"the call has {self.count}")
        if total == 1:
            return NamedSharding(self.mesh, PartitionSpec())
        entries, axis = [], 0
        for count in counts:
            taken, size = [], 1
            while size < count and axis < len(self.sizes):
                taken.append(self.names[axis])
                size *= self.sizes[axis]
                axis += 1
            if size != count:
                raise ValueError(f"sharded_jit: {what} {parts} cannot be laid out row-major "
                                 f"over {self.count} devices (partition counts of each "
                                 f"dimension must take the prime factors {self.sizes} "
                                 "in order)")
            entries.append(None if not taken else taken[0] if len(taken) == 1
                           else tuple(taken))
        return NamedSharding(self.mesh, PartitionSpec(*entries))

    def shardings(self, parts, what):
        return jax.tree.map(lambda p: self.sharding(p, what), parts,
                            is_leaf=lambda x: x is None or isinstance(x, PartitionSpec))


def sharded_jit(fun, in_parts, out_parts, num_partitions=None, local_in_parts=None,
                local_out_parts=None, local_num_partitions=None, static_argnums=()):
    """Classic ``sharded_jit``: ``fun`` compiled over ``num_partitions``
    devices (default: the count ``in_parts``/``out_parts`` give), its
    arguments and results partitioned as ``in_parts``/``out_parts`` say."""
    if not callable(fun):
        raise TypeError(f"sharded_jit: fun must be callable; got {fun!r}")
    for name, value in (("local_in_parts", local_in_parts),
                        ("local_out_parts", local_out_parts),
                        ("local_num_partitions", local_num_partitions)):
        if value is not None:
            raise ValueError(f"sharded_jit: {name} (partitioning across processes) is not "
                             "served by pmapkit.legacy; use pmapkit.pjit over a global mesh")
    if num_partitions is not None and (not isinstance(num_partitions, int)
                                       or num_partitions < 1):
        raise ValueError(f"sharded_jit: num_partitions must be a positive int; "
                         f"got {num_partitions!r}")
    layout = _Layout(num_partitions or _partition_count((in_parts, out_parts)))
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def traced(*args):
        before = getattr(_tracing, "layout", None)
        _tracing.layout = layout
        try:
            return fun(*args)
        finally:
            _tracing.layout = before

    compiled = jax.jit(traced, in_shardings=layout.shardings(in_parts, "in_parts"),
                       out_shardings=layout.shardings(out_parts, "out_parts"),
                       static_argnums=static)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        if kwargs:
            raise NotImplementedError("sharded_jit over kwargs not yet supported")
        if static and max(static) >= len(args):
            raise ValueError(f"jitted function has static_argnums={static} but was called "
                             f"with only {len(args)} positional argument"
                             f"{'s' if len(args) > 1 else ''}. All static broadcasted "
                             "arguments must be passed positionally.")
        return compiled(*args)

    return wrapped


def with_sharding_constraint(x, partitions):
    """Classic ``sharded_jit.with_sharding_constraint``: inside a
    ``sharded_jit``, ``x`` laid out as ``partitions`` (ints per dimension,
    None: replicated)."""
    layout = getattr(_tracing, "layout", None)
    if layout is None:
        raise ValueError("with_sharding_constraint (jax.interpreters.sharded_jit) must be "
                         "called inside a sharded_jit function")
    return jax.lax.with_sharding_constraint(x, layout.sharding(partitions, "partitions"))
