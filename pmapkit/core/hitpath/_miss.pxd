# Cython declarations augmenting _miss.py (pure-Python-mode source).
cimport cython

from pmapkit.core.hitpath._feed cimport CacheEntry, FastpathData, LeafTypes
from pmapkit.core.hitpath._lru cimport SharedCaches, replace, settle


cdef class MissPath:
    cdef readonly object _cache_miss
    cdef LeafTypes _types
    cdef readonly SharedCaches _shared
    cdef public bint _sign_global
    cdef readonly Py_ssize_t _cache_size_limit
    cdef readonly Py_ssize_t _misses
    cdef readonly Py_ssize_t _evictions

    cdef object _python_call(self, tuple args, dict kwargs)
    @cython.locals(drop=bint)
    cdef object _compile_entry(self, CacheEntry entry, tuple args, dict kwargs,
                               dict cache, object key, object leaves)
    @cython.locals(data=FastpathData)
    cdef bint _fill(self, CacheEntry entry, object fastpath, object leaves) except -1
    cdef _finish(self, CacheEntry entry, dict cache, object key, bint drop)
    @cython.locals(fresh=CacheEntry)
    cdef object _retry_failed(self, CacheEntry failed, tuple args, dict kwargs,
                              dict cache, object key, object leaves)
    @cython.locals(shared=SharedCaches, member=MissPath)
    cdef _set_sign_global(self)
    cdef bint _has_global(self, object leaves) except -1


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
