"""pmapkit: JAX's classic parallel dispatch layer, compiled, on jax 0.10.

Public surface (explicit re-exports only):
  pmap           the classic jax.pmap with a compiled per-call fast path
  COMPILED       True when the Cython dispatch core is in use
"""
from pmapkit._compiled import COMPILED
from pmapkit.pmap import pmap

__all__ = ["COMPILED", "pmap"]
__version__ = "0.1.0"
