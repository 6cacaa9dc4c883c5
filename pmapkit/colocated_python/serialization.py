"""Shipping colocated functions: cloudpickle, plus devices and shardings by id.

A colocated function travels as bytes to the process that owns its devices
(or, where the backend runs it in-process, makes the same round trip, so that
what a function captures behaves the same either way: a copy). Devices are not
picklable; they travel as ``(platform, id)`` and are looked up again on the
receiving side, and so do the meshes, device lists and shardings built on them.
"""
from __future__ import annotations

import io

import cloudpickle
import jax
import numpy as np

from pmapkit import _jax_private as jp


def _device_key(device):
    return (device.platform, device.id)


def _lookup_device(key):
    platform, device_id = key
    for device in jax.devices(platform):
        if device.id == device_id:
            return device
    raise ValueError(f"no {platform} device with id {device_id} in this process")


def _rebuild_device_list(keys):
    return jp.DeviceList(tuple(_lookup_device(k) for k in keys))


def _rebuild_mesh(keys, shape, axis_names, axis_types):
    devices = np.empty(len(keys), dtype=object)
    devices[:] = [_lookup_device(k) for k in keys]
    return jax.sharding.Mesh(devices.reshape(shape), axis_names,
                             axis_types=axis_types)


def _reduce(obj):
    """(rebuild, args) for the device-bound objects; NotImplemented otherwise."""
    if isinstance(obj, jax.Device):
        return _lookup_device, (_device_key(obj),)
    if isinstance(obj, jp.DeviceList):
        return _rebuild_device_list, (tuple(_device_key(d) for d in obj),)
    if isinstance(obj, jax.sharding.Mesh):
        keys = tuple(_device_key(d) for d in obj.devices.flat)
        return _rebuild_mesh, (keys, obj.devices.shape, obj.axis_names,
                               obj.axis_types)
    if isinstance(obj, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding, (obj.mesh, obj.spec, obj.memory_kind)
    if isinstance(obj, jax.sharding.SingleDeviceSharding):
        device, = obj.device_set
        return (_single_device_sharding, (device, obj.memory_kind))
    return NotImplemented


def _single_device_sharding(device, memory_kind):
    return jax.sharding.SingleDeviceSharding(device, memory_kind=memory_kind)


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj):
        reduced = _reduce(obj)
        if reduced is not NotImplemented:
            return reduced
        return super().reducer_override(obj)


def serialize(obj) -> bytes:
    with io.BytesIO() as buffer:
        _Pickler(buffer).dump(obj)
        return buffer.getvalue()


def deserialize(data: bytes):
    return cloudpickle.loads(data)
