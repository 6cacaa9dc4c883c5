"""The classic placement helpers JAX removed: ``device_put_replicated`` and
``device_put_sharded``.

Both stack per-device values along a new leading axis, one slice per device,
and return arrays placed the way a pmap over ``devices`` takes them (the
sharding an unnamed pmapkit/jax.pmap produces), so they go straight onto
pmapkit's compiled hit path.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pmapkit import _jax_private as jp
from pmapkit.core.sharding.interning import intern_sharding
from pmapkit.core.sharding.specs import INTERNAL_AXIS_NAME

__all__ = ["device_put_replicated", "device_put_sharded"]


def _stacked_sharding(devices):
    mesh = Mesh(np.array(devices, dtype=object), (INTERNAL_AXIS_NAME,))
    return intern_sharding(NamedSharding(mesh, PartitionSpec(INTERNAL_AXIS_NAME)))


def _check_devices(devices, api):
    if not isinstance(devices, Sequence) or isinstance(devices, str) or not devices:
        raise ValueError(f"`devices` argument to `{api} must be a non-empty "
                         f"sequence, got {devices!r}.")
    devices = list(devices)
    for d in devices:
        if not isinstance(d, jax.Device):
            raise TypeError(
                f"{api}: `devices` must be a sequence of jax.Device objects "
                f"(e.g. jax.local_devices()), got an element {d!r} of type "
                f"{type(d).__name__}.")
    if len(set(devices)) != len(devices):
        raise ValueError(f"{api}: `devices` lists a device more than once: {devices}.")
    return devices


def _is_key(aval):
    return jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended)


def _put_stacked(slices, aval, devices):
    """One array of ``aval`` (leading axis = len(devices)) whose slice k is
    ``slices[k]`` (host or device values of the per-device shape)."""
    sharding = _stacked_sharding(devices)
    if _is_key(aval):
        # Typed PRNG keys: place their key data, then view it as keys again.
        data = [jax.random.key_data(s) for s in slices]
        data_aval = jp.shaped_abstractify(data[0])
        placed = _put_stacked(
            data, data_aval.update(shape=(len(devices),) + data_aval.shape), devices)
        return jax.random.wrap_key_data(placed, impl=jax.random.key_impl(slices[0]))
    pieces = [x[None] if isinstance(x, (np.ndarray, jax.Array)) else np.asarray(x)[None]
              for x in slices]
    if all(isinstance(p, jax.Array) and p.devices() == {d}
           for p, d in zip(pieces, devices)):
        # Each slice already lives on its device: assembled where it is, with
        # no transfer (a transfer guard disallowing them lets this through).
        # (ArrayImpl directly: it keeps the aval's weak type.)
        return jp.ArrayImpl(aval, sharding, pieces, committed=True)
    return jp.batched_device_put(aval, sharding, pieces, devices, True)


def device_put_replicated(x, devices):
    """Transfer ``x`` (an array, scalar or pytree of them) to every device of
    ``devices``: the result has a new leading axis of size ``len(devices)``
    whose slice k lives on ``devices[k]`` and equals ``x``."""
    devices = _check_devices(devices, "device_put_replicated")

    def put(leaf):
        aval = jp.shaped_abstractify(leaf)
        stacked = aval.update(shape=(len(devices),) + aval.shape)
        one = jax.device_put(leaf, devices[0])
        return _put_stacked([one] * len(devices), stacked, devices)

    return jax.tree_util.tree_map(put, x)


def device_put_sharded(shards, devices):
    """Stack ``shards`` (one array or pytree per device, all of one shape and
    dtype) along a new leading axis, slice k placed on ``devices[k]``."""
    if not isinstance(shards, Sequence) or isinstance(shards, str):
        raise TypeError("device_put_sharded `shards` input must be a sequence; "
                        f"got {type(shards)}")
    devices = _check_devices(devices, "device_put_sharded")
    if len(shards) != len(devices):
        raise ValueError(f"len(shards) = {len(shards)} must equal "
                         f"len(devices) = {len(devices)}.")

    def put(*xs):
        avals = [jp.shaped_abstractify(x) for x in xs]
        for a, b in zip(avals, avals[1:]):
            if a != b:
                raise ValueError(
                    "the shards passed to device_put_sharded must have "
                    f"consistent shape and dtype, but got {a.str_short()} and "
                    f"{b.str_short()}.")
        stacked = avals[0].update(shape=(len(devices),) + avals[0].shape)
        return _put_stacked(list(xs), stacked, devices)

    return jax.tree_util.tree_map(put, *shards)
