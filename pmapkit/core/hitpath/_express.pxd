# Cython declarations augmenting _express.py (pure-Python-mode source).
cimport cython

from pmapkit.core.hitpath._feed cimport CacheEntry, LeafTypes, host_copy, same_host_signature
from pmapkit.core.hitpath._lru cimport SharedCaches, touch

cdef object _EXPRESS_MISSED
cdef Py_ssize_t _express_epoch

cpdef Py_ssize_t express_epoch()

@cython.locals(i=Py_ssize_t)
cdef bint _same_objects(tuple args, tuple snapshot)

@cython.locals(host=bint, i=Py_ssize_t)
cpdef bint express_arguments(tuple args, LeafTypes leaf_types) except -1

@cython.locals(slot=list, snapshot=tuple)
cpdef object prime(CacheEntry entry, tuple args, Py_ssize_t epoch)


cdef class ExpressCall:
    cdef readonly CacheEntry entry
    cdef object ndarray_type
    cdef object array_type
    cdef tuple host
    cdef Py_ssize_t nargs
    cdef object dtype
    cdef tuple shape
    cdef dict cache
    cdef SharedCaches shared
    cdef readonly bint live

    @cython.locals(entry=CacheEntry, host=tuple, signature=tuple, i=Py_ssize_t)
    cpdef object run(self, tuple args)


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
