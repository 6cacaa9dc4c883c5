"""The sharded-array fast path: turn flat call leaves into the device arrays
one cache entry's executable expects.

Compiled by Cython (typed by ``_shard_arg.pxd``) and runnable as plain Python
(``PMAPKIT_PUREPYTHON=1``), like ``_dispatch``.

Per kept input ``j`` (leaf ``kept[j]``) the entry holds the sharding the
program was compiled for (``in_shardings[j]``) and, for host values, a
``HostSpec``. A device array already carrying that exact sharding is passed
as is (no copy); numpy arrays and Python scalars are sliced and put per device
in one ``batched_device_put``; anything else goes to the entry's Python
``shard_fallback`` (resharding, zero-copy re-views of equivalent shardings).
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


def make_shard_args(array_type, ndarray_type, host_scalar_type, asarray):
    """Build the ``shard_args(leaves, entry)`` function for one array type."""

    def shard_args(leaves, entry):
        kept = entry.kept
        in_shardings = entry.in_shardings
        host_specs = entry.host_specs
        fallback = entry.shard_fallback
        n = len(in_shardings)
        out = [None] * n
        for j in range(n):
            i = j if kept is None else kept[j]
            x = leaves[i]
            t = type(x)
            if t is array_type:
                want = in_shardings[j]
                have = x.sharding
                if have is want or have == want:
                    # A donated or deleted array must raise, not reach XLA.
                    if x.is_deleted():
                        x._check_if_deleted()
                    out[j] = x
                else:
                    out[j] = fallback(x, i, j)
            elif t is ndarray_type:
                out[j] = host_specs[j].put(x)
            elif (t is float or t is int or t is bool or t is complex
                  or isinstance(x, host_scalar_type)):
                spec = host_specs[j]
                out[j] = spec.put(asarray(x, spec.dtype))
            else:
                out[j] = fallback(x, i, j)
        return out

    return shard_args
