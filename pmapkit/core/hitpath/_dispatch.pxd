# Cython declarations augmenting _dispatch.py (pure-Python-mode source).
cimport cython

cdef class LeafTypes:
    cdef readonly object array_type
    cdef readonly object ndarray_type
    cdef readonly object host_scalar_type
    cdef readonly object asarray
    cdef readonly str sharding_attr
    cdef readonly object raise_deleted
    cdef readonly object key_type


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
    cdef public LeafTypes types
    cdef public tuple donated
    cdef public Py_ssize_t resharded
    cdef public Py_ssize_t n_inputs
    cdef readonly object key
    cdef public list held_scalars
    cdef public tuple host_waits
    cdef public object make_express
    cdef public object express
    cdef public Py_ssize_t express_epoch
    cdef public Py_ssize_t express_builds

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


cdef class SharedCaches:
    cdef readonly dict caches
    cdef readonly dict sig_ids
    cdef readonly dict aval_ids
    cdef readonly dict placed_ids
    cdef readonly object next_id
    cdef readonly object lock
    cdef public bint sign_global
    cdef readonly object newest
    cdef readonly object members
    cdef public tuple current
    cdef object __weakref__


cdef class DispatchFunction:
    cdef dict __dict__
    cdef object __weakref__
    cdef readonly object fun
    cdef readonly object _cache_miss
    cdef readonly tuple _static_argnums
    cdef frozenset _static_set
    cdef Py_ssize_t _max_static
    cdef readonly frozenset _static_names
    cdef readonly bint _sign_shardings
    cdef public bint _sign_global
    cdef LeafTypes _types
    cdef object _array_type
    cdef object _ndarray_type
    cdef object _host_scalar_type
    cdef object _key_type
    cdef str _sharding_attr
    cdef dict _sig_ids
    cdef dict _aval_ids
    cdef dict _placed_ids
    cdef object _next_id
    cdef frozenset _canonical_dtypes
    cdef object _flatten
    cdef object _trace_context
    cdef object _context_state
    cdef object _trace_state
    cdef object _eval_ref
    cdef object _axis_env_state
    cdef object _top_env
    cdef Py_ssize_t _axis_env_index
    cdef object _lower
    cdef object _reduce_fn
    cdef object _describe
    cdef dict _caches
    cdef tuple _current
    cdef readonly Py_ssize_t _cache_size_limit
    cdef readonly Py_ssize_t _misses
    cdef readonly Py_ssize_t _evictions
    cdef object _lock
    cdef public object _on_clear
    cdef tuple _last_key1
    cdef tuple _last_host
    cdef readonly SharedCaches _shared
    cdef readonly CacheEntry _express
    cdef tuple _express_host
    cdef dict _express_cache

    @cython.locals(entry=CacheEntry, fresh=CacheEntry, cache=dict, current=tuple,
                   signed=tuple, top=bint, epoch=Py_ssize_t)
    cdef object _dispatch(self, tuple args, dict kwargs)
    @cython.locals(express=CacheEntry)
    cdef object _run_express(self, tuple args, dict kwargs)
    @cython.locals(host=tuple)
    cdef bint _is_express_host(self, object x) except -1
    @cython.locals(slot=list, last=tuple)
    cdef object _express_first(self, CacheEntry entry, object x, dict cache,
                               Py_ssize_t epoch)
    cdef object _python_call(self, tuple args, dict kwargs)
    cdef tuple _select_context(self, object ctx, object extra)
    @cython.locals(drop=bint)
    cdef object _compile_entry(self, CacheEntry entry, tuple args, dict kwargs,
                               dict cache, object key, object leaves)
    cdef bint _fill(self, CacheEntry entry, object fastpath, object leaves) except -1
    cdef _finish(self, CacheEntry entry, dict cache, object key, bint drop)
    cdef CacheEntry _insert(self, dict cache, object key, CacheEntry fresh)
    @cython.locals(held=CacheEntry, lock=object, key=object)
    cdef _refresh(self, dict cache, CacheEntry entry)
    @cython.locals(fresh=CacheEntry, replace=bint)
    cdef object _retry_failed(self, CacheEntry failed, tuple args, dict kwargs,
                              dict cache, object key, object leaves)
    cdef _set_sign_global(self)
    cdef bint _has_global(self, object leaves) except -1
    @cython.locals(excess=Py_ssize_t, doomed=list, e=CacheEntry, shared=SharedCaches)
    cdef _evict(self, dict cache)

    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, key=list, statics=list, dyn=list,
                   flat=tuple, leaf_id=Py_ssize_t, signed=tuple)
    cdef object _sign(self, tuple args, dict kwargs)
    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, key=list, leaf_id=Py_ssize_t,
                   leaves=list, key1=tuple)
    cdef tuple _sign_simple(self, tuple args, dict kwargs)
    @cython.locals(leaf_id=Py_ssize_t, key1=tuple)
    cdef tuple _sign_one(self, object x)
    @cython.locals(static_kw=list, dyn_kw=dict)
    cdef tuple _split_static_kwargs(self, dict kwargs)

    @cython.locals(leaf_id=object, last=tuple)
    cdef Py_ssize_t _leaf_id(self, object x) except -2
    @cython.locals(by_leaf=dict)
    cdef Py_ssize_t _placed_id(self, Py_ssize_t leaf_id, object sharding) except -2

    cdef object _intern(self, object sig)
    cdef _forget_signatures(self)


