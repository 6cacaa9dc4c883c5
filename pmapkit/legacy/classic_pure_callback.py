"""``jax.pure_callback`` under ``jax.vmap`` as the classic releases ran it.

Until JAX 0.4.3x a ``pure_callback`` took ``vectorized=False`` by default:
under ``vmap`` the callback ran once per element of the batch. JAX 0.10 has
no ``vectorized`` (a ``vectorized=`` keyword would now reach the callback
itself, as one of its own keyword arguments) and refuses ``vmap`` unless
``vmap_method`` is given. Under ``pmapkit run`` (``install()``),
``jax.pure_callback`` keeps the classic contract: no ``vmap_method`` means
``"sequential"`` (once per element), ``vectorized=True`` means
``"legacy_vectorized"`` (one call with the batch), and a ``vmap_method`` given
is JAX's, untouched.
"""
from __future__ import annotations

import functools

import jax

_MARK = "_pmapkit_classic_vmap"


def classic_vmap_default() -> bool:
    """Install the classic ``jax.pure_callback`` on ``jax`` (once per
    process); True when this call did."""
    modern = jax.pure_callback
    if getattr(modern, _MARK, False):
        return False

    @functools.wraps(modern)
    def pure_callback(callback, result_shape_dtypes, *args, sharding=None,
                      vmap_method=None, **kwargs):
        vectorized = kwargs.pop("vectorized", None)
        if vmap_method is None:
            vmap_method = "legacy_vectorized" if vectorized else "sequential"
        elif vectorized is not None:
            raise TypeError("pure_callback takes vectorized= (classic) or vmap_method= "
                            "(JAX 0.4.34 and later), not both")
        return modern(callback, result_shape_dtypes, *args, sharding=sharding,
                      vmap_method=vmap_method, **kwargs)

    setattr(pure_callback, _MARK, True)
    jax.pure_callback = pure_callback
    return True
