# Cython declarations augmenting _lru.py (pure-Python-mode source).
cimport cython

from pmapkit.core.hitpath._feed cimport CacheEntry


cdef class SharedCaches:
    cdef readonly dict caches
    cdef readonly dict sig_ids
    cdef readonly dict aval_ids
    cdef readonly dict placed_ids
    cdef readonly object next_id
    cdef readonly object lock
    cdef public bint sign_global
    cdef readonly Py_ssize_t clock
    cdef readonly object members
    cdef public tuple current
    cdef object __weakref__


cpdef CacheEntry insert(SharedCaches shared, dict cache, object key, CacheEntry fresh)

@cython.locals(tick=Py_ssize_t)
cpdef void touch(SharedCaches shared, CacheEntry entry) noexcept

cpdef Py_ssize_t settle(SharedCaches shared, dict cache, object key, CacheEntry entry,
                        bint keep, Py_ssize_t limit) except -1

cpdef bint replace(SharedCaches shared, dict cache, object key, CacheEntry failed,
                   CacheEntry fresh) except -1

@cython.locals(excess=Py_ssize_t, ready=list, order=Py_ssize_t, doomed=list, e=CacheEntry)
cpdef Py_ssize_t evict(SharedCaches shared, dict cache, Py_ssize_t limit) except -1

cdef object _stamp(object item)

@cython.locals(dropped=Py_ssize_t)
cpdef Py_ssize_t evict_all(SharedCaches shared, Py_ssize_t limit) except -1

@cython.locals(entry=CacheEntry)
cpdef clear(SharedCaches shared)

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