cdef bint _COMPILED
cdef Py_ssize_t _express_epoch
cdef object _NOT_EXPRESS
cdef object _EXPRESS_MISSED
cdef Py_ssize_t LIST_MARK
cdef Py_ssize_t TUPLE_MARK

cpdef tuple static_entry(object where, object value)
cdef tuple _special_flags

cdef extern from *:
    """
    /* Whether tuples a and b (n items each) hold the very same objects in
       the same order: one memcmp of their item pointers. */
    static int pmapkit_identical_items(PyObject *a, PyObject *b, Py_ssize_t n) {
        return memcmp(((PyTupleObject *)a)->ob_item, ((PyTupleObject *)b)->ob_item,
                      (size_t)n * sizeof(PyObject *)) == 0;
    }
    """
    bint _identical_items "pmapkit_identical_items" (tuple a, tuple b, Py_ssize_t n)

@cython.locals(a=tuple, b=tuple, n=Py_ssize_t)
cdef bint _same_context(object cached, object ctx) except -1

@cython.locals(i=Py_ssize_t)
cdef bint _same_items(tuple a, tuple b, Py_ssize_t start) except -1

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
    #define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
    #define PY_ARRAY_UNIQUE_SYMBOL pmapkit_dispatch_ARRAY_API
    #include <numpy/arrayobject.h>
    #define PMAPKIT_HOST_ALIGN 64
    static int pmapkit_numpy_loaded = 0;
    static int pmapkit_load_numpy(void) {
        if (!pmapkit_numpy_loaded) {
            if (_import_array() < 0) return -1;
            pmapkit_numpy_loaded = 1;
        }
        return 0;
    }
    static PyObject *pmapkit_copy_host_array(PyObject *x) {
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
       (DispatchFunction._leaf_id), asked without making x's dtype and shape
       objects. -1 with an exception set when numpy's C API cannot load. */
    static int pmapkit_same_host_signature(PyObject *x, PyObject *dt, PyObject *shape) {
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
    """
    object _copy_host_array "pmapkit_copy_host_array" (object x)
    int _same_host_signature "pmapkit_same_host_signature" (object x, object dt, tuple shape) except -1

cpdef object execute_donating(CacheEntry entry, object leaves)

cdef tuple _remember(tuple seen, object sharding)

cdef list _pend(list pending, Py_ssize_t j)

@cython.locals(first=dict, j=Py_ssize_t, i=Py_ssize_t)
cpdef object find_donated_alias(object leaves, tuple donated, LeafTypes leaf_types,
                                object in_place)

cdef extern from *:
    """
    /* setup.py defines it: the SHA-256 of the sources this module was built
       from (pmapkit/core/hitpath/_source_hash.py); empty when built otherwise. */
    #ifndef PMAPKIT_SOURCE_HASH
    #define PMAPKIT_SOURCE_HASH ""
    #endif
    static PyObject *pmapkit_source_hash(void) {
        return PyUnicode_FromString(PMAPKIT_SOURCE_HASH);
    }
    """
    object _built_hash "pmapkit_source_hash" ()
