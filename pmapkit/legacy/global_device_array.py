"""``jax.experimental.global_device_array`` (JAX 0.2.28 to 0.4.6) on this
JAX. A GlobalDeviceArray was an array laid out over a mesh by
``mesh_axes``; ``jax.Array`` took its place, so every GDA is a ``jax.Array``
with a ``NamedSharding(mesh, PartitionSpec(*mesh_axes))``:
``GlobalDeviceArray.from_callback`` is ``jax.make_array_from_callback``,
``get_shard_indices`` the sharding's ``devices_indices_map``, and the
array's ``local_shards`` (installed on ``jax.Array`` by
``pmapkit.legacy.install``) its ``addressable_shards``.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["GlobalDeviceArray", "Shard", "Device", "get_shard_indices",
           "get_shard_indices_replica_ids", "get_shard_shape", "PartitionSpec"]

#: The classic Shard (device, index, replica_id, data): jax.Array's shards.
Shard = jax.Shard

#: The classic module's public alias of the device class (``jax.Device``).
Device = jax.Device


def _sharding(global_mesh, mesh_axes, what="mesh_axes"):
    if not isinstance(global_mesh, Mesh):
        raise TypeError(f"global_mesh must be a jax.sharding.Mesh; got {global_mesh!r}")
    if mesh_axes is None:
        spec = PartitionSpec()
    elif isinstance(mesh_axes, PartitionSpec):
        spec = mesh_axes
    elif isinstance(mesh_axes, (tuple, list)):
        spec = PartitionSpec(*mesh_axes)
    else:
        raise TypeError(f"{what} must be a PartitionSpec, a list/tuple of mesh axis names "
                        f"(or None) or None; got {mesh_axes!r}")
    return NamedSharding(global_mesh, spec)


def _shape(global_shape):
    try:
        return tuple(int(d) for d in global_shape)
    except TypeError:
        raise TypeError(f"global_shape must be a tuple of ints; got {global_shape!r}") from None


def get_shard_indices(global_shape, global_mesh, mesh_axes):
    """``{device: index}``: the slice of the global array each device holds."""
    return _sharding(global_mesh, mesh_axes).devices_indices_map(_shape(global_shape))


def get_shard_indices_replica_ids(global_shape, global_mesh, mesh_axes):
    """``{device: (index, replica_id)}``: a device's slice and which copy of
    that slice it holds (0 for the first device holding it, in mesh order)."""
    seen, out = {}, {}
    for device, index in get_shard_indices(global_shape, global_mesh, mesh_axes).items():
        key = tuple((s.start, s.stop, s.step) for s in index)
        out[device] = (index, seen.get(key, 0))
        seen[key] = seen.get(key, 0) + 1
    return out


def get_shard_shape(global_shape, global_mesh, mesh_axes):
    """The shape of each device's slice."""
    return _sharding(global_mesh, mesh_axes).shard_shape(_shape(global_shape))


class _ArrayAlias(type):
    """``isinstance(x, GlobalDeviceArray)`` is ``isinstance(x, jax.Array)``."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, jax.Array)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, jax.Array)


class GlobalDeviceArray(metaclass=_ArrayAlias):
    """The classic GDA: constructing one gives the ``jax.Array`` of its
    device buffers, laid out over ``global_mesh`` by ``mesh_axes``."""

    def __new__(cls, global_shape, global_mesh, mesh_axes, device_buffers, **_fast_path):
        sharding = _sharding(global_mesh, mesh_axes)
        return jax.make_array_from_single_device_arrays(
            _shape(global_shape), sharding, list(device_buffers))

    @staticmethod
    def from_callback(global_shape, global_mesh, mesh_axes, data_callback):
        """``data_callback(index)`` gives the numpy data of each device's slice."""
        return jax.make_array_from_callback(
            _shape(global_shape), _sharding(global_mesh, mesh_axes), data_callback)

    @staticmethod
    def from_batched_callback(global_shape, global_mesh, mesh_axes, data_callback):
        """``data_callback(indices)`` gives, for a list of slices, their data
        (one call for every local device's slice)."""
        shape = _shape(global_shape)
        sharding = _sharding(global_mesh, mesh_axes)
        indices = sharding.addressable_devices_indices_map(shape)
        devices = list(indices)
        data = data_callback([indices[d] for d in devices])
        buffers = [jax.device_put(np.asarray(x), d) for x, d in zip(data, devices)]
        return jax.make_array_from_single_device_arrays(shape, sharding, buffers)

    @staticmethod
    def from_batched_callback_with_devices(global_shape, global_mesh, mesh_axes,
                                           data_callback):
        """``data_callback([(index, device), ...])`` gives each local device's
        data, already on that device (or host data, put there)."""
        shape = _shape(global_shape)
        sharding = _sharding(global_mesh, mesh_axes)
        pairs = list(sharding.addressable_devices_indices_map(shape).items())
        data = data_callback([(index, device) for device, index in pairs])
        buffers = [jax.device_put(x, device) for x, (device, _) in zip(data, pairs)]
        return jax.make_array_from_single_device_arrays(shape, sharding, buffers)


def local_data(self, index):
    """Classic ``GlobalDeviceArray.local_data(index)``: the data of this
    process's ``index``-th shard."""
    return self.addressable_shards[index].data


GlobalDeviceArray.local_data = local_data


def local_shards(self):
    """Classic ``GlobalDeviceArray.local_shards``: this process's shards."""
    return self.addressable_shards


def _hashed_index(index):
    """Classic GDA helper real loaders used: a hash of a shard's index (a
    tuple of slices), equal for equal (start, stop) bounds."""
    return hash(tuple((s.start, s.stop) for s in index))
