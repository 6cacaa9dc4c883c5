"""The host-value half of the sharded-array fast path.

Compiled by Cython (typed by ``_shard_arg.pxd``) and runnable as plain Python
(``PMAPKIT_PUREPYTHON=1``), like ``_dispatch`` (whose ``CacheEntry.shard``
walks the arguments and hands host values here).

A ``HostSpec`` puts a numpy array (or a scalar made an array) on the devices
of one compiled input: converted to the compiled dtype, sliced per device by
precomputed index tuples, and sent in one ``batched_device_put``.

A caller's array is read during the put only (``put``): jaxlib would alias an
aligned numpy array on CPU, or copy a large one later on another thread, and
the asynchronous computation would see the caller's later writes. An array
pmapkit made itself for the put (a dtype conversion, a scalar) has no other
holder and goes without that copy (``put_own``). A large input on CPU devices
(``aliases``) is not copied at all: jaxlib reads the caller's array in place
and the call returns once the program has run (``CacheEntry.run`` waits for
its results), so a write after the call still never reaches it.
"""


class HostSpec:
    """How to put a host value for one input: its aval, numpy dtype, the
    per-device index tuples and the devices, all derived once at miss time."""

    def __init__(self, aval, dtype, indices, devices, sharding, device_put,
                 read_during_call, aliases=False):
        self.aval = aval
        self.dtype = dtype
        self.indices = tuple(indices)
        self.devices = list(devices)
        self.sharding = sharding
        self.device_put = device_put
        # The host-buffer semantics that makes ``device_put`` done with a
        # caller's buffer when it returns (jaxlib's value, handed in).
        self.read_during_call = read_during_call
        # Every device takes the whole value (one device, or replicated):
        # it is passed as it is, without a view per device.
        self.whole = all([_is_everything(idx) for idx in self.indices])
        # Devices sharing a slice (a partly replicated layout): jaxlib fails
        # such a put with IMMUTABLE_ONLY_DURING_CALL ("bad_function_call"),
        # so a caller's array is copied whole first and put as our own.
        self.copy_first = not self.whole and _repeats(self.indices)
        # A caller's array is put without a copy (jaxlib aliases it where it
        # can): only for inputs whose calls wait for the program's results
        # before returning (``CacheEntry.host_waits``); never a donated one.
        self.aliases = bool(aliases)

    def put(self, x):
        """The device array of the caller's numpy array ``x``, as it is now
        (later writes to ``x`` do not reach it; with ``aliases``, once the
        call has waited for the program)."""
        # Builtin numpy dtypes are singletons: the usual case is one compare.
        if x.dtype is not self.dtype and x.dtype != self.dtype:
            return self.put_own(x.astype(self.dtype))
        if self.copy_first:
            return self.put_own(x.copy())
        try:
            if self.aliases:
                return self.device_put(self.aval, self.sharding, self._slices(x),
                                       self.devices, True)
            return self.device_put(self.aval, self.sharding, self._slices(x),
                                   self.devices, True, False, self.read_during_call)
        except RuntimeError:
            # jaxlib fails that put ("bad_function_call") wherever two devices'
            # slices share memory, e.g. a stacked ``np.broadcast_to`` view, as
            # classic code replicated parameters: put a private copy instead.
            return self.put_own(x.copy())

    def put_own(self, x):
        """The device array of ``x``, a numpy array nobody else holds (made
        for this put): the CPU client may keep it as the buffer."""
        return self.device_put(self.aval, self.sharding, self._slices(x),
                               self.devices, True)

    def _slices(self, x):
        if self.whole:
            return [x] * len(self.indices)
        return [x[idx] for idx in self.indices]


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


def _repeats(indices):
    """Whether two per-device indices select the same slice."""
    seen = set()
    for index in indices:
        key = repr(index)
        if key in seen:
            return True
        seen.add(key)
    return False


# Cython turns module-level functions into its own function type.
_COMPILED = type(_is_everything).__name__ != "function"

#: The hash of the sources the compiled module was built from (stamped by
#: setup.py; ``_compiled`` refuses a stale one); None in the pure build.
BUILT_FROM = _built_hash() if _COMPILED else None
