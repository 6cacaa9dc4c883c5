# Cython declarations augmenting _feed.py (pure-Python-mode source).
cimport cython

cdef class FastpathData:
    cdef public object version
    cdef public object program
    cdef public Py_ssize_t n_inputs
    cdef public object executable
    cdef public object kept
    cdef public object in_shardings
    cdef public object host_specs
    cdef public object out_handlers
    cdef public object out_treedef
    cdef public object shard_fallback
    cdef public object is_equivalent
    cdef public object mover
    cdef public bint signs_global
    cdef public object donated
    cdef public object host_call
    cdef public object host_refusal
    cdef public object make_express


cdef class LeafTypes:
    cdef readonly object array_type
    cdef readonly object ndarray_type
    cdef readonly object host_scalar_type
    cdef readonly object asarray
    cdef readonly str sharding_attr
    cdef readonly object raise_deleted
    cdef readonly object key_type
    cdef readonly object aval_of
    cdef readonly object sharding_of
    cdef readonly object committed_of
    cdef readonly object is_deleted_of


cdef class CacheEntry:
    cdef public bint ready
    cdef public bint fallback
    cdef public object failure
    cdef public object event
    cdef public object executable
    cdef readonly object execute
    cdef readonly object unflatten
    cdef readonly bint single_out
    cdef public object kept
    cdef public tuple in_shardings
    cdef public tuple host_specs
    cdef public list out_handlers
    cdef public object out_treedef
    cdef public object shard_fallback
    cdef public object host_call
    cdef public object host_refusal
    cdef public object mover
    cdef public object is_equivalent
    cdef public list equivalents
    cdef public list differents
    cdef public list last_equal
    cdef public LeafTypes types
    cdef public tuple donated
    cdef public Py_ssize_t resharded
    cdef public Py_ssize_t n_inputs
    cdef readonly object key
    cdef public Py_ssize_t last_use
    cdef public list held_scalars
    cdef public tuple host_waits
    cdef public object make_express
    cdef public object express
    cdef public Py_ssize_t express_epoch
    cdef public Py_ssize_t express_builds

    @cython.locals(data=FastpathData)
    cpdef populate(self, fastpath, types)

    @cython.locals(outs=object)
    cpdef object run(self, leaves)

    @cython.locals(i=object, wait=object)
    cdef _wait_for_host_reads(self, leaves, outs)

    @cython.locals(leaf_types=LeafTypes, n=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t,
                   out=list, in_shardings=tuple, pending=list, routable=bint,
                   clean=bint, scalar=bint)
    cpdef object shard(self, leaves)

    @cython.locals(held=list, seen=tuple)
    cdef object _held_scalar(self, object x, Py_ssize_t j)

    @cython.locals(leaf_types=LeafTypes, in_shardings=tuple, j=Py_ssize_t)
    cdef bint _host_routable(self, leaves, Py_ssize_t start) except -1

    @cython.locals(j=Py_ssize_t, n=Py_ssize_t, out=list)
    cdef tuple _host_snapshot(self, leaves)

    @cython.locals(flat=list, moved=list, k=Py_ssize_t)
    cdef _move(self, leaves, list out, list pending)

    cdef object _misplaced(self, object x, Py_ssize_t i)

    @cython.locals(seen=tuple)
    cdef bint _seen_equivalent(self, Py_ssize_t j, object have) except -1

    @cython.locals(other=tuple)
    cdef object _first_sight(self, object x, object physical, object have,
                             Py_ssize_t i, Py_ssize_t j)

    cpdef bint aliases_donated(self, leaves) except -1


cdef object DONATION_LOCK

