"""Transformation rules of pmapkit's primitives, registered on import.

One module per transformation: jvp, batching (vmap), partial evaluation
(linearize / grad), transpose, dead-code elimination, checkpoint, and the
typecheck rules of ``jax_enable_checks``.
"""
from pmapkit.rules import (  # noqa: F401
    batching, dce, jvp, partial_eval, remat, transpose, typecheck)
