# Cython declarations augmenting _dispatch.py (pure-Python-mode source).
cimport cython

cdef class CacheEntry:
    cdef public bint ready
    cdef public bint fallback
    cdef public object error
    cdef public object event
    cdef public object fastpath
    cdef public object executable
    cdef public object kept
    cdef public tuple in_shardings
    cdef public tuple host_specs
    cdef public list out_handlers
    cdef public object out_treedef
    cdef public object shard_fallback


cdef class DispatchFunction:
    cdef dict __dict__
    cdef object __weakref__
    cdef readonly object fun
    cdef readonly object _cache_miss
    cdef readonly tuple _static_argnums
    cdef frozenset _static_set
    cdef Py_ssize_t _max_static
    cdef object _shard_args
    cdef object _array_type
    cdef object _ndarray_type
    cdef object _host_scalar_type
    cdef frozenset _canonical_dtypes
    cdef object _flatten
    cdef object _trace_context
    cdef object _trace_state
    cdef object _eval_ref
    cdef object _axis_env_state
    cdef object _top_env
    cdef object _lower
    cdef object _reduce_fn
    cdef dict _caches
    cdef tuple _current
    cdef public bint _always_fallback

    cdef bint _is_top_level(self)
    cdef tuple _select_context(self, object ctx)
    cdef object _compile_entry(self, CacheEntry entry, tuple args, dict kwargs)

    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, key=list, statics=list, dyn=list,
                   leaves=list, flat=tuple)
    cdef object _sign(self, tuple args, dict kwargs)