cdef extern from *:
    """
    /* The read-at-call snapshot of a caller's numpy array for JAX's call
       (CacheEntry._host_snapshot): a new C-ordered array of the same dtype
       and shape holding a copy of its bytes, its data 64-byte aligned in a
       bytes object it keeps (XLA:CPU then takes it as the device buffer, as
       it takes an aligned numpy array, without a second copy: the snapshot
       is the one copy). A C-contiguous array of plain data (no object
       references) is copied with one memcpy; anything else by numpy's own copy. numpy's C API is loaded on first
       use. */
    /* Guarded: a module cimporting this .pxd gets this block twice. */
    #ifndef PMAPKIT_HOST_ARRAYS_DEFINED
    #define PMAPKIT_HOST_ARRAYS_DEFINED
    #define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
    #define PY_ARRAY_UNIQUE_SYMBOL pmapkit_dispatch_ARRAY_API
    #include <numpy/arrayobject.h>
    #define PMAPKIT_HOST_ALIGN 64
    static CYTHON_UNUSED int pmapkit_numpy_loaded = 0;
    static CYTHON_UNUSED int pmapkit_load_numpy(void) {
        if (!pmapkit_numpy_loaded) {
            if (_import_array() < 0) return -1;
            pmapkit_numpy_loaded = 1;
        }
        return 0;
    }
    static CYTHON_UNUSED PyObject *pmapkit_copy_host_array(PyObject *x) {
        PyArrayObject *a = (PyArrayObject *)x;
        PyArray_Descr *descr;
        PyObject *store, *out;
        char *data;
        npy_intp nbytes;
        if (pmapkit_load_numpy() < 0) return NULL;
        descr = PyArray_DESCR(a);
        if (!PyArray_IS_C_CONTIGUOUS(a) || PyDataType_REFCHK(descr))
            return PyArray_NewCopy(a, NPY_CORDER);
        nbytes = PyArray_NBYTES(a);
        store = PyBytes_FromStringAndSize(NULL, nbytes + PMAPKIT_HOST_ALIGN);
        if (store == NULL) return NULL;
        data = PyBytes_AS_STRING(store);
        data += (PMAPKIT_HOST_ALIGN - ((size_t)data % PMAPKIT_HOST_ALIGN)) % PMAPKIT_HOST_ALIGN;
        memcpy(data, PyArray_DATA(a), nbytes);
        Py_INCREF(descr);
        out = PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(a), PyArray_DIMS(a),
                                   NULL, data,
                                   NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
        if (out == NULL) {
            Py_DECREF(store);
            return NULL;
        }
        if (PyArray_SetBaseObject((PyArrayObject *)out, store) < 0) {  /* steals store */
            Py_DECREF(out);
            return NULL;
        }
        return out;
    }
    /* Whether numpy array x has dtype object dt (numpy's dtype objects are
       what ``x.dtype`` returns: compared by identity) and the shape of tuple
       ``shape``: the signature of the last numpy leaf signed
       (``same_host_signature``), asked without making x's dtype and shape
       objects. -1 with an exception set when numpy's C API cannot load. */
    static CYTHON_UNUSED int pmapkit_same_host_signature(PyObject *x, PyObject *dt, PyObject *shape) {
        PyArrayObject *a = (PyArrayObject *)x;
        Py_ssize_t n, i;
        npy_intp *dims;
        if (pmapkit_load_numpy() < 0) return -1;
        if ((PyObject *)PyArray_DESCR(a) != dt) return 0;
        n = PyTuple_GET_SIZE(shape);
        if (PyArray_NDIM(a) != n) return 0;
        dims = PyArray_DIMS(a);
        for (i = 0; i < n; i++) {
            PyObject *d = PyTuple_GET_ITEM(shape, i);
            if (!PyLong_CheckExact(d) || PyLong_AsSsize_t(d) != (Py_ssize_t)dims[i]) {
                PyErr_Clear();
                return 0;
            }
        }
        return 1;
    }
    /* The leaves of a call for JAX's call (CacheEntry._host_snapshot): a
       new tuple of the items of ``leaves`` (a tuple or a list), each numpy
       array of exactly ``ndarray_type`` replaced by its snapshot
       (pmapkit_copy_host_array), the rest as they are. */
    static CYTHON_UNUSED PyObject *pmapkit_host_snapshot(PyObject *leaves, PyObject *ndarray_type) {
        PyObject *seq, *out;
        Py_ssize_t n, i;
        seq = PySequence_Fast(leaves, "leaves must be a sequence");
        if (seq == NULL) return NULL;
        n = PySequence_Fast_GET_SIZE(seq);
        out = PyTuple_New(n);
        if (out == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
        for (i = 0; i < n; i++) {
            PyObject *x = PySequence_Fast_GET_ITEM(seq, i), *y;
            if ((PyObject *)Py_TYPE(x) == ndarray_type) {
                y = pmapkit_copy_host_array(x);
                if (y == NULL) {
                    Py_DECREF(seq);
                    Py_DECREF(out);
                    return NULL;
                }
            } else {
                Py_INCREF(x);
                y = x;
            }
            PyTuple_SET_ITEM(out, i, y);
        }
        Py_DECREF(seq);
        return out;
    }
    #endif
    """
    object _copy_host_array "pmapkit_copy_host_array" (object x)
    tuple _snapshot_leaves "pmapkit_host_snapshot" (object leaves, object ndarray_type)
    int _same_host_signature "pmapkit_same_host_signature" (object x, object dt, tuple shape) except -1

cpdef object execute_donating(CacheEntry entry, object leaves)

cdef tuple _remember(tuple seen, object sharding)

cdef list _pend(list pending, Py_ssize_t j)

@cython.locals(first=dict, j=Py_ssize_t, i=Py_ssize_t)
cpdef object find_donated_alias(object leaves, tuple donated, LeafTypes leaf_types,
                                object in_place)

cpdef object host_copy(object x)
cpdef bint same_host_signature(object x, object dtype, tuple shape) except -1

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
