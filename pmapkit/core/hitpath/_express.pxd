# Cython declarations augmenting _express.py (pure-Python-mode source).
cimport cython

from pmapkit.core.hitpath._feed cimport CacheEntry, host_copy, same_host_signature
from pmapkit.core.hitpath._lru cimport SharedCaches, touch

cdef object _EXPRESS_MISSED
cdef Py_ssize_t _express_epoch

cpdef Py_ssize_t express_epoch()

@cython.locals(slot=list)
cpdef object prime(CacheEntry entry, object x, Py_ssize_t epoch)


cdef class ExpressCall:
    cdef readonly CacheEntry entry
    cdef object ndarray_type
    cdef object dtype
    cdef tuple shape
    cdef dict cache
    cdef SharedCaches shared
    cdef readonly bint live

    @cython.locals(entry=CacheEntry)
    cpdef object run(self, object x)


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
