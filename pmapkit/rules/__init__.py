"""Transformation rules of pmapkit's primitives, registered on import.

One module per transformation: jvp, batching (vmap), partial evaluation
(linearize / grad), transpose, dead-code elimination.
"""
from pmapkit.rules import batching, dce, jvp, partial_eval, remat, transpose  # noqa: F401
