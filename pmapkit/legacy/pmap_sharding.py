"""``PmapSharding``: the classic name of a pmap's layout, on JAX 0.10.

JAX 0.10 removed ``jax.sharding.PmapSharding`` (deprecated since 0.8.1):
pmap outputs — JAX's and pmapkit's — carry a ``NamedSharding`` over a
one-axis mesh of the pmap's devices, the mapped dimension split over it.
This module gives that layout its classic name, for ``pmapkit.legacy``:

- ``isinstance(s, PmapSharding)`` holds for the shardings a pmap lays its
  values out with: pmapkit.pmap's outputs, ``device_put_sharded`` /
  ``device_put_replicated`` results (one-axis meshes of pmap's devices);
- ``PmapSharding(devices, sharding_spec)`` and ``PmapSharding.default``
  build the equivalent ``NamedSharding`` (a classic ``Unstacked`` dimension
  is the dimension split over the mesh axis: the same global array);
- ``pmap_devices(s)``: the classic ``PmapSharding.devices``, the pmap's
  devices in order.

The classic ``sharding_spec`` is not given: it had one entry per array
dimension, and a sharding does not know the rank of the arrays it lays out.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit.core.lowering import pmap_layouts
from pmapkit.core.sharding import specs
from pmapkit.core.sharding import sharding_specs as ss

__all__ = ["PmapSharding", "mapped_dims", "pmap_devices"]


def mapped_dims(sharding) -> tuple[int, ...]:
    """The dimensions a pmap result's layout splits over its devices (()
    otherwise). By identity (``is_pmap_output``): a caller's array laid out
    with an equal sharding is not a pmap's result, and classic
    ``device_buffers`` kept its shards' shape."""
    if not pmap_layouts.is_pmap_output(sharding):
        return ()
    return tuple(dim for dim, entry in enumerate(sharding.spec) if entry is not None)


def pmap_devices(sharding) -> np.ndarray:
    """A pmap layout's devices, in the pmap's order (classic ``.devices``)."""
    if not pmap_layouts.is_pmap_output(sharding):
        raise AttributeError(
            f"'{type(sharding).__name__}' object has no attribute 'devices' "
            "(only a pmap's layout, the classic PmapSharding, has it; use "
            ".mesh.devices or ._device_assignment)")
    return np.array(sharding.mesh.devices).reshape(-1)


def _named(devices, spec: ss.ShardingSpec) -> NamedSharding:
    if not isinstance(spec, ss.ShardingSpec):
        raise TypeError("PmapSharding: sharding_spec must be a ShardingSpec "
                        f"(pmapkit.core.sharding.sharding_specs / jax.interpreters.pxla), got {spec!r}")
    devices = np.array(list(np.asarray(devices, dtype=object).flat), dtype=object)
    if len(spec.mesh_mapping) != 1:
        raise ValueError(
            f"PmapSharding: {spec!r} lays an array out over "
            f"{len(spec.mesh_mapping)} mesh axes; a pmap's layout has one "
            "(use NamedSharding for more)")
    (assignment,) = spec.mesh_mapping
    size = spec.mesh_shape[0]
    if size != len(devices):
        raise ValueError(f"PmapSharding: {spec!r} needs {size} devices, got "
                         f"{len(devices)}")
    mesh = Mesh(devices, (specs.INTERNAL_AXIS_NAME,))
    if isinstance(assignment, ss.Replicated):
        return NamedSharding(mesh, PartitionSpec())
    entries = [specs.INTERNAL_AXIS_NAME if isinstance(s, (ss.Unstacked, ss.Chunked))
               else None for s in spec.sharding]
    while entries and entries[-1] is None:
        entries.pop()
    return NamedSharding(mesh, PartitionSpec(*entries))


class _PmapShardingType(type):
    def __instancecheck__(cls, obj):
        return pmap_layouts.is_pmap_output(obj)

    def __subclasscheck__(cls, sub):
        return sub is cls


class PmapSharding(metaclass=_PmapShardingType):
    """A pmap's layout: ``PmapSharding(devices, sharding_spec)`` is the
    equivalent ``NamedSharding``; pmap layouts are instances (see the
    module docstring)."""

    def __new__(cls, devices, sharding_spec):
        return _named(devices, sharding_spec)

    @classmethod
    def default(cls, shape, sharded_dim: int | None = 0, devices=None):
        """The layout a pmap gives an array of ``shape`` mapped over
        ``sharded_dim`` (None: replicated) on ``devices`` (default: the
        first local devices, as many as the mapped dimension is long)."""
        shape = tuple(shape)
        if sharded_dim is None:
            if devices is None:
                raise ValueError("PmapSharding.default: devices must be given "
                                 "for a replicated (sharded_dim=None) layout")
            n = len(devices)
            spec = ss.ShardingSpec((ss.NoSharding(),) * len(shape), (ss.Replicated(n),))
        else:
            if not -len(shape) <= sharded_dim < len(shape):
                raise ValueError(f"PmapSharding.default: sharded_dim={sharded_dim} "
                                 f"is out of range for shape {shape}")
            sharded_dim %= len(shape)
            n = shape[sharded_dim]
            if devices is None:
                devices = jax.local_devices()[:n]
                if len(devices) < n:
                    raise ValueError(
                        f"PmapSharding.default: dimension {sharded_dim} of {shape} "
                        f"needs {n} devices; this process has {len(jax.local_devices())}")
            sharding = [ss.NoSharding()] * len(shape)
            sharding[sharded_dim] = ss.Unstacked(n)
            spec = ss.ShardingSpec(sharding, (ss.ShardedAxis(0),))
        return _named(devices, spec)
