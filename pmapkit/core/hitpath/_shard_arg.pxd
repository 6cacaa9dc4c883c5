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
    cdef readonly bint aliases
    cpdef object put(self, object x)
    cpdef object put_own(self, object x)
    cdef list _slices(self, object x)

cpdef bint _is_everything(object index) except -1
cdef bint _COMPILED

cdef extern from *:
    """
    /* setup.py defines it: the SHA-256 of the sources this module was built
       from (pmapkit/core/hitpath/_source_hash.py); empty when built otherwise. */
    #ifndef PMAPKIT_SOURCE_HASH
    #define PMAPKIT_SOURCE_HASH ""
    #endif
    /* Guarded: a module cimporting another's .pxd gets this block twice. */
    #ifndef PMAPKIT_SOURCE_HASH_DEFINED
    #define PMAPKIT_SOURCE_HASH_DEFINED
    static CYTHON_UNUSED PyObject *pmapkit_source_hash(void) {
        return PyUnicode_FromString(PMAPKIT_SOURCE_HASH);
    }
    #endif
    """
    object _built_hash "pmapkit_source_hash" ()
