# Cython declarations augmenting _dispatch.py (pure-Python-mode source).
cimport cython

from pmapkit.core.hitpath._express cimport ExpressCall, express_arguments, express_epoch, prime
from pmapkit.core.hitpath._feed cimport (CacheEntry, LeafTypes, execute_donating,
                                         same_host_signature)
from pmapkit.core.hitpath._keys cimport same_context, static_entry
from pmapkit.core.hitpath._lru cimport SharedCaches, clear, evict_all, insert, touch
from pmapkit.core.hitpath._miss cimport MissPath

cdef object _NOT_EXPRESS
cdef Py_ssize_t LIST_MARK
cdef Py_ssize_t TUPLE_MARK


cdef class DispatchFunction(MissPath):
    cdef dict __dict__
    cdef object __weakref__
    cdef void *_vectorcall
    cdef readonly object fun
    cdef readonly tuple _static_argnums
    cdef frozenset _static_set
    cdef Py_ssize_t _max_static
    cdef readonly frozenset _static_names
    cdef readonly bint _sign_shardings
    cdef object _array_type
    cdef object _ndarray_type
    cdef object _host_scalar_type
    cdef object _key_type
    cdef str _sharding_attr
    cdef object _aval_of
    cdef object _sharding_of
    cdef object _committed_of
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
    cdef object _value_of
    cdef object _lower
    cdef object _reduce_fn
    cdef object _describe
    cdef dict _caches
    cdef tuple _current
    cdef public object _on_clear
    cdef tuple _last_key1
    cdef tuple _prev_key1
    cdef tuple _last_keyn
    cdef tuple _prev_keyn
    cdef tuple _last_host
    cdef readonly ExpressCall _express

    @cython.locals(entry=CacheEntry, fresh=CacheEntry, cache=dict, current=tuple,
                   signed=tuple, top=bint, epoch=Py_ssize_t, express=ExpressCall)
    cdef object _dispatch(self, tuple args, dict kwargs)
    cdef _keep_express(self, CacheEntry entry, dict cache, tuple args)
    cdef tuple _select_context(self, object ctx, object extra)

    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, key=list, statics=list, dyn=list,
                   flat=tuple, leaf_id=Py_ssize_t, signed=tuple)
    cdef object _sign(self, tuple args, dict kwargs)
    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, key=list, leaf_id=Py_ssize_t,
                   leaves=list, key1=tuple)
    cdef tuple _sign_simple(self, tuple args, dict kwargs)
    @cython.locals(leaf_id=Py_ssize_t, key1=tuple, prev=tuple)
    cdef tuple _sign_one(self, object x)
    @cython.locals(nargs=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t, leaf_id=Py_ssize_t,
                   last=tuple, key=list, fresh=tuple, prev=tuple)
    cdef tuple _sign_leaves(self, tuple args)
    @cython.locals(static_kw=list, dyn_kw=dict)
    cdef tuple _split_static_kwargs(self, dict kwargs)

    @cython.locals(leaf_id=object, last=tuple)
    cdef Py_ssize_t _leaf_id(self, object x) except -2
    @cython.locals(by_leaf=dict)
    cdef Py_ssize_t _placed_id(self, Py_ssize_t leaf_id, object sharding) except -2

    cdef object _intern(self, object sig)
    cdef _forget_signatures(self)


cdef bint _COMPILED
cdef tuple _special_flags

@cython.locals(called=DispatchFunction)
cdef object _vector_entry(object fn, tuple args, dict kwargs)

cdef extern from *:
    """
    /* DispatchFunction called by vectorcall (PEP 590): the arguments come
       as the caller's stack, not as a tuple and a dict made for tp_call
       (and a new empty dict per call for **kwargs). The type gets the
       vectorcall flag and the offset of each instance's _vectorcall field
       at import (pmapkit_install_vectorcall); an instance whose field is
       NULL is called through tp_call, as before. */
    #include <stddef.h>
    #define PMAPKIT_VECTORCALL_OFFSET \
        ((Py_ssize_t)offsetof(struct __pyx_obj_7pmapkit_4core_7hitpath_9_dispatch_DispatchFunction, _vectorcall))
    typedef PyObject *(*pmapkit_entry_t)(PyObject *, PyObject *, PyObject *);
    static pmapkit_entry_t pmapkit_entry = NULL;
    static PyObject *pmapkit_no_kwargs = NULL;
    static PyObject *pmapkit_vectorcall(PyObject *self, PyObject *const *args,
                                        size_t nargsf, PyObject *kwnames) {
        Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk, i;
        PyObject *tuple, *kwargs, *out;
        tuple = PyTuple_New(n);
        if (tuple == NULL) return NULL;
        for (i = 0; i < n; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(tuple, i, args[i]);
        }
        nk = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
        if (nk == 0) {
            kwargs = pmapkit_no_kwargs;
            Py_INCREF(kwargs);
        } else {
            kwargs = PyDict_New();
            if (kwargs == NULL) {
                Py_DECREF(tuple);
                return NULL;
            }
            for (i = 0; i < nk; i++) {
                if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[n + i]) < 0) {
                    Py_DECREF(tuple);
                    Py_DECREF(kwargs);
                    return NULL;
                }
            }
        }
        out = pmapkit_entry(self, tuple, kwargs);
        Py_DECREF(tuple);
        Py_DECREF(kwargs);
        return out;
    }
    static void *pmapkit_vectorcall_function(void) {
        return (void *)pmapkit_vectorcall;
    }
    static int pmapkit_install_vectorcall(PyObject *type, Py_ssize_t offset,
                                          pmapkit_entry_t entry) {
        PyTypeObject *t = (PyTypeObject *)type;
        if (pmapkit_no_kwargs == NULL) {
            pmapkit_no_kwargs = PyDict_New();
            if (pmapkit_no_kwargs == NULL) return -1;
        }
        pmapkit_entry = entry;
        t->tp_vectorcall_offset = offset;
        t->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
        PyType_Modified(t);
        return 0;
    }
    """
    ctypedef object (*_entry_t)(object, tuple, dict)
    Py_ssize_t _VECTORCALL_OFFSET "PMAPKIT_VECTORCALL_OFFSET"
    void *_vectorcall_function "pmapkit_vectorcall_function" ()
    int _install_vectorcall "pmapkit_install_vectorcall" (object type, Py_ssize_t offset,
                                                           _entry_t entry) except -1

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
