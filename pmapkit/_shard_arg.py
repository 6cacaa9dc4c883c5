"""The host-value half of the sharded-array fast path.

Compiled by Cython (typed by ``_shard_arg.pxd``) and runnable as plain Python
(``PMAPKIT_PUREPYTHON=1``), like ``_dispatch`` (whose ``CacheEntry.shard``
walks the arguments and hands host values here).

A ``HostSpec`` puts a numpy array (or a scalar made an array) on the devices
of one compiled input: converted to the compiled dtype, sliced per device by
precomputed index tuples, and sent in one ``batched_device_put``.
"""


class HostSpec:
    """How to put a host value for one input: its aval, numpy dtype, the
    per-device index tuples and the devices, all derived once at miss time."""

    def __init__(self, aval, dtype, indices, devices, sharding, device_put):
        self.aval = aval
        self.dtype = dtype
        self.indices = tuple(indices)
        self.devices = list(devices)
        self.sharding = sharding
        self.device_put = device_put

    def put(self, x):
        if x.dtype != self.dtype:
            x = x.astype(self.dtype)
        slices = [x[idx] for idx in self.indices]
        return self.device_put(self.aval, self.sharding, slices, self.devices, True)
