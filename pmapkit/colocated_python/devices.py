"""``colocated_cpu_devices``: the CPU devices on the same hosts as given devices."""
from __future__ import annotations

import collections
import functools

import jax
import numpy as np


def colocated_cpu_devices(devices_or_mesh):
    """The CPU device next to each given device, in the same order (a list);
    for a ``jax.sharding.Mesh``, a mesh of the same shape and axes over them.
    CPU devices map to themselves."""
    if isinstance(devices_or_mesh, jax.sharding.Mesh):
        return _cpu_mesh(devices_or_mesh)
    if isinstance(devices_or_mesh, jax.Device) or not hasattr(devices_or_mesh, "__iter__"):
        raise TypeError("colocated_cpu_devices expects a sequence of jax.Device or a "
                        f"jax.sharding.Mesh, got {type(devices_or_mesh).__name__}")
    devices = tuple(devices_or_mesh)
    for d in devices:
        if not isinstance(d, jax.Device):
            raise TypeError("colocated_cpu_devices expects a sequence of jax.Device, "
                            f"but it holds {type(d).__name__}: {d!r}")
    return list(_cpu_devices(devices))


@functools.lru_cache(maxsize=1024)
def _cpu_devices(devices):
    if all(d.platform == "cpu" for d in devices):
        return devices
    by_colocation = collections.defaultdict(list)
    for d in _all_cpu_devices(devices[0]):
        colocation = getattr(d, "colocation_id", None)
        by_colocation[colocation if colocation is not None else ("process", d.process_index)].append(d)
    if not by_colocation:
        raise ValueError("No CPU devices found")
    taken = collections.Counter()
    out = []
    for d in devices:
        if d.platform == "cpu":
            out.append(d)
            continue
        colocation = getattr(d, "colocation_id", None)
        if colocation is not None and colocation in by_colocation:
            matches = by_colocation[colocation]
            if len(matches) > 1:
                raise ValueError(f"Ambiguous colocated devices; device {d} has "
                                 f"{len(matches)} colocated devices: {matches}")
            out.append(matches[0])
            continue
        # No colocation ids: pair with this process's CPU devices, in order.
        pool = by_colocation[("process", d.process_index)]
        k = taken[d.process_index]
        if k >= len(pool):
            raise ValueError(f"Process {d.process_index} does not have enough "
                             "local CPU devices")
        taken[d.process_index] += 1
        out.append(pool[k])
    return tuple(out)


def _all_cpu_devices(device):
    cpu = [d for d in device.client._get_all_devices() if d.platform == "cpu"]
    return cpu or jax.devices("cpu")


@functools.lru_cache(maxsize=256)
def _cpu_mesh(mesh):
    cpu = _cpu_devices(tuple(mesh.devices.flat))
    grid = np.empty(len(cpu), dtype=object)
    grid[:] = cpu
    if all(a is b for a, b in zip(cpu, mesh.devices.flat)):
        return mesh
    return jax.sharding.Mesh(grid.reshape(mesh.devices.shape), mesh.axis_names,
                             axis_types=mesh.axis_types)
