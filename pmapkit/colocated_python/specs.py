"""Input/output specs of colocated functions and what a specialization fixes.

A spec is a ``jax.ShapeDtypeStruct`` with a sharding; a pytree of specs is kept
flat, as ``(treedef, leaves)``. A ``Specialization`` records what the caller
pinned with ``specialize(...)`` and what the first call discovered; each field
can be set once.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from pmapkit import _jax_private as jp

ShapeDtypeStruct = jax.ShapeDtypeStruct
NOT_AN_ARRAY = ("colocated_python only supports jax.Array as input and output, "
                "but got {}.")


def array_spec(x) -> ShapeDtypeStruct:
    """The spec of one argument or result, which must be a concrete jax.Array."""
    if not isinstance(x, jax.Array):
        raise ValueError(NOT_AN_ARRAY.format(type(x)))
    if isinstance(x, jp.Tracer):
        raise TypeError(
            "colocated_python functions run outside JAX transformations; got a "
            f"traced value {x} (do not call them inside jit/vmap/grad).")
    return ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)


def device_list_of(leaves):
    """The one device list every argument lives on, or None without arguments."""
    found = set()
    for x in leaves:
        found.add(x.sharding._internal_device_list)
    if not found:
        return None
    if len(found) != 1:
        raise ValueError("All arguments must use the same device list, but got "
                         f"multiple device lists: {found}.")
    return found.pop()


def list_outside(leaves, devices):
    """The device list of the first argument not on ``devices`` (in any
    order, all or some of them), or None when every argument is."""
    allowed = set(devices)
    for x in leaves:
        if not x.sharding.device_set <= allowed:
            return x.sharding._internal_device_list
    return None


def as_device_list(devices, what="devices"):
    """``devices`` (a non-empty sequence of jax.Device, or a DeviceList) as a
    DeviceList; a clear TypeError/ValueError otherwise."""
    if isinstance(devices, jp.DeviceList):
        return devices
    if isinstance(devices, jax.Device) or not hasattr(devices, "__iter__"):
        raise TypeError(f"{what} must be a sequence of jax.Device, got "
                        f"{type(devices).__name__}: {devices!r}")
    devices = tuple(devices)
    if not devices:
        raise ValueError(f"{what} must not be empty")
    for d in devices:
        if not isinstance(d, jax.Device):
            raise TypeError(f"{what} must be a sequence of jax.Device, but it "
                            f"holds {type(d).__name__}: {d!r}")
    return jp.DeviceList(devices)


def flatten_specs(specs, what):
    """A pytree of ShapeDtypeStruct as (treedef, leaves)."""
    leaves, treedef = jax.tree_util.tree_flatten(specs)
    for leaf in leaves:
        if not isinstance(leaf, ShapeDtypeStruct):
            raise TypeError(f"{what} must be a pytree of jax.ShapeDtypeStruct, "
                            f"but it holds {type(leaf).__name__}: {leaf!r}")
    return treedef, tuple(leaves)


@dataclasses.dataclass(frozen=True)
class Specialization:
    """What is fixed about a colocated function; ``None`` means "not yet"."""
    in_specs: tuple[Any, tuple[ShapeDtypeStruct, ...]] | None = None
    out_specs_fn: Callable[..., Any] | None = None
    out_specs: tuple[Any, tuple[ShapeDtypeStruct, ...]] | None = None
    devices: Any = None  # a DeviceList

    def updated(self, *, in_specs=None, out_specs_fn=None, out_specs=None,
                devices=None) -> Specialization:
        """A copy with the given fields set; each may be set only once."""
        changes = {}
        for name, value in (("in_specs", in_specs), ("out_specs_fn", out_specs_fn),
                            ("out_specs", out_specs), ("devices", devices)):
            if value is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"{name} already specified")
            changes[name] = value
        return dataclasses.replace(self, **changes) if changes else self
