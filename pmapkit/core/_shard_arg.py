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
        # Every device takes the whole value (one device, or replicated):
        # it is passed as it is, without a view per device.
        self.whole = all([_is_everything(idx) for idx in self.indices])

    def put(self, x):
        # Builtin numpy dtypes are singletons: the usual case is one compare.
        if x.dtype is not self.dtype and x.dtype != self.dtype:
            x = x.astype(self.dtype)
        if self.whole:
            slices = [x] * len(self.indices)
        else:
            slices = [x[idx] for idx in self.indices]
        return self.device_put(self.aval, self.sharding, slices, self.devices, True)


def _is_everything(index):
    """Whether a per-device index (a tuple of slices) selects every element
    of any value: each of its slices is ``slice(None)``."""
    if type(index) is not tuple:
        return False
    for s in index:
        if (type(s) is not slice or s.start is not None or s.stop is not None
                or s.step is not None):
            return False
    return True


# Cython turns module-level functions into its own function type.
_COMPILED = type(_is_everything).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
