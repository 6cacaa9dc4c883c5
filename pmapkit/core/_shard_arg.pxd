# Cython declarations augmenting _shard_arg.py (pure-Python-mode source).
cdef class HostSpec:
    cdef readonly object aval
    cdef readonly object dtype
    cdef readonly tuple indices
    cdef readonly list devices
    cdef readonly object sharding
    cdef readonly object device_put
    cdef readonly object read_during_call
    cdef readonly bint whole
    cdef readonly bint copy_first
    cpdef object put(self, object x)
    cpdef object put_own(self, object x)
    cdef list _slices(self, object x)

cdef bint _is_everything(object index) except -1
