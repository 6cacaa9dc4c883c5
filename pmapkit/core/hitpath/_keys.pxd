# Cython declarations augmenting _keys.py (pure-Python-mode source).
cimport cython

cdef bint _COMPILED

cpdef tuple static_entry(object where, object value)

cdef extern from *:
    """
    /* Whether tuples a and b (n items each) hold the very same objects in
       the same order: one memcmp of their item pointers. */
    #ifndef PMAPKIT_IDENTICAL_ITEMS_DEFINED
    #define PMAPKIT_IDENTICAL_ITEMS_DEFINED
    static CYTHON_UNUSED int pmapkit_identical_items(PyObject *a, PyObject *b, Py_ssize_t n) {
        return memcmp(((PyTupleObject *)a)->ob_item, ((PyTupleObject *)b)->ob_item,
                      (size_t)n * sizeof(PyObject *)) == 0;
    }
    #endif
    """
    bint _identical_items "pmapkit_identical_items" (tuple a, tuple b, Py_ssize_t n)

@cython.locals(a=tuple, b=tuple, n=Py_ssize_t)
cpdef bint same_context(object cached, object ctx) except -1

@cython.locals(i=Py_ssize_t)
cdef bint _same_items(tuple a, tuple b, Py_ssize_t start) except -1

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
