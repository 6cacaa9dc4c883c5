"""Check helpers shared by the transformation-rule test modules."""
import jax
import numpy as np
from jax.extend import core as jex_core

import pmapkit

N = 8      # devices (tests/conftest.py)
TOL = 1e-5


def check(out, ref, tol=TOL):
    """``out`` is a pytree of jax.Arrays equal to ``ref`` in structure,
    shapes, dtypes and values (floats to ``tol``, others exactly)."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref_leaves, ref_tree = jax.tree_util.tree_flatten(ref)
    assert out_tree == ref_tree, f"tree mismatch: {out_tree} vs {ref_tree}"
    for o, r in zip(out_leaves, ref_leaves):
        r = np.asarray(r)
        assert isinstance(o, jax.Array), type(o)
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        if np.issubdtype(r.dtype, np.inexact):
            np.testing.assert_allclose(np.asarray(o, np.float64), r.astype(np.float64),
                                       rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(np.asarray(o), r)


def data(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def both(fn, **kw):
    """(pmapkit.pmap(fn), jax.pmap(fn)) with the same options."""
    return pmapkit.pmap(fn, **kw), jax.pmap(fn, **kw)


def sub_jaxprs(value):
    """The Jaxprs in one equation param (a Jaxpr, ClosedJaxpr or tuple of them)."""
    if isinstance(value, jex_core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jex_core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from sub_jaxprs(v)
